"""Alerts for one sampling loop: the rules' state carried from sample to sample, and the channels the
settings ask for. Each output that samples (--watch, serve, record, the live monitor) keeps one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gputui.alerts.delivery import Channel, Delivery, Notifier, command_channel
from gputui.alerts.rules import AlertState, evaluate
from gputui.alerts.settings import AlertSettings
from gputui.model import Snapshot
from gputui.model.alert import AlertEvent
from gputui.model.judgement import Judgements
from gputui.options import Options
from gputui.untrusted import visible


class Alerting:
    """Judges each sample for alerts and hands the events to the channels; never blocks on them."""

    def __init__(self, settings: AlertSettings, report: Callable[[str], None],
                 show: Callable[[Delivery], None] | None = None) -> None:
        """``report``: where a receiver's failure is said (stderr, a toast, the exporter's log); ``show``:
        the live monitor's toasts, bell and desktop notification, a channel grouped and limited as the
        others are (a flapping alert rings no more often than it pages)."""
        self.settings = settings
        self._report = report
        self._state = AlertState()
        channels = []
        if show is not None:
            channels.append(Channel("live monitor", show, report, per_minute=settings.per_minute))
        if settings.command:
            channels.append(Channel("alert command", command_channel(settings.command, settings.timeout), report,
                                    per_minute=settings.per_minute))
        if settings.webhook:
            from gputui.alerts.webhook import webhook_channel

            send = webhook_channel(settings.webhook, settings.webhook_format, settings.timeout)
            channels.append(Channel("alert webhook", send, report, per_minute=settings.per_minute))
        self._notifier = Notifier(channels)

    def __call__(self, snapshot: Snapshot, judgements: Judgements) -> tuple[AlertEvent, ...]:
        """The events this sample starts or ends, already handed to the channels."""
        if not self.settings.enabled:
            return ()
        try:
            self._state, events = evaluate(self._state, snapshot, judgements, self.settings.thresholds)
        except Exception as exc:  # noqa: BLE001 - a sample the rules choke on must not stop sampling
            self._report(f"alert rules failed: {type(exc).__name__}: {exc}")
            return ()
        self._notifier.notify(events)
        return events

    def close(self, wait: float = 2.0) -> None:
        """Lets the channels deliver what waits, for at most ``wait`` seconds each."""
        self._notifier.close(wait)


def alerting_for(options: Options, report: Callable[[str], None]) -> Alerting | None:
    """The alerting ``options`` ask for (gputui.config.resolve: the config's [alerts], the flags over
    them), or None where alerts are off."""
    if not options.alerts.enabled:
        return None
    return Alerting(options.alerts, report)


def to_stderr(text: str) -> None:
    """The plain modes' and the exporter's report of a receiver's failure, or of an alert (--watch)."""
    print(f"gputui: {visible(text)}", file=sys.stderr, flush=True)
