"""Where probe sockets live, and the checks that keep other users out of that directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gputui.errors import UserError
from gputui.link import paths

AS_ROOT = pytest.mark.skipif(os.getuid() != 0, reason="handing a directory to another uid needs root")


@pytest.fixture
def fallback_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(paths, "FALLBACK_ROOT", root)
    monkeypatch.setattr(paths, "RUNTIME_ROOT", tmp_path / "run-user")  # logind's, empty here
    return root


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_runtime_dir_is_preferred_and_created_private(tmp_path, fallback_root):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert paths.probe_dir(env) == runtime / "gputui"
    assert mode(runtime / "gputui") == 0o700
    assert paths.candidate_dirs(env) == [runtime / "gputui", fallback_root / f"gputui-{os.getuid()}"]


def test_fallback_without_runtime_dir(fallback_root):
    directory = paths.probe_dir({})
    assert directory == fallback_root / f"gputui-{os.getuid()}"
    assert mode(directory) == 0o700
    assert paths.probe_dir({}) == directory  # a second call accepts the one it made


def test_private_even_with_a_permissive_umask(fallback_root):
    old = os.umask(0)
    try:
        assert mode(paths.probe_dir({})) == 0o700
    finally:
        os.umask(old)


@AS_ROOT
def test_runtime_dir_of_another_user_is_skipped(tmp_path, fallback_root):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 65534, 65534)
    assert paths.probe_dir({"XDG_RUNTIME_DIR": str(runtime)}) == fallback_root / "gputui-0"
    assert not (runtime / "gputui").exists()


@AS_ROOT
def test_fallback_owned_by_another_user_is_refused(fallback_root):
    planted = fallback_root / f"gputui-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    with pytest.raises(paths.ProbeDirUnsafe, match="belongs to uid 65534, not to you"):
        paths.probe_dir({})


def test_directory_open_to_others_is_refused(fallback_root):
    planted = fallback_root / f"gputui-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o755)
    with pytest.raises(paths.ProbeDirUnsafe, match="open to other users .mode 755.; run: chmod 700"):
        paths.probe_dir({})
    assert mode(planted) == 0o755  # refused, not silently changed


def test_symlink_is_refused(tmp_path, fallback_root):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (fallback_root / f"gputui-{os.getuid()}").symlink_to(target)
    with pytest.raises(paths.ProbeDirUnsafe, match="is a symlink"):
        paths.probe_dir({})


def test_plain_file_is_refused(fallback_root):
    (fallback_root / f"gputui-{os.getuid()}").write_text("")
    with pytest.raises(paths.ProbeDirUnsafe, match="is not a directory"):
        paths.probe_dir({})


def test_override_is_the_only_directory_and_is_checked(tmp_path, fallback_root):
    chosen = tmp_path / "mine"
    env = {paths.DIR_ENV: str(chosen), "XDG_RUNTIME_DIR": str(tmp_path)}
    assert paths.candidate_dirs(env) == [chosen]
    assert paths.probe_dir(env) == chosen and mode(chosen) == 0o700
    chosen.chmod(0o777)
    with pytest.raises(paths.ProbeDirUnsafe):
        paths.probe_dir(env)
    assert paths.search_dirs(env) == []


def test_search_dirs_lists_only_existing_safe_directories(tmp_path, fallback_root):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert paths.search_dirs(env) == []
    paths.probe_dir({})  # the fallback, as a job without XDG_RUNTIME_DIR makes it
    assert paths.search_dirs(env) == [fallback_root / f"gputui-{os.getuid()}"]
    paths.probe_dir(env)
    assert paths.search_dirs(env) == [runtime / "gputui", fallback_root / f"gputui-{os.getuid()}"]


def test_a_monitor_without_xdg_runtime_dir_still_finds_a_job_that_had_one(tmp_path, fallback_root):
    # The job ran in a login session: its socket is under logind's /run/user/<uid>.
    runtime = tmp_path / "run-user" / str(os.getuid())
    runtime.mkdir(parents=True, mode=0o700)
    made = paths.probe_dir({"XDG_RUNTIME_DIR": str(runtime)})
    # The monitor runs from `su` or a bare ssh command: no XDG_RUNTIME_DIR, yet it looks there.
    assert paths.search_dirs({}) == [made]


def test_unsafe_directories_are_named_with_why(tmp_path, fallback_root):
    planted = fallback_root / f"gputui-{os.getuid()}"
    planted.mkdir(mode=0o700)
    planted.chmod(0o777)
    assert paths.search_dirs({}) == []
    assert paths.refused_dirs({}) == [
        (planted, f"the probe directory {planted} is open to other users (mode 777); run: chmod 700 {planted}")]


def test_unsafe_directory_is_a_user_error():
    assert issubclass(paths.ProbeDirUnsafe, UserError)


def test_socket_path_is_named_after_the_pid_and_its_namespace(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "pid_namespace", lambda: paths.INITIAL_PID_NAMESPACE)
    assert paths.socket_path(4242, tmp_path) == tmp_path / "4242.sock"
    assert paths.parse_socket_name(tmp_path / "4242.sock") == (4242, None)
    # In a container: the same pid in another namespace gets another name.
    monkeypatch.setattr(paths, "pid_namespace", lambda: 4026532301)
    assert paths.socket_path(4242, tmp_path) == tmp_path / "4242@4026532301.sock"
    assert paths.parse_socket_name(tmp_path / "4242@4026532301.sock") == (4242, 4026532301)


def test_this_process_knows_its_pid_namespace():
    assert paths.pid_namespace() == os.stat(f"/proc/{os.getpid()}/ns/pid").st_ino


@pytest.mark.parametrize("name", ["abc.sock", "12.sock.tmp", ".12.sock.ab12.tmp", "0.sock",
                                  "-3.sock", "12", "١٢.sock", ".0123abcd.tmp", "12@.sock", "@5.sock",
                                  "12@x.sock", "12@4026531836.sock", "12@5@6.sock"])
def test_other_files_are_not_taken_for_sockets(tmp_path, name):
    assert paths.parse_socket_name(tmp_path / name) is None


def test_too_long_socket_path_is_refused(tmp_path):
    deep = tmp_path / ("d" * 120)
    with pytest.raises(paths.ProbeDirUnsafe, match="too long for a Unix socket"):
        paths.socket_path(1, deep)


def test_longest_accepted_path_leaves_room_for_the_temporary_bind_name():
    directory = Path("/" + "d" * (paths.MAX_SOCKET_PATH - 1 - len("7.sock") - paths.TEMP_EXTRA_LENGTH - 1))
    assert len(str(directory / paths.temp_socket_name("7.sock", "0123abcd"))) == paths.MAX_SOCKET_PATH
    assert paths.socket_path(7, directory) == directory / "7.sock"
    with pytest.raises(paths.ProbeDirUnsafe):
        paths.socket_path(7, Path(str(directory) + "d"))


@AS_ROOT
def test_every_users_dirs_accepts_only_directories_owned_by_the_uid_they_name(tmp_path,
                                                                              fallback_root,
                                                                              monkeypatch):
    runtime_root = tmp_path / "run-user"
    monkeypatch.setattr(paths, "RUNTIME_ROOT", runtime_root)

    def make(path, owner, mode=0o700):
        path.mkdir(parents=True)
        path.chmod(mode)
        os.chown(path, owner, owner)
        return path

    good_runtime = make(runtime_root / "1000" / "gputui", 1000)
    make(runtime_root / "1001" / "gputui", 1000)  # planted by 1000 in 1001's name
    good_fallback = make(fallback_root / "gputui-1002", 1002)
    make(fallback_root / "gputui-1003", 1003, mode=0o755)  # open to others
    make(fallback_root / "gputui-abc", 0)
    (fallback_root / "gputui-1004").symlink_to(good_fallback)
    assert paths.every_users_dirs({}) == [good_runtime, good_fallback]
    own = paths.probe_dir({})
    assert paths.every_users_dirs({}) == [own, good_runtime, good_fallback]
    # The override still means "only this directory".
    assert paths.every_users_dirs({paths.DIR_ENV: str(own)}) == [own]
