"""What each sample costs the pipeline (issue 46, CPU): work done once per change, not once per sample, and
the same answers as doing it every time. The simulated machines here; the real /proc's figures are
tests/unit/test_collect_processes.py's."""

import psutil

from gputui.collect import open_collector
from gputui.collect.jobs import JobFinder
from gputui.model import ProbeReport
from gputui.sample.gather import Gatherer, NoDriver
from gputui.sample.probes import FromSimulator


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


class CountingFinder(JobFinder):
    """The jobs grouped as ever, the groupings counted."""

    def __init__(self, psutil):
        super().__init__(psutil)
        self.calls = 0

    def add_to(self, snapshot):
        self.calls += 1
        return super().add_to(snapshot)


def test_a_machine_s_own_snapshot_is_not_grouped_into_jobs_twice():
    # The collector groups its processes; with nothing added (no probe, no filter) the gatherer's second
    # grouping found the same jobs again, every sample.
    clock = Clock()
    collector = open_collector("torchrun", clock=clock, environ={})  # an 8-rank job on 8 GPUs
    try:
        finder = CountingFinder(collector.machine.psutil)
        gatherer = Gatherer(collector, jobs=finder)
        for second in range(3):
            clock.now = 60.0 + second
            snapshot = gatherer.sample()
            assert snapshot.jobs and finder.calls == 0
            assert JobFinder(collector.machine.psutil).add_to(snapshot).jobs == snapshot.jobs
    finally:
        collector.close()


def test_with_probes_in_the_jobs_are_grouped_again():
    # The leaky demo's probed job: its reports come in after the collector grouped, so the gatherer groups
    # again, and finds what a grouping of the whole snapshot finds.
    clock = Clock(150.0)
    collector = open_collector("leaky", clock=clock, environ={})
    try:
        finder = CountingFinder(collector.machine.psutil)
        gatherer = Gatherer(collector, reports=(FromSimulator(collector),), jobs=finder,
                            probed=collector.probed)
        snapshot = gatherer.sample()
        assert snapshot.probes and finder.calls == 1
        assert JobFinder(collector.machine.psutil).add_to(snapshot).jobs == snapshot.jobs
    finally:
        collector.close()


def test_no_driver_without_probes_has_no_jobs_and_with_them_groups_them():
    class Reports:  # the real probes' watcher, as far as the gatherer asks it
        unavailable: dict = {}
        error = None

        def __init__(self):
            self.reports = {}

        def poll(self):
            return self.reports

        def close(self):
            pass

    import os

    from gputui.sample.probes import Watched

    reports = Reports()
    machine = NoDriver("no driver", clock=Clock(10.0))
    finder = CountingFinder(psutil)
    gatherer = Gatherer(machine, reports=(Watched(reports),), probed=machine.probed, jobs=finder)
    assert gatherer.sample().jobs == () and finder.calls == 0
    reports.reports = {os.getpid(): ProbeReport(pid=os.getpid(), taken_at=10.0, command=("python", "train.py"))}
    snapshot = gatherer.sample()
    assert finder.calls == 1 and snapshot.probed
    assert JobFinder(psutil).add_to(snapshot).jobs == snapshot.jobs


def _judged_every_second(scenario, seconds, start=60.0):
    """(sample, the judgements made afresh of it) for each second of a simulated machine's run."""
    from gputui.sample.judge import Judge, judgements_of

    clock = Clock()
    collector = open_collector(scenario, clock=clock, environ={})
    try:
        gatherer = Gatherer(collector, reports=(FromSimulator(collector),), probed=collector.probed,
                            jobs=collector.jobs)
        judge = Judge()
        for second in range(seconds):
            clock.now = start + second
            sample = judge(gatherer.sample())
            yield sample, judgements_of(sample.snapshot, sample.leaks, sample.trends)
    finally:
        collector.close()


def test_quiet_processes_keep_their_judgement_and_it_is_the_one_made_afresh():
    # The training node's processes on 8 GPUs, and the leaky demo (a probed job whose memory grows): past
    # the trends' first 30 s most processes are quiet (no probe, nothing growing) and are re-judged only when
    # the trends' cache judges them again; every judgement equals the one made from scratch.
    for scenario in ("training-node", "leaky"):
        before: dict = {}
        kept = 0
        for sample, fresh in _judged_every_second(scenario, 75):
            assert sample.judgements.processes == fresh.processes and sample.judgements.jobs == fresh.jobs
            now = {p.pid: p for p in sample.judgements.processes}
            kept += sum(1 for pid, judged in now.items() if before.get(pid) is judged)
            before = now
        assert kept > 10 * len(before), scenario  # most of them, most seconds after the first 30
