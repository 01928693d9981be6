"""What is wrong now, as the live monitor's alert line and alert list (!) show it: the alerts that started and have
not ended, and the problems the latest sample reported, each with when it began. Plain data, no Textual.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gputui.model.alert import STARTED, AlertEvent
from gputui.model.record import Record
from gputui.untrusted import harmless

SEVERITIES = ("critical", "warning", "info")  # most urgent first


@dataclass(frozen=True, eq=False, repr=False)
class Notice(Record):
    """One alert, or one problem, while it lasts."""

    key: str  # what it is about, stable while it lasts
    severity: str  # "critical", "warning" or "info"
    title: str  # one line for people
    detail: str  # the evidence, or "" where there is none
    since: float  # when it began (the time of the sample that showed it)
    alert: bool  # an alert (the rules'), or a problem the sample reported (a probe that did not answer...)


class Notices:
    """The alerts and problems of now, updated by each delivery of alerts and each sample."""

    def __init__(self) -> None:
        self._alerts: dict[str, Notice] = {}
        self._problems: dict[str, Notice] = {}

    def take(self, events: Iterable[AlertEvent]) -> None:
        """An alert channel's delivery: alerts that started are listed (from their first start), those that ended
        leave the list."""
        for event in events:
            alert = event.alert
            key = f"{alert.kind} {alert.key}"
            if event.change != STARTED:
                self._alerts.pop(key, None)
            elif key not in self._alerts:
                # Titles quote job names and commands: made visible once by the rules, guarded here again.
                self._alerts[key] = Notice(key, alert.severity, harmless(alert.title), harmless(alert.detail),
                                           event.at, alert=True)

    def problems(self, said: Iterable[str], at: float) -> None:
        """The problems the latest sample reports (``at`` its time): those it no longer reports are over."""
        kept = {}
        for text in said:
            kept[text] = self._problems.get(text) or Notice(text, "warning", harmless(text), "", at, alert=False)
        self._problems = kept

    def newest_first(self) -> tuple[Notice, ...]:
        """Every notice, the newest first; of those that began together, the most urgent first."""
        every = [*self._alerts.values(), *self._problems.values()]
        return tuple(sorted(every, key=lambda n: (-n.since, SEVERITIES.index(n.severity), n.title)))


def counted(notices: Iterable[Notice]) -> str:
    """"2 alerts", "1 problem", "2 alerts, 1 problem": how many of each there are."""
    notices = list(notices)
    alerts = sum(n.alert for n in notices)
    problems = len(notices) - alerts
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((alerts, "alert"), (problems, "problem")) if n]
    return ", ".join(parts)
