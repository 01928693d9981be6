"""Idle connections held open against a server, each reopened as soon as the server drops it: the attack
on ``gputui serve`` of issue 44 (128 connections that never send a byte, reopened 25 times a second),
for tests/unit/test_serve_cli.py and bench/bench_serve_load.py."""

from __future__ import annotations

import select
import socket
import threading
import time

CONNECTIONS = 128
REOPENS_PER_SECOND = 25.0


class IdleFlood:
    """``count`` connections to ``address`` that send nothing; one the server closes is reopened, at most
    ``rate`` reopens a second. Runs on a thread of its own between ``with``'s enter and exit."""

    def __init__(self, address: tuple[str, int], count: int = CONNECTIONS, rate: float = REOPENS_PER_SECOND) -> None:
        self.address = address
        self.count = count
        self.rate = rate
        self.opened = 0  # connections made, the first ``count`` included
        self.dropped = 0  # connections the server closed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-flood", daemon=True)

    def __enter__(self) -> IdleFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        held: dict[int, socket.socket] = {}
        poller = select.poll()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                # the first ``count`` at once, then ``rate`` a second
                allowed = self.count + int((time.monotonic() - started) * self.rate)
                while len(held) < self.count and self.opened < allowed and not self._stop.is_set():
                    connection = self._connect()
                    self.opened += 1
                    if connection is not None:
                        held[connection.fileno()] = connection
                        poller.register(connection, select.POLLIN)
                for fd, _ in poller.poll(20):  # readable: the server closed it (or answered, then closed)
                    poller.unregister(fd)
                    held.pop(fd).close()
                    self.dropped += 1
        finally:
            for connection in held.values():
                connection.close()

    def _connect(self) -> socket.socket | None:
        try:
            return socket.create_connection(self.address, timeout=1.0)
        except OSError:  # a full backlog: the kernel dropped the SYN
            return None
