"""What a new user meets in the first minute of the plain modes: pipes, odd terminals, closed or full
outputs, the interval rule, the config check, nvitop/gpustat habits, filters that leave nothing, and
a demo that starts where something happens. End to end, ``python -m gputui`` in subprocesses."""

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import ROOT, gputui, no_traceback

FFMPEG = "ffmpeg -hwaccel cuda -i lecture-04.mkv -c:v h264_nvenc -preset p5 lecture-04.mp4"


@pytest.fixture
def env(tmp_path):
    """No COLUMNS (a pipe into a file has none), a private probe and config directory."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE", "PYTHONIOENCODING")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), PYTHONPATH=str(ROOT),
                 XDG_CONFIG_HOME=str(tmp_path / "config"))
    return clean


def shell(env, command, timeout=120):
    """``gputui`` run by bash, for redirections that subprocess cannot express (>&-, >/dev/full)."""
    line = f"{sys.executable} -m gputui {command}"
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env,
                          timeout=timeout)


# ------------------------------------------------------------------------------------ output

def test_piped_output_is_not_cut_at_120_columns(env):
    result = gputui(env, "--demo", "workstation", "--once")
    assert result.returncode == 0
    line = next(line for line in result.stdout.splitlines() if line.startswith("5120 "))
    assert line.endswith(FFMPEG) and len(line) > 120 and "…" not in line


def test_columns_still_sets_the_width_of_piped_output(env):
    result = gputui({**env, "COLUMNS": "80"}, "--demo", "workstation", "--once")
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


@pytest.mark.parametrize("encoding", [
    {"PYTHONIOENCODING": "latin-1"},
    {"PYTHONIOENCODING": "ascii"},
    {"PYTHONCOERCECLOCALE": "0", "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"},
])
def test_a_terminal_that_cannot_show_unicode_gets_ascii(env, encoding):
    result = gputui({**env, **encoding}, "--demo", "leaky", "--once")
    no_traceback(result)
    assert result.returncode == 0
    assert result.stdout.isascii() and "MEM ####" in result.stdout


@pytest.mark.parametrize("locale_env, ascii", [
    ({"LANG": "C"}, True),  # Python writes UTF-8 here all the same (PEP 538, 540): the locale decides
    ({"LC_ALL": "POSIX", "LANG": "en_US.UTF-8"}, True),  # LC_ALL first
    ({"LANG": "en_US.UTF-8", "LC_CTYPE": "C"}, True),  # then LC_CTYPE
    ({"LANG": "en_US.ISO-8859-1"}, True),  # a codeset other than UTF-8
    ({"LC_ALL": "C.UTF-8", "LANG": "C"}, False),
    ({"LANG": "en_US.utf8"}, False),
    ({}, False),  # no locale set at all says nothing: Unicode, as before
])
def test_the_locale_decides_ascii_as_terminals_do(env, locale_env, ascii):
    clean = {k: v for k, v in env.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8")}
    result = gputui({**clean, **locale_env}, "--demo", "leaky", "--once")
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii() == ascii
    assert ("MEM ####" in result.stdout) == ascii and ("MEM ████" in result.stdout) == (not ascii)


def test_closed_stdout_is_a_message_not_a_traceback(env):
    result = shell(env, "--demo --once >&-")
    assert result.returncode == 2
    assert result.stderr == "gputui: standard output is closed: nothing to show on\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("mode", ["--once", "--json", "--watch 0.2", "probes"])
def test_a_full_disk_is_a_message_and_exit_1(env, mode):
    result = shell(env, f"--demo workstation {mode} >/dev/full")
    assert result.returncode == 1
    assert result.stderr == "gputui: cannot write the output: No space left on device\n"


# ------------------------------------------------------------------------------------ settings

@pytest.mark.parametrize("args", [["--interval", "1e-9"], ["--watch", "0.01"], ["--interval", "nan"],
                                  ["--interval", "7200"]])
def test_intervals_follow_the_config_files_rule(env, args):
    result = gputui(env, "--demo", "--once", *args)
    assert result.returncode == 2
    assert "must be between 0.1 and 3600 seconds" in result.stderr


@pytest.mark.parametrize("args, option, said", [
    (["--watch", "-1"], "--watch", "-1"),  # not "--once and --watch cannot be combined": -1 is --once too
    (["--watch", "-2"], "--watch", "-2"),  # not "unrecognized arguments: -2"
    (["--interval", "-0.5"], "--interval", "-0.5"),  # not "expected one argument"
    (["--watch", "0"], "--watch", "0"),
    (["serve", "--interval", "-1"], "--interval", "-1"),
])
def test_a_negative_or_zero_interval_has_its_own_message(env, args, option, said):
    result = gputui(env, "--demo", *args)
    no_traceback(result)
    assert result.returncode == 2 and result.stdout == ""
    command = "gputui serve" if "serve" in args else "gputui"
    assert result.stderr.splitlines() == [
        f"{command}: error: argument {option}: must be a positive number of seconds (0.1 or more), not {said}",
        f"see '{command} --help'"]


def test_a_negative_number_after_run_is_the_commands_own(env):
    from gputui.cli import parse

    options = parse(["run", "--", "python", "train.py", "--interval", "-1"])
    assert options.command == ("python", "train.py", "--interval", "-1")


def test_the_smallest_interval_is_accepted(env):
    assert gputui(env, "--demo", "--once", "--interval", "0.1").returncode == 0


@pytest.mark.parametrize("mode", ["--once", "--json", "--watch"])
def test_a_missing_config_file_stops_the_plain_modes_too(env, tmp_path, mode):
    result = gputui(env, "--demo", mode, "--config", str(tmp_path / "nope.toml"))
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr == f"gputui: config file {tmp_path / 'nope.toml'} does not exist\n"


@pytest.mark.parametrize("content, said", [
    ("interval = [", "is not valid TOML"),
    ("interval = 0.01", "`interval` must be between 0.1 and 3600 seconds, not 0.01"),
    ('[keys]\n"no.such" = "x"', "[keys] names unknown binding 'no.such'"),
])
def test_a_broken_config_file_stops_once_as_it_stops_the_monitor(env, tmp_path, content, said):
    config = tmp_path / "config.toml"
    config.write_text(content)
    result = gputui(env, "--demo", "--once", "--config", str(config))
    assert result.returncode == 2 and said in result.stderr and result.stdout == ""
    default = tmp_path / "config" / "gputui" / "config.toml"  # the default place: checked too
    default.parent.mkdir(parents=True)
    default.write_text(content)
    assert gputui(env, "--demo", "--json").returncode == 2


@pytest.mark.parametrize("mode", ["--once", "--json"])
def test_a_key_remap_onto_a_key_in_use_stops_with_one_line(env, tmp_path, mode):
    config = tmp_path / "config.toml"
    config.write_text('[keys]\nquit = "j"\n')
    result = gputui(env, "--demo", mode, "--config", str(config))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f'gputui: {config}: [keys] quit = "j": j is already "Jobs" (binding jobs) on the main '
                             "screen; give one of them another key\n")


@pytest.mark.parametrize("kind", ["not-utf8", "device", "fifo"])
def test_a_config_that_is_no_text_file_is_one_line_at_once(env, tmp_path, kind):
    config = tmp_path / "config.toml"
    if kind == "not-utf8":
        config.write_bytes(b"interval = 2\n# caf\xe9\n")
        said = f"config file {config} is not UTF-8 text: byte 0xe9 at offset 18"  # 13 + len("# caf")
    elif kind == "device":
        config = "/dev/zero"
        said = "config file /dev/zero is not a regular file"
    else:
        os.mkfifo(config)
        said = f"config file {config} is not a regular file"
    result = gputui(env, "--demo", "--once", "--config", str(config), timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"gputui: {said}\n")


# ------------------------------------------------------------------------------------ habits

def snapshot(env, *args):
    result = gputui(env, "--demo", "workstation", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["snapshot"]


def test_only_and_pid_take_space_separated_lists(env):
    spaced = snapshot(env, "--only", "1", "0")
    assert [d["index"] for d in spaced["devices"]] == [0, 1]
    assert [d["index"] for d in snapshot(env, "--only", "1")["devices"]] == [1]
    pids = snapshot(env, "--pid", "3120", "5120")
    assert sorted(p["pid"] for p in pids["processes"]) == [3120, 5120]
    assert sorted(p["pid"] for p in snapshot(env, "--pid", "3120,5120")["processes"]) == [3120, 5120]


def test_dash_one_is_once(env):
    result = gputui(env, "--demo", "-1")
    assert result.returncode == 0 and result.stdout.startswith("ws-sim-01")


def test_a_stray_number_gets_a_helpful_error(env):
    result = gputui(env, "--demo", "--once", "1")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "gputui: error: unexpected '1': for seconds between samples use --interval 1 (live monitor) "
        "or --watch 1 (printing); for GPUs, --only 1", "see 'gputui --help'"]
    word = gputui(env, "--demo", "--once", "top")
    assert word.stderr.splitlines() == [
        "gputui: error: 'top' is not a command "
        "(commands: run, attach, detach, probes, probe, demo-train, serve, web, estimate, oom, record, replay)",
        "see 'gputui --help'"]


@pytest.mark.parametrize("steps, said", [
    ("0", "at least 1 step, not '0'; leave --steps out to train until interrupted"),
    ("-5", "at least 1 step, not '-5'; leave --steps out to train until interrupted"),
    ("ten", "not a whole number of steps: 'ten'"),
])
def test_demo_train_steps_is_a_number_of_steps_not_a_process_id(capsys, steps, said):
    from gputui import cli

    with pytest.raises(SystemExit) as stopped:
        cli.parse(["demo-train", "--steps", steps])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"gputui demo-train: error: argument --steps: {said}",
                                                    "see 'gputui demo-train --help'"]
    assert cli.parse(["demo-train", "--steps", "1"]).demo_train.steps == 1
    assert cli.parse(["demo-train"]).demo_train.steps is None  # until interrupted


# ------------------------------------------------------------------------------------ empty screens

def test_a_user_with_no_gpu_process_is_told(env):
    result = gputui(env, "--demo", "workstation", "--once", "--user", "nosuchuser")
    assert result.returncode == 0
    assert ("! --user nosuchuser: no GPU process of that user (GPU processes here belong to "
            "alice, bob, carol, root)") in result.stdout


def test_only_visible_with_a_gpu_that_is_not_here_is_told(env):
    result = gputui({**env, "CUDA_VISIBLE_DEVICES": "7"}, "--demo", "workstation", "--once",
                    "--only-visible")
    assert result.returncode == 0
    assert ("! --only-visible: no GPU here is visible to CUDA (CUDA_VISIBLE_DEVICES is '7'; the "
            "GPUs here are 0, 1)") in result.stdout


# ------------------------------------------------------------------------------------ demo clock

def test_the_training_node_demo_starts_busy(env):
    result = gputui(env, "--demo", "training-node", "--json")
    doc = json.loads(result.stdout)["snapshot"]
    assert all(d["memory_used"] > 50 * 2**30 and d["gpu_util"] > 50 for d in doc["devices"])
    assert doc["taken_at"] >= 1767603600.0 + 60  # scenario second 60: the ramp is over


# ------------------------------------------------------------------------------------ no driver

def test_without_a_driver_the_host_figures_are_still_read(probed_process, env):
    result = gputui(env, "--json")
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)["snapshot"]
    assert snap["devices"] == [] and [r["pid"] for r in snap["probes"]] == [probed_process.pid]
    host = snap["host"]
    assert host["cpu_count"] > 0 and host["cpu_percent"] is not None
    assert 0 < host["memory_used"] < host["memory_total"]
    text = gputui(env, "--once").stdout
    assert "CPU " in text.splitlines()[1] and "MEM " in text.splitlines()[1]


def test_the_live_monitor_gets_ascii_on_a_terminal_that_cannot_show_unicode(monkeypatch):
    import io

    import gputui.ui.startup.launch
    from gputui import cli
    from gputui.plain import terminal

    class Latin1Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    seen = []
    monkeypatch.setattr(gputui.ui.startup.launch, "run_tui", lambda options: seen.append(options.ascii) or 0)
    monkeypatch.setattr(cli, "_stdin_is_terminal", lambda: True)  # a keyboard, as a user has
    monkeypatch.setattr(terminal, "locale_environ", lambda: {"LANG": "en_US.UTF-8"})
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setattr(sys, "stdout", Latin1Terminal(io.BytesIO(), encoding="latin-1"))
    assert cli.main(["--demo"]) == 0
    monkeypatch.setattr(sys, "stdout", Latin1Terminal(io.BytesIO(), encoding="utf-8"))
    assert cli.main(["--demo"]) == 0
    monkeypatch.setattr(terminal, "locale_environ", lambda: {"LANG": "C"})  # UTF-8 out, but LANG=C
    assert cli.main(["--demo"]) == 0
    assert seen == [True, False, True]


def test_a_space_separated_list_that_swallows_a_command_says_so(env):
    result = gputui(env, "--only", "0", "run", "--", "true")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "gputui: error: --only 0 run: 'run' is a command, not a GPU; before a command, write the "
        "list with commas (--only 0,1)", "see 'gputui --help'"]


@pytest.mark.parametrize("argv, demo, mode", [
    (["--demo", "serve"], "workstation", "serve"),  # the command, not a scenario called "serve"
    (["--demo", "probes"], "workstation", "probes"),
    (["--demo", "leaky", "probes"], "leaky", "probes"),
    (["--demo"], "workstation", "tui"),
    (["--demo", "mig", "--once"], "mig", "once"),
])
def test_a_bare_demo_before_a_command_is_the_default_scenario(argv, demo, mode):
    from gputui import cli

    options = cli.parse(argv)
    assert (options.demo, options.mode) == (demo, mode)


def test_a_command_after_run_is_left_as_it_is():
    from gputui import cli

    assert cli.parse(["run", "--", "python", "x.py", "--demo", "serve"]).command == (
        "python", "x.py", "--demo", "serve")
