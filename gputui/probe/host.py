"""What the process holds in host memory, read cheaply at step ends, for CPU-only jobs.

On CPU torch there are no allocator statistics, so tensors outside the tracked categories (a dict of
tensors that grows) show only here: in the bytes the C allocator has handed out (glibc's mallinfo2,
exact, blind to freed memory being reused) and in resident memory (one pread of /proc/self/statm on a
descriptor kept open; coarser, since freed memory stays resident). Either costs microseconds in a tight
loop and tens of them right after a training step's work (cold caches, free lists to walk).
"""

from __future__ import annotations

import ctypes
import os

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ResidentMemory:
    """Reads this process's resident set size in bytes; None where /proc is missing."""

    def __init__(self, path: str = "/proc/self/statm"):
        self.path = path
        self._fd: int | None = None
        self._pid: int | None = None
        self._broken = False

    def read(self) -> int | None:
        if self._broken:
            return None
        try:
            if self._pid != os.getpid():  # first use, or a forked child: /proc/self was the parent
                self.close()
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                self._pid = os.getpid()
            fd = self._fd
            if fd is None:
                return None
            fields = os.pread(fd, 128, 0).split()
            return int(fields[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            self._broken = True  # not readable here: stop trying
            self.close()
            return None

    def close(self) -> None:
        fd, self._fd, self._pid = self._fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


class MallocInUse:
    """Bytes handed out by the C allocator (heap chunks in use plus mmapped chunks), or None.

    Only glibc 2.33+ has mallinfo2 (the older mallinfo wraps at 4 GiB). A replacement allocator
    (jemalloc, tcmalloc preloaded) leaves glibc's figures near zero: a figure below the tracked
    tensors' bytes is not this process's.
    """

    def __init__(self):
        self._call = None
        try:
            function = ctypes.CDLL(None).mallinfo2
            function.restype = _MallInfo2
            function.argtypes = []
            self._call = function
        except (OSError, AttributeError):
            pass

    @property
    def available(self) -> bool:
        return self._call is not None

    def read(self) -> int | None:
        if self._call is None:
            return None
        info = self._call()
        return int(info.uordblks + info.hblkhd)

