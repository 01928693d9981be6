"""Basic auth for ``gputui serve``: a file of user names and scrypt-hashed passwords.

The file has one ``NAME:HASH`` line per user (``#`` starts a comment), each line made by
``gputui serve --hash-password NAME``, which reads the password from the terminal or standard input,
never from the command line. Only hashes are stored; a request's password is checked with scrypt
and compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gputui.errors import UserError
from gputui.files import check_private, read_small
from gputui.model.record import Record
from gputui.untrusted import visible

SCHEME = "scrypt"
# scrypt's cost: about 50 ms of CPU and 16 MiB per check, Django's choice for passwords. Prometheus
# sends the same header at every scrape, so a header that passed is remembered (as a digest) and the
# check is paid once, not every 15 s.
COST, BLOCK_SIZE, PARALLEL = 1 << 14, 8, 1
# What a hash in the file may ask for, both ways: no weaker than --hash-password's own (N=2 would make
# the hash worthless), and at most 16 times its time and 64 MiB (p=1048576 would take a minute a check).
MIN_WORK = COST * BLOCK_SIZE * PARALLEL
MAX_WORK = 16 * MIN_WORK
MAX_PARALLEL = 16
MAX_MEMORY = 64 << 20
SALT_BYTES, KEY_BYTES = 16, 32
MIN_SALT, KEY_RANGE = 8, range(16, 65)
REMEMBERED = 64  # headers that passed, kept
# Checks of headers not seen before, at once: each takes a core for 50 ms and 16 MiB, and a flood of
# guesses must not take more than this of either. A request waits for a turn at most CHECK_WAIT.
CHECKS_AT_ONCE = 2
CHECK_WAIT = 1.0
# Checks waiting for a turn (or having one), at most: a guess beyond them is BUSY at once, unhashed, so
# a flood of guesses queues no more than this ahead of anyone (a remembered header never waits at all).
CHECKS_WAITING = 8
USERS_FILE_LIMIT = 1 << 20  # bytes: some thousands of users

@dataclass(frozen=True, eq=False, repr=False)
class Hashed(Record):
    """A password as the file keeps it: scrypt's parameters, the salt and the derived key."""

    cost: int
    block_size: int
    parallel: int
    salt: bytes
    key: bytes

    @classmethod
    def of(cls, password: str, salt: bytes | None = None) -> Hashed:
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        return cls(COST, BLOCK_SIZE, PARALLEL, salt, _derive(password, salt, COST, BLOCK_SIZE, PARALLEL))

    @classmethod
    def parse(cls, text: str) -> Hashed:
        """``scrypt$N$r$p$SALT$KEY`` (base64); ValueError when it is not one."""
        parts = text.split("$")
        if len(parts) != 6 or parts[0] != SCHEME:
            raise ValueError(f"not a {SCHEME} hash made by gputui serve --hash-password")
        try:
            cost, block_size, parallel = (int(p) for p in parts[1:4])
            salt, key = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
        except (ValueError, binascii.Error):
            raise ValueError("its parameters or base64 parts are damaged") from None
        _check_parameters(cost, block_size, parallel)
        if len(salt) < MIN_SALT or len(key) not in KEY_RANGE:
            raise ValueError("its salt or key has the wrong length")
        return cls(cost, block_size, parallel, salt, key)

    def __str__(self) -> str:
        encode = base64.b64encode
        return (f"{SCHEME}${self.cost}${self.block_size}${self.parallel}$"
                f"{encode(self.salt).decode()}${encode(self.key).decode()}")

    def matches(self, password: str) -> bool:
        derived = _derive(password, self.salt, self.cost, self.block_size, self.parallel, len(self.key))
        return hmac.compare_digest(derived, self.key)


def _check_parameters(cost: int, block_size: int, parallel: int) -> None:
    """ValueError unless scrypt's N, r and p are a cost this server can pay and an attacker cannot skip."""
    work = cost * block_size * parallel
    shown = f"N={cost}, r={block_size}, p={parallel}"
    if cost < 2 or cost & (cost - 1) or block_size < 1 or not 1 <= parallel <= MAX_PARALLEL or \
            128 * cost * block_size > MAX_MEMORY or work > MAX_WORK:
        raise ValueError(f"its scrypt parameters are out of range ({shown}: N a power of two, p at most "
                         f"{MAX_PARALLEL}, at most {MAX_MEMORY >> 20} MiB and N*r*p at most {MAX_WORK})")
    if work < MIN_WORK:
        raise ValueError(f"its scrypt parameters are too weak ({shown}: N*r*p under {MIN_WORK}); "
                         "make the line again with gputui serve --hash-password")


def _derive(password: str, salt: bytes, cost: int, block_size: int, parallel: int,
            length: int = KEY_BYTES) -> bytes:
    return hashlib.scrypt(password.encode("utf-8", "surrogatepass"), salt=salt, n=cost, r=block_size,
                          p=parallel, maxmem=2 * MAX_MEMORY, dklen=length)


def password_line(name: str, password: str) -> str:
    """One line of the users file."""
    if not name or ":" in name or name != name.strip() or not name.isprintable():
        raise UserError(f"a user name for basic auth has no colon, spaces or control characters: {visible(name)!r}")
    if not password:
        raise UserError("an empty password protects nothing")
    return f"{name}:{Hashed.of(password)}"


class Check(enum.Enum):
    """What a request's ``Authorization`` header is worth."""

    ALLOWED = "allowed"
    REFUSED = "refused"
    BUSY = "busy"  # not checked: as many checks as allowed are running; ask again later


class Users:
    """Who may ask, and the check of a request's ``Authorization`` header."""

    def __init__(self, hashes: dict[str, Hashed]) -> None:
        self._hashes = dict(hashes)
        # A name that is not there is checked against this, so a wrong name takes as long as a
        # wrong password and the answer's time does not tell which names exist.
        self._nobody = Hashed.of(os.urandom(16).hex())
        self._passed: OrderedDict[bytes, None] = OrderedDict()
        # Held for dictionary steps only, never during scrypt: a header that passed before is
        # answered at once however many guesses are being checked.
        self._lock = threading.Lock()
        self._checks = threading.BoundedSemaphore(CHECKS_AT_ONCE)
        self._waiting = threading.BoundedSemaphore(CHECKS_WAITING)
        # scrypt runs on these threads only: glibc keeps the 16 MiB it frees in the arena of the thread
        # that ran it, so scrypt on each request's thread grew the exporter by up to 16 MiB a thread.
        self._scrypt = ThreadPoolExecutor(CHECKS_AT_ONCE, thread_name_prefix="gputui-scrypt")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Users:
        """The users file at ``path``; UserError when it is unreadable, not yours alone to change, or a
        line is not NAME:HASH."""
        what = "the basic auth file"
        where = visible(os.fspath(path))
        data = read_small(path, USERS_FILE_LIMIT, what)  # a FIFO, /dev/zero or a huge file: one line
        try:
            # read_small has checked that it is a regular file; who owns it and who may write it here.
            check_private(os.stat(path), path, what)
            text = data.decode("utf-8")
        except OSError as exc:
            raise UserError(f"cannot read {what} {where}: {visible(exc.strerror or str(exc))}") from None
        except UnicodeDecodeError:
            raise UserError(f"cannot read {what} {where}: it is not UTF-8 text") from None
        hashes = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, colon, hashed = line.partition(":")
            try:
                if not colon or not name:
                    raise ValueError("it is not NAME:HASH")
                hashes[name] = Hashed.parse(hashed)
            except ValueError as exc:
                # The line itself is not quoted: it may be a password written there by mistake.
                raise UserError(f"{where}, line {number}: {exc}") from None
        if not hashes:
            raise UserError(f"the basic auth file {where} names no user (add one with "
                            "gputui serve --hash-password NAME >> FILE)")
        return cls(hashes)

    def remembered(self, header: str | None) -> bool:
        """Whether ``header`` passed before (and is still among the REMEMBERED): no hashing, no wait, so an
        event loop may ask it before it hands a check to a thread."""
        if not header:
            return False
        digest = _digest(header)
        with self._lock:
            if digest in self._passed:
                self._passed.move_to_end(digest)
                return True
        return False

    def check(self, header: str | None, wait: bool = True) -> Check:
        """Whether ``header`` (``Basic base64(name:password)``) names a user with that password: at once
        for a header that passed before; else scrypt, when one of CHECKS_AT_ONCE turns comes within
        CHECK_WAIT seconds (at once, without ``wait``), or BUSY (at once when CHECKS_WAITING wait already)."""
        if not header:
            return Check.REFUSED
        if self.remembered(header):
            return Check.ALLOWED
        if not self._waiting.acquire(blocking=False):
            return Check.BUSY
        try:
            ok = self._verify(header, wait)
        finally:
            self._waiting.release()
        if ok is None:
            return Check.BUSY
        if not ok:
            return Check.REFUSED
        digest = _digest(header)
        with self._lock:
            self._passed[digest] = None
            while len(self._passed) > REMEMBERED:
                self._passed.popitem(last=False)
        return Check.ALLOWED

    def _verify(self, header: str, wait: bool) -> bool | None:
        """scrypt on ``header``'s password, in one of CHECKS_AT_ONCE turns; None when no turn came."""
        if not self._checks.acquire(timeout=CHECK_WAIT if wait else 0):
            return None
        try:
            name, password = _credentials(header)
            hashed = self._hashes.get(name)
            return self._scrypt.submit((hashed or self._nobody).matches, password).result() and hashed is not None
        finally:
            self._checks.release()


def _digest(header: str) -> bytes:
    """What is remembered of a header that passed: its SHA-256, never the password itself."""
    return hashlib.sha256(header.encode("utf-8", "surrogateescape")).digest()


def _credentials(header: str) -> tuple[str, str]:
    """(name, password) from a basic auth header; empty strings where it is not one."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return "", ""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (ValueError, binascii.Error):
        return "", ""
    name, _, password = decoded.partition(":")
    return name, password
