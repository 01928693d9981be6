"""A hostile job for tests/integration/test_attach_hostile.py and bench/bench_attach.py: a Python process, run by
another user, that fights the root `gputui attach` reaching into it (issue 44).

``python attach_hostile_target.py MODE [ARG]`` prints its pid, then runs Python (so code queued in
it runs) until it is killed:

- ``plain``: nothing more (a job in time.sleep(ARG) first, when ARG is given).
- ``symlink SECRET``: plants a link to SECRET in every attach folder it can write (gputui-attach-*
  in the temp directory), where root's gputui reads what the job reports.
- ``fifo``: maps a file named like libpython, deletes it and leaves FIFOs at its name and at the
  name /proc/PID/maps shows ("NAME (deleted)").
- ``crafted [N]``: maps a crafted ELF named like libpython: 65,535 section headers, N of them (all
  but one unless given) dynamic symbol tables over the same sparse 64 MiB.
- ``exec PROGRAM``: runs PROGRAM (a setuid-root copy of sleep) the moment a gdb for it appears.
- ``exit``: exits the moment a gdb for it appears.

Standard library only: it runs on whichever Python the unprivileged user may run.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import tempfile
import threading
import time

SECTIONS = 0xFFFF
TABLE = 64 << 20  # the dynamic symbol table's size: sparse, nothing but zeros
TABLE_AT = 8 << 20


def crafted_elf(path: str, dynsym_sections: int = SECTIONS - 1) -> None:
    """An ELF file that costs a naive reader its whole table at each of its symbol table sections:
    one PT_LOAD, 65,535 section headers, ``dynsym_sections`` of them SHT_DYNSYM over the same sparse
    64 MiB (the rest, section 0 among them, string tables over it)."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 4096, 0, 64, 56, 1, 64, SECTIONS, 0)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 4096, 4096, 4096)
    strings = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, TABLE_AT, TABLE, 0, 0, 1, 0)
    symbols = struct.pack("<IIQQQQIIQQ", 0, 11, 0, 0, TABLE_AT, TABLE, 0, 0, 8, 24)
    with open(path, "wb") as f:
        f.write(header + segment)
        f.seek(4096)
        f.write(strings * (SECTIONS - dynsym_sections) + symbols * dynsym_sections)
        f.truncate(TABLE_AT + TABLE)


def _private_dir() -> str:
    return tempfile.mkdtemp(prefix="hostile-")


def _library_name() -> str:
    return f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"


def _map(path: str) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)


def plant_links(secret: str) -> None:
    """Forever: a link to ``secret`` where each attach folder has its result, wherever this user may."""
    root = tempfile.gettempdir()
    while True:
        for name in os.listdir(root):
            if not name.startswith("gputui-attach-"):
                continue
            try:
                result = os.path.join(root, name, "result")
                if not os.path.islink(result):
                    if os.path.lexists(result):
                        os.unlink(result)
                    os.symlink(secret, result)
            except OSError:
                continue
        time.sleep(0.001)


def fifos() -> mmap.mmap:
    """A mapped, deleted file named like libpython, and FIFOs at both its names."""
    path = os.path.join(_private_dir(), _library_name())
    with open(path, "wb") as f:
        f.write(b"\0" * 8192)
    mapped = _map(path)
    os.unlink(path)
    os.mkfifo(path)
    os.mkfifo(path + " (deleted)")
    return mapped


def crafted(dynsym_sections: int) -> mmap.mmap:
    path = os.path.join(_private_dir(), _library_name())
    crafted_elf(path, dynsym_sections)
    return _map(path)


def gdb_appeared(pid: int) -> bool:
    """Whether this process is traced, or a gdb (or its timeout) names it on its command line."""
    with open("/proc/self/status") as f:
        if any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in f):
            return True
    mine = (f"attach {pid}".encode(), f"/proc/{pid}/".encode())
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        if b"gdb" in line and any(word in line for word in mine):
            return True
    return False


def when_gdb_appears(act) -> None:
    pid = os.getpid()
    while not gdb_appeared(pid):
        time.sleep(0.001)
    act()


_KEPT: list[mmap.mmap] = []  # the mappings, alive as long as the process


def main(mode: str, args: list[str]) -> None:
    if mode == "symlink":
        threading.Thread(target=plant_links, args=(args[0],), daemon=True).start()
    elif mode == "fifo":
        _KEPT.append(fifos())
    elif mode == "crafted":
        _KEPT.append(crafted(int(args[0]) if args else SECTIONS - 1))
    elif mode == "exec":
        program = args[0]
        threading.Thread(target=when_gdb_appears, args=(lambda: os.execv(program, [program, "60"]),),
                         daemon=True).start()
    elif mode == "exit":
        threading.Thread(target=when_gdb_appears, args=(lambda: os._exit(0),), daemon=True).start()
    print(os.getpid(), flush=True)
    if mode == "plain" and args:
        time.sleep(float(args[0]))  # a long C call: queued code waits for it
    while True:
        time.sleep(0.005)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
