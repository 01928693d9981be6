"""Whether a process has loaded PyTorch, told from outside it: torch's libraries in its memory map.

Read once per process life (the process inspector keeps it with the other facts that do not change).
A process NVML lists has its CUDA context already, so a PyTorch job has torch's libraries mapped by then.
"""

from __future__ import annotations

MARK = b"/libtorch"  # libtorch.so, libtorch_cpu.so, libtorch_cuda.so, libtorch_python.so
CHUNK = 1 << 20  # a big job's map is a few MiB: read in pieces, never whole


def torch_mapped(pid: int, proc_root: str = "/proc") -> bool | None:
    """True when one of torch's libraries is mapped in process ``pid``; None when its map cannot be
    read (another user's process: the kernel asks for the same right as a debugger's)."""
    try:
        with open(f"{proc_root}/{pid}/maps", "rb") as maps:
            tail = b""
            while chunk := maps.read(CHUNK):
                if MARK in tail + chunk:
                    return True
                tail = chunk[-len(MARK):]  # a name cut between two pieces
    except OSError:
        return None
    return False
