"""Where probe sockets live: one private directory per user, one socket per probed process.

The directory is the first guard of the wire: mode 0700 and owned by the user, so nobody else can
reach the sockets inside it (the server's SO_PEERCRED check is the second guard).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping

from gputui.errors import UserError
from gputui.untrusted import visible

# Set to a directory to use only that one (tests, or jobs and monitors that disagree on
# $XDG_RUNTIME_DIR); it must pass the same ownership and mode checks as the default ones.
DIR_ENV = "GPUTUI_PROBE_DIR"
# Fixed rather than tempfile.gettempdir(): the probe and the monitor must agree on it even when their
# environments differ (a batch job's $TMPDIR is often job-private).
FALLBACK_ROOT = Path("/tmp")
# Where login sessions get their $XDG_RUNTIME_DIR (systemd-logind); root looks here for every user.
RUNTIME_ROOT = Path("/run/user")
SOCKET_SUFFIX = ".sock"
# The kernel's inode number for the initial PID namespace (PROC_PID_INIT_INO): a process outside any
# container. Its sockets keep the plain name "<pid>.sock"; others add "@<namespace>" so that two jobs
# with the same pid in two containers sharing a directory cannot take each other's socket.
INITIAL_PID_NAMESPACE = 0xEFFFFFFC
SOCKET_MODE = 0o600
DIR_MODE = 0o700
# sockaddr_un.sun_path holds 108 bytes on Linux, including the final NUL.
MAX_SOCKET_PATH = 107
TEMP_SUFFIX = ".tmp"
TEMP_EXTRA_LENGTH = len("." + ".0123abcd" + TEMP_SUFFIX)  # what the temporary name adds to the final one
# Bound Unix sockets, by the path each was bound to, in this network namespace: readable by every user.
BOUND_SOCKETS = Path("/proc/net/unix")
_LISTENING = 0x10000  # /proc/net/unix's Flags column: __SO_ACCEPTCON, a listening socket


def temp_socket_name(name: str, token: str) -> str:
    """The hidden name a server binds before renaming to ``name`` (token: 8 hex digits). It keeps
    ``name`` inside: the kernel lists a socket under the name it was bound to, and that list is all
    another user can see of a probe directory closed to them (``other_users_probe``)."""
    return f".{name}.{token}{TEMP_SUFFIX}"


def _final_name(bound_name: str) -> str:
    """The socket name a server bound under ``bound_name`` renamed it to."""
    if bound_name.startswith(".") and bound_name.endswith(TEMP_SUFFIX):
        return bound_name[1:-len(TEMP_SUFFIX)].rpartition(".")[0]
    return bound_name


class ProbeDirUnsafe(UserError):
    """The probe directory exists but could let another user in; we refuse to use it."""


def candidate_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The directories a probe may use, in order of preference (none created or checked)."""
    env = os.environ if environ is None else environ
    override = env.get(DIR_ENV)
    if override:
        return [Path(override)]
    uid = os.getuid()
    dirs = []
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and _owned_dir(Path(runtime), uid):
        dirs.append(Path(runtime) / "gputui")
    dirs.append(FALLBACK_ROOT / f"gputui-{uid}")
    return dirs


def probe_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The directory this user's probes put their sockets in, created 0700 if missing.

    Raises ProbeDirUnsafe when it exists but is not ours, is a symlink, or is open to others.
    """
    path = candidate_dirs(environ)[0]
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ProbeDirUnsafe(f"cannot create the probe directory {path}: {exc.strerror}") from None
    check_dir(path)
    return path


def search_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The existing, safe directories where this user's probes may be listening.

    The monitor looks in all of them because a job started without $XDG_RUNTIME_DIR (cron, a batch
    system) puts its socket in the fallback while the monitor's own preference is the runtime dir,
    and a monitor without one (su, a bare ssh command) still looks where logind puts it.
    """
    found = []
    for path in _looked_in(environ):
        try:
            check_dir(path)
        except (ProbeDirUnsafe, FileNotFoundError, NotADirectoryError):
            continue
        found.append(path)
    return found


def refused_dirs(environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """The directories this user's probes may use that exist but are not safe, each with why:
    a probe there cannot start, and no monitor reads them."""
    refused = []
    for path in _looked_in(environ):
        try:
            check_dir(path)
        except ProbeDirUnsafe as exc:
            refused.append((path, str(exc)))
        except OSError:
            continue
    return refused


def _looked_in(environ: Mapping[str, str] | None) -> list[Path]:
    dirs = candidate_dirs(environ)
    env = os.environ if environ is None else environ
    logind = RUNTIME_ROOT / str(os.getuid()) / "gputui"
    if not env.get(DIR_ENV) and logind not in dirs:
        dirs.insert(len(dirs) - 1, logind)
    return dirs


def every_users_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The safe probe directories of every user on the machine (for root, who may reach them all).

    A directory counts only when it is owned by the uid its path names and closed to others, so a
    directory planted by one user cannot pass for another's.
    """
    env = os.environ if environ is None else environ
    if env.get(DIR_ENV):
        return search_dirs(env)
    found = list(search_dirs(env))
    for root, pattern in ((RUNTIME_ROOT, "*/gputui"), (FALLBACK_ROOT, "gputui-*")):
        try:
            candidates = sorted(root.glob(pattern))
        except OSError:
            continue
        for path in candidates:
            digits = path.parent.name if pattern.startswith("*") else path.name[len("gputui-"):]
            if not (digits.isdigit() and digits.isascii()) or path in found:
                continue
            try:
                check_dir(path, owner=int(digits))
            except (ProbeDirUnsafe, OSError):
                continue
            found.append(path)
    return found


def check_dir(path: Path, owner: int | None = None, *, what: str = "the probe directory",
              env: str = DIR_ENV) -> None:
    """Raise ProbeDirUnsafe unless ``path`` is a real directory of ours (or of ``owner``), closed
    to everyone else. Raises FileNotFoundError when it does not exist. ``what`` names the directory
    and ``env`` the variable that points elsewhere, in the message.
    """
    uid = os.getuid() if owner is None else owner
    where = visible(os.fspath(path))
    shown = f"{what} {where}"
    info = os.lstat(path)  # lstat: a symlink planted by someone else must not be followed
    if stat.S_ISLNK(info.st_mode):
        raise ProbeDirUnsafe(f"{shown} is a symlink; remove it and try again")
    if not stat.S_ISDIR(info.st_mode):
        raise ProbeDirUnsafe(f"{shown} is not a directory; remove it")
    if info.st_uid != uid:
        raise ProbeDirUnsafe(
            f"{shown} belongs to uid {info.st_uid}, not to you (uid "
            f"{uid}); set {env} to a private directory of yours"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ProbeDirUnsafe(
            f"{shown} is open to other users (mode "
            f"{stat.S_IMODE(info.st_mode):o}); run: chmod 700 {where}"
        )


def pid_namespace() -> int | None:
    """The inode number of this process's PID namespace, or None where /proc cannot say."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def socket_name(pid: int, namespace: int | None) -> str:
    """The socket file name of the probe in process ``pid`` of PID namespace ``namespace``."""
    if namespace is None or namespace == INITIAL_PID_NAMESPACE:
        return f"{pid}{SOCKET_SUFFIX}"
    return f"{pid}@{namespace}{SOCKET_SUFFIX}"


def socket_path(pid: int, directory: Path | None = None) -> Path:
    """The socket a probe in process ``pid`` (of this PID namespace) listens on (the directory is
    created if needed)."""
    name = socket_name(pid, pid_namespace())
    path = (directory if directory is not None else probe_dir()) / name
    if len(os.fsencode(path.parent)) + 1 + len(name) + TEMP_EXTRA_LENGTH > MAX_SOCKET_PATH:
        raise ProbeDirUnsafe(f"the probe socket path {path} is too long for a Unix socket")
    return path


def parse_socket_name(path: Path) -> tuple[int, int | None] | None:
    """(pid, PID namespace) a socket file name stands for (None: the initial namespace), or None
    for any other file."""
    name = path.name
    if not name.endswith(SOCKET_SUFFIX):
        return None
    pid_text, at, namespace_text = name[: -len(SOCKET_SUFFIX)].partition("@")
    numbers = [pid_text] + ([namespace_text] if at else [])
    if not all(text.isdigit() and text.isascii() for text in numbers):
        return None
    pid = int(pid_text)
    namespace = int(namespace_text) if namespace_text else None
    if namespace == INITIAL_PID_NAMESPACE:
        return None  # never written so: not one of ours
    return (pid, namespace) if pid > 0 else None


def other_users_probe(pid: int) -> tuple[Path, int] | None:
    """The probe directory of another user in which process ``pid``'s probe is listening, and that
    user's uid; None when the kernel lists no such socket. For a user who may not look inside it."""
    name = socket_name(pid, pid_namespace())
    for bound in _listening_sockets():
        if _final_name(bound.name) != name:
            continue
        owner = _probe_dir_owner(bound.parent)
        if owner is not None and owner != os.getuid():
            return bound.parent, owner
    return None


def _listening_sockets() -> list[Path]:
    """The paths listening Unix sockets were bound to, as the kernel lists them."""
    try:
        with open(BOUND_SOCKETS, encoding="utf-8", errors="surrogateescape") as table:
            rows = [line.split(None, 7) for line in table.read().splitlines()[1:]]
    except OSError:
        return []
    # Num RefCount Protocol Flags Type St Inode Path; an abstract socket's "path" starts with @.
    return [Path(row[7]) for row in rows
            if len(row) == 8 and row[7].startswith("/") and _hex(row[3]) & _LISTENING]


def _hex(text: str) -> int:
    try:
        return int(text, 16)
    except ValueError:
        return 0


def _probe_dir_owner(directory: Path) -> int | None:
    """The uid whose probe directory ``directory`` is: the one its path names (/tmp/gputui-U or
    /run/user/U/gputui), where the file system agrees that only that user can make names in it
    (the directory, or /run/user/U, which is all another user may look at there)."""
    if directory.parent == FALLBACK_ROOT and directory.name.startswith("gputui-"):
        digits, owned = directory.name[len("gputui-"):], directory
    elif directory.parent.parent == RUNTIME_ROOT and directory.name == "gputui":
        digits, owned = directory.parent.name, directory.parent
    else:
        return None
    if not (digits.isdigit() and digits.isascii()):
        return None
    try:
        info = os.lstat(owned)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != int(digits) or info.st_mode & 0o022:
        return None
    return int(digits)


def _owned_dir(path: Path, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid
