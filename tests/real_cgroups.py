"""Real cgroups, real users and real processes for the owner tests (root only).

``Cgroups`` makes cgroup directories as the kubelet, slurmd or systemd's user manager would (root's,
or handed to a user as systemd's Delegate=yes does), moves processes into them, and removes them after.
``spawn`` starts a process as another uid with the environment it chooses, optionally making a cgroup
in a subtree handed to it and moving itself there, as a user can. ``NodeFiles`` reads /proc and the
cgroup hierarchies of this machine and everything else (the kubelet's log directories) from a tree of
the test's own.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gputui.collect.owners import HostFiles

UNIFIED = Path("/sys/fs/cgroup/unified")  # cgroup v2 beside v1's controllers (this machine: "hybrid")
MEMORY = Path("/sys/fs/cgroup/memory")  # a cgroup v1 controller, where slurmd's v1 plugin makes its jobs

need_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or not (UNIFIED / "cgroup.procs").exists() or not (MEMORY / "cgroup.procs").exists(),
    reason="needs root and cgroup v2 at /sys/fs/cgroup/unified beside v1's memory controller")

# As the user, once told to go: make the cgroup named by $1 (in a subtree handed to it) and move itself
# there; then say it is ready.
MOVE_SELF = ('read go; if [ -n "$1" ]; then mkdir -p "$1" && echo $$ > "$1/cgroup.procs" || exit 1; fi; '
             'echo ready; exec sleep 600')


class Cgroups:
    """Cgroup directories made for one test, removed (deepest first) when it ends."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def make(self, hierarchy: Path, path: str, owner: int | None = None) -> Path:
        """``hierarchy/path``, each missing level made by root; ``owner``: the last level handed to that
        uid, as systemd hands a delegated unit's cgroup to its user (the directory and its cgroup.procs)."""
        where = hierarchy
        for name in path.strip("/").split("/"):
            where = where / name
            if not where.exists():
                where.mkdir()
                self.made.append(where)
        if owner is not None:
            for handed in (where, where / "cgroup.procs"):
                os.chown(handed, owner, owner)
        return where

    @staticmethod
    def move(pid: int, directory: Path) -> None:
        (directory / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        """Remove every directory made here and any the users made beneath them."""
        for top in reversed(self.made):
            for below in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir(below)
            _rmdir(top)


def _rmdir(directory: Path) -> None:
    for _ in range(50):  # a process just reaped may leave its cgroup a moment later
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def spawn(uid: int, environ: dict[str, str], *, start_in: Path | None = None,
          move_self_to: Path | None = None) -> subprocess.Popen:
    """A real process of ``uid`` with environment ``environ`` (PATH added), sleeping once it is ready.
    ``start_in``: a cgroup root moves it into first (one handed to its user); ``move_self_to``: a cgroup
    it then makes itself, beneath, and moves into, as a user can in a subtree of its own."""
    def become() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    child = subprocess.Popen(["/bin/sh", "-c", MOVE_SELF, "sh", str(move_self_to or "")],
                             env={"PATH": "/usr/bin:/bin", **environ}, preexec_fn=become,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    if start_in is not None:
        Cgroups.move(child.pid, start_in)
    child.stdin.write(b"go\n")
    child.stdin.close()
    said = child.stdout.readline()
    if said != b"ready\n":
        child.kill()
        child.wait()
        raise AssertionError(f"the process of uid {uid} did not get ready: {child.stderr.read()!r}")
    return child


def end(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.kill()
    for child in children:
        child.wait()


class NodeFiles(HostFiles):
    """This machine's /proc and cgroups; the runtimes' state (/var/log/pods ...) from ``root``."""

    REAL = ("/proc/", "/sys/fs/cgroup/")

    def _at(self, path: str) -> str:
        return path if path.startswith(self.REAL) else super()._at(path)


def tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root
