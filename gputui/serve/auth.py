"""Basic auth for ``gputui serve``: a file of user names and scrypt-hashed passwords.

The file has one ``NAME:HASH`` line per user (``#`` starts a comment), each line made by
``gputui serve --hash-password NAME``, which reads the password from the terminal or standard input,
never from the command line. Only hashes are stored; a request's password is checked with scrypt
and compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from gputui.errors import UserError
from gputui.untrusted import visible

SCHEME = "scrypt"
# scrypt's cost: about 50 ms of CPU and 16 MiB per check, Django's choice for passwords. Prometheus
# sends the same header at every scrape, so a header that passed is remembered (as a digest) and the
# check is paid once, not every 15 s.
COST, BLOCK_SIZE, PARALLEL = 1 << 14, 8, 1
MAX_MEMORY = 64 << 20  # what a hash's own parameters may ask scrypt for
SALT_BYTES, KEY_BYTES = 16, 32
REMEMBERED = 64  # headers that passed, kept


@dataclass(frozen=True)
class Hashed:
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
        if cost < 2 or cost & (cost - 1) or block_size < 1 or parallel < 1 or not key or \
                128 * cost * block_size > MAX_MEMORY:
            raise ValueError("its scrypt parameters are out of range")
        return cls(cost, block_size, parallel, salt, key)

    def __str__(self) -> str:
        encode = base64.b64encode
        return (f"{SCHEME}${self.cost}${self.block_size}${self.parallel}$"
                f"{encode(self.salt).decode()}${encode(self.key).decode()}")

    def matches(self, password: str) -> bool:
        derived = _derive(password, self.salt, self.cost, self.block_size, self.parallel, len(self.key))
        return hmac.compare_digest(derived, self.key)


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


class Users:
    """Who may ask, and the check of a request's ``Authorization`` header."""

    def __init__(self, hashes: dict[str, Hashed]) -> None:
        self._hashes = dict(hashes)
        # A name that is not there is checked against this, so a wrong name takes as long as a
        # wrong password and the answer's time does not tell which names exist.
        self._nobody = Hashed.of(os.urandom(16).hex())
        self._passed: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()  # one scrypt at a time: a flood of guesses takes one core

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Users:
        """The users file at ``path``; UserError when it is unreadable or a line is not NAME:HASH."""
        where = visible(os.fspath(path))
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise UserError(f"cannot read the basic auth file {where}: {why}") from None
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

    def allow(self, header: str | None) -> bool:
        """Whether ``header`` (``Basic base64(name:password)``) names a user with that password."""
        if not header:
            return False
        digest = hashlib.sha256(header.encode("utf-8", "surrogateescape")).digest()
        with self._lock:
            if digest in self._passed:
                self._passed.move_to_end(digest)
                return True
            name, password = _credentials(header)
            hashed = self._hashes.get(name)
            ok = (hashed or self._nobody).matches(password) and hashed is not None
            if ok:
                self._passed[digest] = None
                while len(self._passed) > REMEMBERED:
                    self._passed.popitem(last=False)
            return ok


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
