"""Finding the probes this monitor may talk to: their sockets in this user's directories (every
user's for root), by pid as this monitor numbers them; sockets left by dead processes are removed.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Mapping

from gputui.link import paths
from gputui.link.peers import peer_pid
from gputui.pids import pid_exists


def discover(environ: Mapping[str, str] | None = None, *,
             all_users: bool | None = None) -> dict[int, Path]:
    """The probed processes that are alive, by pid as this monitor sees them; sockets of dead pids
    are removed.

    This user's probes only, unless ``all_users`` (default: when running as root, who may talk to
    every probe). Other users' directories are only read, never cleaned. A probe in another PID
    namespace (a container sharing the directory) is listed under the pid it has here, which the
    kernel tells on connecting; one whose process cannot be seen from here is left out.
    """
    if all_users is None:
        all_users = os.getuid() == 0
    own = paths.search_dirs(environ)
    directories = paths.every_users_dirs(environ) if all_users else own
    here = paths.pid_namespace()
    here = None if here == paths.INITIAL_PID_NAMESPACE else here
    found: dict[int, Path] = {}
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            named = paths.parse_socket_name(path)
            if named is None:
                continue
            pid, namespace = named
            if namespace != here:
                pid = _serving_pid(path) or 0
                if pid > 0 and pid not in found:
                    found[pid] = path
                continue
            if pid in found:
                continue
            if pid_exists(pid):
                found[pid] = path
            elif directory in own and not _listening(path):
                # Someone listening under a dead pid is not ours to remove: the connection check
                # (ProbeLink) keeps it from being taken for any other process.
                remove_stale(path)
    return dict(sorted(found.items()))


def find_socket(pid: int, environ: Mapping[str, str] | None = None) -> Path | None:
    """The socket of process ``pid``'s probe, in this user's directories (every user's for root)."""
    directories = paths.every_users_dirs(environ) if os.getuid() == 0 else paths.search_dirs(environ)
    name = paths.socket_name(pid, paths.pid_namespace())
    for directory in directories:
        path = directory / name
        if path.exists():
            return path
    # A probe in another PID namespace is named by its own pid there: ask who serves each one.
    return discover(environ).get(pid)


def _serving_pid(path: Path) -> int | None:
    """The pid (here) of the process listening on ``path``, or None when nobody answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        sock.connect(os.fspath(path))
        return peer_pid(sock)
    except OSError:
        return None
    finally:
        sock.close()


def _listening(path: Path) -> bool:
    """True if a server accepts connections on the socket at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        sock.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # busy or not ours to reach: leave it be
    finally:
        sock.close()
    return True


def remove_stale(path: Path) -> None:
    """Remove a socket file left by a dead process (only a socket, only ours)."""
    try:
        info = os.lstat(path)
        if stat.S_ISSOCK(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(path)
    except OSError:
        pass
