"""Where an exported function lies in a running process, and its first bytes, read from the ELF files
the process maps (/proc/PID/maps).

gdb would find it too, but only by opening every library the job has mapped (libtorch's included)
while the job is stopped: hundreds of milliseconds. Reading the dynamic symbol table here, before
gdb attaches, keeps the stop to the few calls themselves.

The files are the job's, as hostile as its user likes. Each is opened as the very object the job
mapped (/proc/PID/map_files), never blocking and only if it is a regular file, and read within
bounds (its headers, one symbol table and its names, a few files in all): a crafted one costs
milliseconds.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

PT_LOAD, SHT_DYNSYM = 1, 11
MAX_SECTIONS = 1024  # section headers: libpython, python and libc have 30 to 70
MAX_SEGMENTS = 64  # program headers: they have about a dozen
MAX_TABLE = 4 << 20  # bytes of .dynsym or of .dynstr: theirs have 40 to 75 KiB
MAX_FILES = 8  # files read for one process: a job maps one libpython (or python) and one libc
MAX_SAME_NAME = 64  # places a wanted name is looked up at in .dynstr: a real one has it once or twice
CODE_BYTES = 16  # of each function: gdb compares them with the job's memory before any call (inject.py)

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_SEGMENT = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym


class NotFound(Exception):
    """The symbol, the file or its mapping is not where it should be, or not what it should be."""


@dataclass(frozen=True)
class Function:
    """An exported function: where it lies (in the process; in exported(), from the file's load
    address) and its first CODE_BYTES bytes as its file has them."""

    address: int
    code: bytes


@dataclass(frozen=True)
class Mapping:
    """A file the process maps from its start, as /proc/PID/maps lists it."""

    path: str  # as the process named it ("... (deleted)" once removed)
    start: int
    end: int


def exported(fd: int, names: set[str]) -> dict[str, Function]:
    """The defined dynamic symbols among ``names`` in the ELF file open on ``fd``, or NotFound when it
    is no 64-bit little-endian ELF file within the bounds above."""
    ident, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _HEADER.unpack(
        _read(fd, 0, _HEADER.size))
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise NotFound("no 64-bit little-endian ELF file")
    if (phentsize, shentsize) != (_SEGMENT.size, _SECTION.size):
        raise NotFound(f"headers of {phentsize} and {shentsize} bytes")
    if shnum > MAX_SECTIONS or phnum > MAX_SEGMENTS:
        raise NotFound(f"{shnum} section headers, {phnum} program headers")
    sections = list(_SECTION.iter_unpack(_read(fd, shoff, shnum * _SECTION.size)))
    segments = [s for s in _SEGMENT.iter_unpack(_read(fd, phoff, phnum * _SEGMENT.size)) if s[0] == PT_LOAD]
    symbols = next((s for s in sections if s[1] == SHT_DYNSYM), None)
    if symbols is None or symbols[9] != _SYMBOL.size or symbols[6] >= len(sections):
        raise NotFound("no dynamic symbol table")
    strings = sections[symbols[6]]
    table, names_at = _table(fd, symbols[4], symbols[5]), _table(fd, strings[4], strings[5])
    wanted = {at: name for name in names for at in _places(names_at, name)}
    values: dict[str, int] = {}
    for name_at, _, _, section, value, _ in _SYMBOL.iter_unpack(table[:len(table) // _SYMBOL.size * _SYMBOL.size]):
        if section and value and name_at in wanted:
            values.setdefault(wanted[name_at], value)
    base = next((vaddr & ~0xFFF for _, _, offset, vaddr, *_ in segments if offset == 0), None)
    if base is None:
        raise NotFound("no segment maps the file's start")
    return {name: Function(value - base, _code(fd, segments, value)) for name, value in values.items()}


def mapped_files(maps: str) -> list[Mapping]:
    """The files mapped from their start, each once, in the order /proc/PID/maps lists them."""
    found: dict[str, Mapping] = {}
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and int(parts[2], 16) == 0 and parts[5] not in found:
            start, end = (int(n, 16) for n in parts[0].split("-"))
            found[parts[5]] = Mapping(parts[5], start, end)
    return list(found.values())


def addresses(pid: int, maps: str, wanted: dict[str, tuple[str, ...]]) -> dict[str, Function]:
    """Where each wanted symbol lies in process ``pid``, and its first bytes: ``wanted`` maps a symbol
    to the files (by the start of their name, "libpython", "libc.so") that may export it, in order
    of preference. At most MAX_FILES files are read; NotFound names the symbols none of them has."""
    mappings = mapped_files(maps)
    read: dict[str, dict[str, Function]] = {}
    result: dict[str, Function] = {}
    for symbol, prefixes in wanted.items():
        candidates = (m for prefix in prefixes for m in mappings if Path(m.path).name.startswith(prefix))
        for mapping in candidates:
            if mapping.path not in read:
                if len(read) == MAX_FILES:
                    break
                read[mapping.path] = _functions(pid, mapping, set(wanted))
            found = read[mapping.path].get(symbol)
            if found is not None:
                result[symbol] = Function(mapping.start + found.address, found.code)
                break
    missing = [symbol for symbol in wanted if symbol not in result]
    if missing:
        raise NotFound(", ".join(sorted(missing)))
    return result


def _functions(pid: int, mapping: Mapping, names: set[str]) -> dict[str, Function]:
    """The wanted functions a mapped file exports; none when it cannot be read or is no ELF file."""
    try:
        fd = _open(pid, mapping)
    except (OSError, NotFound):
        return {}
    try:
        return exported(fd, names)
    except (OSError, struct.error, NotFound):
        return {}
    finally:
        os.close(fd)


def _open(pid: int, mapping: Mapping) -> int:
    """The mapped file itself: /proc/PID/map_files names the very object the job mapped, even one
    removed or replaced since. Where this process may not open those (they need CAP_SYS_ADMIN: a
    user attaching to their own job, a container without it), the file by its name in the job's
    root, the last part never a link. Either way opened without blocking, and only a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(f"/proc/{pid}/map_files/{mapping.start:x}-{mapping.end:x}", flags)
    except PermissionError:
        if mapping.path.endswith(" (deleted)"):
            raise NotFound("a removed file") from None
        fd = os.open(f"/proc/{pid}/root{mapping.path}", flags | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotFound("not a regular file")
    return fd


def _table(fd: int, offset: int, size: int) -> bytes:
    if size > MAX_TABLE:
        raise NotFound(f"a table of {size} bytes")
    return _read(fd, offset, size)


def _places(strings: bytes, name: str) -> list[int]:
    """Where ``name`` begins in a string table (also as the tail of a longer name, which linkers share)."""
    key = name.encode() + b"\0"
    places: list[int] = []
    at = strings.find(key)
    while at >= 0 and len(places) < MAX_SAME_NAME:
        places.append(at)
        at = strings.find(key, at + 1)
    return places


def _code(fd: int, segments: list[tuple[int, ...]], value: int) -> bytes:
    """The first CODE_BYTES bytes of the function at ``value``, from the segment whose file bytes hold it."""
    for _, _, offset, vaddr, _, filesz, *_ in segments:
        if vaddr <= value and value + CODE_BYTES <= vaddr + filesz:
            return _read(fd, offset + value - vaddr, CODE_BYTES)
    raise NotFound(f"no segment holds the code at {value:#x}")


def _read(fd: int, offset: int, size: int) -> bytes:
    try:
        data = os.pread(fd, size, offset)
    except OverflowError:  # an offset past any file
        raise NotFound("an offset past the file") from None
    if len(data) != size:
        raise NotFound("the file ends early")
    return data
