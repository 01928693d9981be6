"""serve/auth.py under a flood of guesses: a bound on the checks waiting for scrypt (a guess beyond it is BUSY at
once, unhashed), and a remembered password answered without a check, as gputui web's event loop asks it."""

from __future__ import annotations

import os
import threading
import time

from serve_helpers import basic

from gputui.serve import auth
from gputui.serve.auth import Check, Hashed, Users

PASSWORD = "s3cret pass"


def costly_users() -> Users:
    """alice, hashed at 32 times --hash-password's work (~2 s a check here, 16 MiB still: p repeats the work,
    not the memory), so that guesses hold the checks' turns long enough to be seen holding them, and well past
    the wait for a turn (set to 0.5 s by the test) on a fast machine too."""
    salt = os.urandom(auth.SALT_BYTES)
    parallel = auth.PARALLEL * 32
    return Users({"alice": Hashed(auth.COST, auth.BLOCK_SIZE, parallel, salt,
                                  auth._derive(PASSWORD, salt, auth.COST, auth.BLOCK_SIZE, parallel))})


def test_a_guess_beyond_the_checks_waiting_is_busy_at_once_and_a_remembered_password_needs_no_check(monkeypatch):
    # A waiting guess gives up long before a hashing one ends, however fast or busy the machine: the split
    # below is then the same on every run (with the default 1 s, a fast machine's hash could end in time).
    monkeypatch.setattr(auth, "CHECK_WAIT", 0.5)
    users = costly_users()
    right = basic("alice", PASSWORD)
    assert not users.remembered(right)
    assert users.check(right) is Check.ALLOWED
    assert users.remembered(right) and not users.remembered(basic("alice", "guess")) and not users.remembered(None)
    answers: list[Check] = []
    guessers = [threading.Thread(target=lambda n=n: answers.append(users.check(basic("alice", f"guess {n}"))))
                for n in range(auth.CHECKS_WAITING)]
    for guesser in guessers:
        guesser.start()
    try:
        time.sleep(0.2)  # every guess is hashing or waiting for a turn
        started = time.monotonic()
        assert users.check(basic("alice", "one guess too many")) is Check.BUSY
        assert time.monotonic() - started < 0.1  # not after CHECK_WAIT: no queue, no hashing
        started = time.monotonic()
        assert users.check(right) is Check.ALLOWED and users.remembered(right)
        assert time.monotonic() - started < 0.1
    finally:
        for guesser in guessers:
            guesser.join(30)
    # two turns: two guesses hashed (refused), the others found no turn within CHECK_WAIT
    assert sorted(a.value for a in answers) == sorted([Check.REFUSED.value] * auth.CHECKS_AT_ONCE + [
        Check.BUSY.value] * (auth.CHECKS_WAITING - auth.CHECKS_AT_ONCE))
