"""Where a sample's probe reports come from: the simulator's probes, the real probes over connections
kept open (a watcher), or the real probes asked once each; and the one way to say a probe did not answer.

Probe trouble never stops a sample: it becomes a line in ``Snapshot.problems``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gputui.model import ProbeReport

PROBE_TIMEOUT = 1.0  # seconds each real probe is given to answer a one-off ask

Reports = tuple[tuple[ProbeReport, ...], tuple[str, ...]]  # the reports, and a line for each probe that failed


@runtime_checkable
class SimulatedProbes(Protocol):
    """What a collector of the simulated machine offers besides its snapshots: its probed jobs' reports.
    The real collector offers the same (none); real probes answer over their sockets instead."""

    def probe_reports(self) -> tuple[ProbeReport, ...]: ...


class Watcher(Protocol):
    """What watches the real probes: the link client's ProbeWatcher, a test's fake."""

    @property
    def unavailable(self) -> Mapping[int, str]:
        """{pid: why its probe did not answer}"""

    @property
    def error(self) -> str | None:
        """A fault of the watcher itself."""

    def poll(self) -> Mapping[int, ProbeReport]: ...

    def close(self) -> None: ...


class ReportSource(Protocol):
    """One place reports come from; asked once per sample, on the sampling thread."""

    def reports(self) -> Reports: ...

    def close(self) -> None: ...


class FromSimulator:
    """The simulated machine's probed jobs' reports."""

    def __init__(self, simulator: SimulatedProbes) -> None:
        self._simulator = simulator

    def reports(self) -> Reports:
        return tuple(self._simulator.probe_reports()), ()

    def close(self) -> None:
        pass  # the collector it belongs to is closed with the pipeline


class Watched:
    """The real probes, over connections kept open: each asked for its steps since the last sample."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def reports(self) -> Reports:
        try:
            found = self.watcher.poll()
        except Exception as exc:  # noqa: BLE001 - a misbehaving probe must never stop the sampling
            return (), (f"probes could not be read: {type(exc).__name__}: {exc}",)
        problems = [did_not_answer(pid, why) for pid, why in sorted(dict(self.watcher.unavailable or {}).items())]
        if self.watcher.error:
            problems.append(self.watcher.error)
        return tuple(report for _, report in sorted(found.items())), tuple(problems)

    def close(self) -> None:
        self.watcher.close()


class Fetched:
    """The real probes of this user, each asked once for its whole report (a one-shot print)."""

    def reports(self) -> Reports:
        from gputui.link.client import ProbeUnavailable, discover, fetch_report

        found, problems = [], []
        for pid in discover():
            try:
                found.append(fetch_report(pid, timeout=PROBE_TIMEOUT))
            except ProbeUnavailable as exc:
                problems.append(did_not_answer(pid, exc.detail))
        return tuple(found), tuple(problems)

    def close(self) -> None:
        pass


def did_not_answer(pid: int, reason: str) -> str:
    """The one wording of a probe that could not be read, in every mode."""
    return f"probe of process {pid} did not answer: {reason}"


def gathered(sources: tuple[ReportSource, ...]) -> Reports:
    """Every source's reports, one per pid (the first source's wins), by pid; every source's problems."""
    found: dict[int, ProbeReport] = {}
    problems: list[str] = []
    for source in sources:
        reports, trouble = source.reports()
        for report in reports:
            found.setdefault(report.pid, report)
        problems += trouble
    return tuple(found[pid] for pid in sorted(found)), tuple(problems)
