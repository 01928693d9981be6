"""A result one thread hands another: the first sample, taken while Textual loads (ui/startup/launch.py),
and waited for by the app's first sampling worker (ui/app.py).
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Ahead(Generic[T]):
    """A result the opening thread hands over: the part of concurrent.futures.Future used here.
    concurrent.futures itself brings logging, about 8 ms of CPU before the first frame; Textual
    loads it later."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def set_result(self, value: T) -> None:
        self._value = value
        self._done.set()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def done(self, timeout: float | None = None) -> bool:
        """Whether the result (or its exception) is in, waiting ``timeout`` seconds for it at most."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> T:
        """The result, or the exception raised again; TimeoutError after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError("not there yet")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set before the event
