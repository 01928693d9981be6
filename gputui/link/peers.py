"""Who is at the other end of a probe's socket, and whether they may talk to it.

Its own module, shared by the probe's server and the monitor's client, so the monitor imports none of
the server (whose temporary names come from ``secrets``, which loads OpenSSL's libcrypto: 3.4 MB of
the monitor's memory for nothing).
"""

from __future__ import annotations

import os
import socket
import struct

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process at the other end, or None where the OS cannot say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    return _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _CRED.size))


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """Only our own user, or root, may talk to a probe."""
    own = os.getuid() if own_uid is None else own_uid
    return peer_uid == own or peer_uid == 0


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end in this PID namespace (0: not visible from here),
    or None where the system cannot say."""
    try:
        creds = peer_credentials(sock)
    except OSError:
        return None
    return None if creds is None else creds[0]
