"""Telling people: each channel (a command, a webhook) delivers on a thread of its own, so a receiver that
hangs or fails never slows sampling. Alerts that start or end in one sample go as one delivery; a channel
makes at most ``per_minute`` deliveries a minute (what waits goes with the next one), keeps at most
``QUEUE`` events waiting (the oldest dropped, and counted in the next delivery), and runs one at a time.
The live monitor's toasts, bell and desktop notification are one more channel, limited the same way.
What a receiver gets in fields of bounded size (a command's environment, an HTTP header) is cut to
fit (``untrusted.within``), the cut said; the JSON document and the message body carry every alert whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gputui.collect.host import host_name
from gputui.model import to_jsonable
from gputui.model.alert import PER_MINUTE, STARTED, TIMEOUT, AlertEvent
from gputui.model.record import Record
from gputui.untrusted import visible, within

QUEUE = 100  # events waiting per channel at most: a receiver down for hours must not grow the monitor
# Characters of one GPUTUI_ALERT_* value at most: Linux refuses to start a command whose environment holds
# any one string over 128 KiB (E2BIG), and a title may quote a job name or a run id that long.
ENV_VALUE = 1000


@dataclass(frozen=True, eq=False, repr=False)
class Delivery(Record):
    """What one delivery carries: the events, and how many older ones were dropped or held back."""

    events: tuple[AlertEvent, ...]
    dropped: int = 0
    host: str = ""

    def document(self) -> dict:
        """The JSON document commands and plain webhooks get."""
        return {"host": self.host, "dropped": self.dropped,
                "events": [to_jsonable(event) for event in self.events]}

    def text(self) -> str:
        """The same for people (chat messages, desktop notifications, stderr)."""
        lines = [line(event) for event in self.events]
        if self.dropped:
            lines.append(f"({self.dropped} older alerts dropped: the receiver was too slow)")
        return "\n".join(lines)


def line(event: AlertEvent) -> str:
    """One alert event in one line: `[warning] process 51200 leaks activations: ...`, or its ending."""
    alert = event.alert
    if event.change == STARTED:
        return f"[{alert.severity}] {alert.title}" + (f": {alert.detail}" if alert.detail else "")
    return f"[resolved] {alert.title}"


class CommandChannel:
    """Runs ``command`` (by the shell) with the delivery's JSON on stdin and its first event's fields in
    GPUTUI_ALERT_* variables (made visible, each at most ENV_VALUE characters); raises on a failure, kills
    it (and its children) past ``timeout``."""

    def __init__(self, command: str, timeout: float = TIMEOUT) -> None:
        self.command, self.timeout = command, timeout
        self._running: subprocess.Popen | None = None

    def __call__(self, delivery: Delivery) -> None:
        first = delivery.events[0]
        # The title is visible already (the rules made it so); the key quotes a run id as the job set it.
        fields = {"KIND": first.alert.kind, "CHANGE": first.change, "SEVERITY": first.alert.severity,
                  "TITLE": first.alert.title, "KEY": visible(first.alert.key), "COUNT": str(len(delivery.events))}
        env = {**os.environ, **{f"GPUTUI_ALERT_{name}": within(value, ENV_VALUE) for name, value in fields.items()}}
        import json  # here: the live monitor loads this module, and json only where a command is asked for

        body = json.dumps(delivery.document()).encode()
        with subprocess.Popen(["/bin/sh", "-c", self.command], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=env, start_new_session=True) as child:
            self._running = child
            try:
                _, errors = child.communicate(body, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.stop()
                child.communicate()
                raise RuntimeError(f"alert command still running after {self.timeout:g} s; killed") from None
            finally:
                self._running = None
        if child.returncode != 0:
            said = errors.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(f"alert command exited {child.returncode}" + (f": {said[-1]}" if said else ""))

    def stop(self) -> None:
        """Kills the command running now, with its children (its own session), so none outlives gputui."""
        child = self._running
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended meanwhile
                pass


command_channel = CommandChannel


class Channel:
    """One receiver and the thread that feeds it, bounded as the module says."""

    def __init__(self, name: str, send: Callable[[Delivery], None], report: Callable[[str], None], *,
                 per_minute: int = PER_MINUTE, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self._send, self._report, self._clock = name, send, report, clock
        self._per_minute = per_minute
        self._waiting: deque[AlertEvent] = deque()
        self._dropped = 0
        self._sent_at: deque[float] = deque()  # the last minute's deliveries
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"gputui-alerts-{name}", daemon=True)
        self._thread.start()

    def put(self, events: Iterable[AlertEvent]) -> None:
        with self._wake:
            for event in events:
                if len(self._waiting) >= QUEUE:
                    self._waiting.popleft()
                    self._dropped += 1
                self._waiting.append(event)
            self._wake.notify()

    def close(self, wait: float = 0.0) -> None:
        """Stops the thread once what waits is delivered, waiting for that at most ``wait`` seconds."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(wait)
        stop = getattr(self._send, "stop", None)
        if self._thread.is_alive() and stop is not None:
            stop()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if not self._waiting:
                    return
            self._wait_for_the_rate_limit()
            with self._wake:
                delivery = Delivery(tuple(self._waiting), self._dropped, host_name())
                self._waiting.clear()
                self._dropped = 0
            try:
                self._send(delivery)
            except Exception as exc:  # noqa: BLE001 - a receiver's failure is reported, never raised
                self._report(f"{self.name}: {exc}")

    def _wait_for_the_rate_limit(self) -> None:
        """Sleeps while this minute's deliveries are spent: what arrives meanwhile goes in the next one."""
        while True:
            now = self._clock()
            while self._sent_at and now - self._sent_at[0] >= 60.0:
                self._sent_at.popleft()
            if len(self._sent_at) < self._per_minute or self._closed:
                break
            with self._wake:  # woken early by new events: they are grouped, and the wait goes on
                self._wake.wait(60.0 - (now - self._sent_at[0]))
        self._sent_at.append(now)


class Notifier:
    """Every channel asked for; ``notify`` hands a sample's events to each and returns at once."""

    def __init__(self, channels: Sequence[Channel]) -> None:
        self.channels = tuple(channels)

    def notify(self, events: Sequence[AlertEvent]) -> None:
        if events:
            for channel in self.channels:
                channel.put(events)

    def close(self, wait: float = 0.0) -> None:
        for channel in self.channels:
            channel.close(wait)
