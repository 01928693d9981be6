"""Run a command under the restrictions a systemd unit puts on its own process, without systemd: for
machines with systemd-analyze but no systemd running (CI's containers, this one).

    python tests/unit_sandbox.py deploy/systemd/gputui-serve.service -- gputui serve ...

What a process can do to itself, as systemd does it at ExecStart (each a seccomp filter of its own,
through libseccomp, stacked as systemd stacks them):
- NoNewPrivileges=yes, CapabilityBoundingSet= (the bounding set; root's powers after exec are those);
- SystemCallFilter= (an allow list of systemd's own groups, as `systemd-analyze syscall-filter` lists
  them) with SystemCallErrorNumber= (else a call outside it kills the process), SystemCallArchitectures=native;
- RestrictAddressFamilies= (socket() of another family fails with EAFNOSUPPORT);
- MemoryDenyWriteExecute=yes as systemd 252 does it (mmap writable and executable, mprotect or
  pkey_mprotect to executable, shmat with SHM_EXEC: EPERM), stricter than the kernel's PR_SET_MDWE that
  later systemds use where they can;
- LockPersonality=yes (personality() may only set the current one).
Not emulated: what needs namespaces, cgroups or mounts (ProtectSystem=, ProtectHome=, DevicePolicy=,
PrivateMounts=, RestrictNamespaces=, RestrictRealtime=, RestrictSUIDSGID=, MemoryMax=, UMask=).
"""

from __future__ import annotations

import configparser
import ctypes
import ctypes.util
import errno
import os
import socket
import subprocess
import sys

_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_CMP_NE, _CMP_EQ, _CMP_GE, _CMP_MASKED_EQ = 1, 4, 5, 7
_PROT_WRITE, _PROT_EXEC, _SHM_EXEC = 0x2, 0x4, 0o100000
_AF_MAX = 64  # above every address family Linux has (46 in 6.x)
_PERSONALITY_QUERY = 0xFFFFFFFF


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def service(unit: str) -> dict[str, str]:
    """The unit's [Service] settings (each given once)."""
    parser = configparser.ConfigParser(interpolation=None, strict=True, comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # systemd's keys are case-sensitive
    with open(unit, encoding="utf-8") as file:
        parser.read_file(file)
    return dict(parser["Service"])


def syscall_groups() -> dict[str, list[str]]:
    """systemd's system call groups (``@system-service`` ...), each as systemd-analyze lists it."""
    listed = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listed.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif not line.startswith(" "):
            current = None  # "# Unlisted system calls ..." and the like: no group
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    """System call names, groups expanded."""
    found: set[str] = set()
    for name in names:
        found |= expand(groups[name], groups) if name.startswith("@") else {name}
    return found


class _Filter:
    """One seccomp filter, built through libseccomp and loaded into this process."""

    _lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    _lib.seccomp_init.restype = ctypes.c_void_p
    _lib.seccomp_init.argtypes = [ctypes.c_uint32]
    _lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                            ctypes.POINTER(_ArgCmp)]
    _lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    _lib.seccomp_load.argtypes = [ctypes.c_void_p]
    _lib.seccomp_release.argtypes = [ctypes.c_void_p]

    def __init__(self, default: int) -> None:
        self._ctx = self._lib.seccomp_init(default)
        if not self._ctx:
            raise OSError("seccomp_init failed")

    def rule(self, action: int, name: str, *comparisons: tuple[int, int, int, int]) -> None:
        number = self._lib.seccomp_syscall_resolve_name(name.encode())
        if number == -1:  # __NR_SCMP_ERROR: a name libseccomp does not know
            return
        array = (_ArgCmp * max(len(comparisons), 1))(*(_ArgCmp(*c) for c in comparisons))
        result = self._lib.seccomp_rule_add_array(self._ctx, action, number, len(comparisons), array)
        if result < 0:
            raise OSError(-result, f"seccomp_rule_add {name}: {os.strerror(-result)}")

    def load(self) -> None:
        result = self._lib.seccomp_load(self._ctx)
        self._lib.seccomp_release(self._ctx)
        if result < 0:
            raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _capability_numbers(names: list[str]) -> set[int]:
    libcap = ctypes.CDLL(ctypes.util.find_library("cap") or "libcap.so.2")
    found = set()
    for name in names:
        value = ctypes.c_int()
        if libcap.cap_from_name(name.lower().encode(), ctypes.byref(value)) != 0:
            raise ValueError(f"not a capability: {name}")
        found.add(value.value)
    return found


def restrict(settings: dict[str, str]) -> None:
    """Apply the unit's per-process restrictions to this process (and so to what it executes)."""
    libc = _libc()
    if settings.get("NoNewPrivileges") == "yes" and libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if "CapabilityBoundingSet" in settings:
        kept = _capability_numbers(settings["CapabilityBoundingSet"].split())
        with open("/proc/sys/kernel/cap_last_cap") as file:
            last = int(file.read())
        for capability in set(range(last + 1)) - kept:
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"PR_CAPBSET_DROP {capability}")
    filters = [make(settings) for make in (_address_families, _write_execute, _personality, _system_calls)]
    for made in filters:  # the allow list last: loading the others takes calls it may not allow
        if made is not None:
            made.load()


def _address_families(settings: dict[str, str]) -> _Filter | None:
    if "RestrictAddressFamilies" not in settings:
        return None
    families = {getattr(socket, name) for name in settings["RestrictAddressFamilies"].split()}
    made = _Filter(_ALLOW)
    for family in set(range(_AF_MAX)) - families:
        made.rule(_ERRNO | errno.EAFNOSUPPORT, "socket", (0, _CMP_EQ, family, 0))
    made.rule(_ERRNO | errno.EAFNOSUPPORT, "socket", (0, _CMP_GE, _AF_MAX, 0))
    return made


def _write_execute(settings: dict[str, str]) -> _Filter | None:
    if settings.get("MemoryDenyWriteExecute") != "yes":
        return None
    made = _Filter(_ALLOW)
    both = _PROT_WRITE | _PROT_EXEC
    made.rule(_ERRNO | errno.EPERM, "mmap", (2, _CMP_MASKED_EQ, both, both))
    made.rule(_ERRNO | errno.EPERM, "mprotect", (2, _CMP_MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
    made.rule(_ERRNO | errno.EPERM, "pkey_mprotect", (2, _CMP_MASKED_EQ, _PROT_EXEC, _PROT_EXEC))
    made.rule(_ERRNO | errno.EPERM, "shmat", (2, _CMP_MASKED_EQ, _SHM_EXEC, _SHM_EXEC))
    return made


def _personality(settings: dict[str, str]) -> _Filter | None:
    if settings.get("LockPersonality") != "yes":
        return None
    current = _libc().personality(_PERSONALITY_QUERY) & 0xFFFFFFFF
    made = _Filter(_ALLOW)
    # as systemd: any other value is refused, the query (0xffffffff) too
    made.rule(_ERRNO | errno.EPERM, "personality", (0, _CMP_NE, current, 0))
    return made


def _system_calls(settings: dict[str, str]) -> _Filter | None:
    if "SystemCallFilter" not in settings:
        return None
    names = settings["SystemCallFilter"].split()
    assert not names[0].startswith("~"), "an allow list is emulated, not a deny list"
    failing = getattr(errno, settings.get("SystemCallErrorNumber", ""), None)
    # without SystemCallErrorNumber= a call outside the list kills the process (SIGSYS)
    made = _Filter(0x80000000 if failing is None else _ERRNO | failing)
    for name in sorted(expand(names, syscall_groups())):
        made.rule(_ALLOW, name)
    return made


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    restrict(service(argv[0]))
    command = argv[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
