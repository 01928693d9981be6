"""Small files named from outside (a config, serve's users file, a TLS key, an OOM report), read safely.

A path on the command line or in the environment may name a FIFO (the read blocks before anything
starts), a device such as /dev/zero (the read never ends and exhausts memory) or a file far larger than
any real one. ``read_small`` opens without blocking, insists on a regular file and reads at most a
stated number of bytes, so each of those is one clear line instead of a hang or a traceback.
"""

from __future__ import annotations

import os
import stat

from gputui.errors import UserError
from gputui.untrusted import visible


def read_small(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` of them, or UserError naming ``what``
    (``"config file"``) and the path."""
    shown = visible(os.fspath(path))
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown}: {visible(exc.strerror or str(exc))}") from None
    try:
        info = os.fstat(fd)
        check_regular(info, path, what)
        if info.st_size > limit:
            raise UserError(f"{what} {shown} is {info.st_size} bytes; the limit is {limit}")
        chunks = []
        left = limit + 1  # one byte more than allowed tells a file that grew since fstat
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown}: {visible(exc.strerror or str(exc))}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UserError(f"{what} {shown} is over {limit} bytes; the limit is {limit}")
    return data


def check_regular(info: os.stat_result, path: str | os.PathLike[str], what: str) -> None:
    """UserError unless ``info`` (an fstat of ``path``) is a regular file."""
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{what} {visible(os.fspath(path))} is not a regular file")


def check_private(info: os.stat_result, path: str | os.PathLike[str], what: str) -> None:
    """UserError unless the file ``info`` describes belongs to this user (or root) and no other user
    may write it: a file that decides who gets in, or what root runs, must be yours alone to change."""
    shown = visible(os.fspath(path))
    if info.st_uid not in (os.geteuid(), 0):
        raise UserError(f"{what} {shown} belongs to uid {info.st_uid}, not to you; "
                        "use a file you own (chown it, or copy it)")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UserError(f"{what} {shown} may be written by other users (mode "
                        f"{stat.S_IMODE(info.st_mode):o}); run: chmod go-w {shown}")
