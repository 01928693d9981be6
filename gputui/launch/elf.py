"""Where an exported function lies in a running process, read from its ELF files and /proc/PID/maps.

gdb would find it too, but only by opening every library the job has mapped (libtorch's included)
while the job is stopped: hundreds of milliseconds. Reading the dynamic symbol table here, before
gdb attaches, keeps the stop to the few calls themselves.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

PT_LOAD, SHT_DYNSYM = 1, 11
_MAX_TABLE = 64 << 20  # a dynamic symbol table larger than this is no file we know


class NotFound(Exception):
    """The symbol, the file or its mapping is not where it should be."""


def exported(path: str | Path, names: set[str]) -> dict[str, int]:
    """The defined dynamic symbols among ``names`` in ELF file ``path`` -> their st_value."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise NotFound(f"{path} is no 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        sections = [struct.unpack_from("<IIQQQQIIQQ", f.read(shentsize)) for _ in range(shnum)]
        found: dict[str, int] = {}
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind != SHT_DYNSYM or not entsize or size > _MAX_TABLE:
                continue
            strings = _read(f, sections[link][4], min(sections[link][5], _MAX_TABLE))
            table = _read(f, offset, size)
            for at in range(0, size - entsize + 1, entsize):
                name_at, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", table, at)
                if shndx and value:
                    name = strings[name_at:strings.index(b"\0", name_at)].decode("ascii", "replace")
                    if name in names:
                        found.setdefault(name, value)
        return found


def first_load_vaddr(path: str | Path) -> int:
    """The page-aligned virtual address of the segment that maps the file's start."""
    with open(path, "rb") as f:
        head = f.read(64)
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        for _ in range(phnum):
            kind, _, offset, vaddr = struct.unpack_from("<IIQQ", f.read(phentsize))
            if kind == PT_LOAD and offset == 0:
                return vaddr & ~0xFFF
    raise NotFound(f"{path} has no segment mapping its start")


def mapped_files(maps: str) -> dict[str, int]:
    """File path -> the address its offset 0 is mapped at, from /proc/PID/maps."""
    starts: dict[str, int] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and int(parts[2], 16) == 0:
            starts.setdefault(parts[5], int(parts[0].split("-")[0], 16))
    return starts


def addresses(pid: int, maps: str, wanted: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Where each wanted symbol lies in process ``pid``: ``wanted`` maps a symbol to the files (by the
    start of their name, "libpython", "libc.so") that may export it, in order of preference; a name
    "" stands for any file mapped. Paths are read through /proc/PID/root (the job's own filesystem)."""
    files = mapped_files(maps)
    result: dict[str, int] = {}
    for symbol, prefixes in wanted.items():
        for prefix in prefixes:
            for path, start in files.items():
                if symbol in result or not Path(path).name.startswith(prefix):
                    continue
                local = f"/proc/{pid}/root{path}"
                try:
                    value = exported(local, {symbol}).get(symbol)
                    if value is not None:
                        result[symbol] = start - first_load_vaddr(local) + value
                except (OSError, struct.error, ValueError, NotFound):
                    continue
    missing = sorted(set(wanted) - set(result))
    if missing:
        raise NotFound(", ".join(missing))
    return result


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)
