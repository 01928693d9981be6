"""Attaching the probe to a running PyTorch process from the live monitor, and detaching it: the keys,
the confirmation and what it says, the command run (through an injected runner, never gdb here), its
one-line answer shown, and the refusals of --readonly, the many-host view and the replay."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ui_data import T0, make_app, process, settle, sleeping_child, training_snapshot, wait_for

from gputui.model import ProbeReport
from gputui.ui.actions.signals import started_at
from gputui.ui.main_screen import MainScreen
from gputui.ui.screens.confirm import ConfirmProbe
from gputui.ui.screens.detail import ProcessDetail


class Runner:
    """Stands in for running ``gputui attach``: records each command, answers as told."""

    def __init__(self, status: int = 0, line: str = "", raises: Exception | None = None) -> None:
        self.status, self.line, self.raises = status, line, raises
        self.ran: list[tuple[list[str], float]] = []

    def __call__(self, argv: list[str], limit: float) -> tuple[int, str]:
        self.ran.append((argv, limit))
        if self.raises is not None:
            raise self.raises
        return self.status, self.line


@pytest.fixture
def job():
    """A real process to stand for the training job: its pid and start time are its identity."""
    child = sleeping_child()
    yield child
    child.kill()
    child.wait()


def with_job(pid: int, *, uses_torch: bool | None = True, probed: bool = False):
    """The training snapshot with ``pid`` as the biggest GPU process (selected first)."""
    snap = training_snapshot(extra=[process(pid, 0, gpu_memory=70 << 30, command=("python", "train.py"),
                                            user="bob", started_at=started_at(pid), uses_torch=uses_torch)])
    if probed:
        snap = snap.__class__(**{**snap.__dict__, "probes": (ProbeReport(pid=pid, taken_at=T0, via="run"),)})
    return snap


def said(app) -> list[str]:
    return [n.message for n in app._notifications]


async def test_a_confirms_then_runs_gputui_attach_and_shows_its_line(job):
    runner = Runner(0, f"probe started in process {job.pid}; watch it with `gputui` or `gputui probe {job.pid}`")
    app = make_app([with_job(job.pid)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        screen = app.screen
        assert isinstance(screen, ConfirmProbe) and screen.attach and screen.pid == job.pid
        assert str(screen.query_one("#confirm-title").render()) == f"Attach the PyTorch probe to process {job.pid}?"
        assert str(screen.query_one("#confirm-what").render()) == "python train.py  (user bob)"
        assert str(screen.query_one("#confirm-effect").render()) == (
            f"gputui will pause process {job.pid} for a moment (gdb) to start the PyTorch probe inside it. The job "
            "then keeps training; the probe's hooks take a small share of each step. D detaches it again.")
        assert runner.ran == []  # nothing before the answer
        samples = app.samples
        await pilot.press("y")
        await wait_for(pilot, lambda: any(m.startswith("probe started") for m in said(app)))
        assert runner.ran == [([sys.executable, "-m", "gputui", "attach", str(job.pid)], 60.0)]
        assert isinstance(app.screen, MainScreen)
        await wait_for(pilot, lambda: app.samples > samples)  # sampled again at once: the probe shows


async def test_no_leaves_the_process_alone(job):
    runner = Runner()
    app = make_app([with_job(job.pid)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "n")
        await pilot.pause(0.2)
        assert runner.ran == [] and isinstance(app.screen, MainScreen)


async def test_a_refusal_is_the_commands_own_line(job):
    line = f"gputui: not permitted to attach to process {job.pid}: kernel.yama.ptrace_scope = 2: only root may attach"
    runner = Runner(2, line)
    app = make_app([with_job(job.pid)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "y")
        await wait_for(pilot, lambda: line in said(app))
        note = next(n for n in app._notifications if n.message == line)
        assert note.severity == "error" and note.title == "Probe not attached"


async def test_a_command_past_its_time_limit_is_said(job):
    runner = Runner(raises=subprocess.TimeoutExpired(["gputui"], 60.0))
    app = make_app([with_job(job.pid)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "y")
        await wait_for(pilot, lambda: f"gputui attach {job.pid} did not finish within 60 s: it was stopped"
                       in said(app))


async def test_a_pid_that_another_process_took_is_not_attached_to(job):
    snap = with_job(job.pid)
    # The row sampled was another process (an earlier start time) that had this pid.
    procs = tuple(p.__class__(**{**p.__dict__, "started_at": p.started_at - 5}) if p.pid == job.pid else p
                  for p in snap.processes)
    runner = Runner()
    app = make_app([snap.__class__(**{**snap.__dict__, "processes": procs})], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "y")
        await wait_for(pilot, lambda: any("is not the process you chose" in m for m in said(app)))
        assert runner.ran == []


async def test_a_process_without_torch_is_not_offered():
    runner = Runner()
    app = make_app([with_job(4242, uses_torch=False)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)  # nothing to confirm
        assert said(app)[-1] == ("Process 4242 has not loaded PyTorch (no libtorch in its memory map): the probe "
                                 "would have nothing to watch.")


async def test_a_probed_process_is_detached_with_d(job):
    runner = Runner(0, f"probe stopped in process {job.pid}")
    app = make_app([with_job(job.pid, probed=True)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await pilot.pause()
        assert said(app)[-1] == f"Process {job.pid} has a probe already (D detaches it)."
        await pilot.press("D")
        screen = app.screen
        assert isinstance(screen, ConfirmProbe) and not screen.attach
        assert str(screen.query_one("#confirm-title").render()) == f"Detach the probe from process {job.pid}?"
        assert "to stop its probe: its hooks and socket go, the job keeps training" in str(
            screen.query_one("#confirm-effect").render())
        await pilot.press("y")
        await wait_for(pilot, lambda: f"probe stopped in process {job.pid}" in said(app))
        assert runner.ran == [([sys.executable, "-m", "gputui", "detach", str(job.pid)], 60.0)]


async def test_d_on_a_process_without_a_probe_says_so():
    app = make_app([with_job(4242)], attacher=Runner())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("D")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert said(app)[-1] == "Process 4242 has no probe to detach."


async def test_the_detail_screen_offers_the_same(job):
    runner = Runner(0, "probe started")
    app = make_app([with_job(job.pid)], attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ProcessDetail) and app.screen.process is not None)
        panel = str(app.screen.query_one("#probe-summary").render())
        assert "press A to attach one to this running process now" in panel
        await pilot.press("A")
        assert isinstance(app.screen, ConfirmProbe) and app.screen.pid == job.pid
        await pilot.press("y")
        await wait_for(pilot, lambda: runner.ran != [])
        assert runner.ran[0][0][-2:] == ["attach", str(job.pid)]


async def test_the_footer_and_help_show_the_key():
    app = make_app([with_job(4242)])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        shown = {b.binding.id for b in app.active_bindings.values() if b.binding.show}
        assert "probe.attach" in shown
        await pilot.press("question_mark")
        rows = {row[2]: row for _, rows in app.screen.sections for row in rows}
        assert rows["probe.attach"][0] == "A" and rows["probe.detach"][0] == "D"


async def test_readonly_refuses_with_a_message(job):
    runner = Runner()
    app = make_app([with_job(job.pid)], readonly=True, attacher=runner)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "y", "D", "y")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and runner.ran == []
        assert said(app)[-2:] == ["Read-only mode (--readonly): gputui attaches and detaches no probe."] * 2


async def test_the_demo_attaches_nothing():
    app = make_app([with_job(4242)], simulated=True, attacher=Runner())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await pilot.pause()
        assert said(app)[-1] == "Demo mode: process 4242 is simulated; no probe attached or detached."


async def test_the_many_host_view_refuses_with_a_message():
    from still import still_hosts_app

    from gputui.ui.hosts_screen import HostsScreen

    app = still_hosts_app({"node1": "training-node"}, seconds=60, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        await pilot.pause()
        assert isinstance(app.screen, HostsScreen)
        assert said(app)[-1] == ("Process 48231 runs on node1: the many-host view is read-only and attaches no "
                                 "probe on another machine. To attach one there: ssh node1 gputui attach 48231")


async def test_the_replay_refuses_with_a_message(tmp_path):
    from test_ui_replay import at, recording

    from gputui.ui.app import GpuTuiApp
    from gputui.ui.sources.replay import Replay
    from gputui.ui.startup.monitor_options import MonitorOptions

    app = GpuTuiApp(Replay(recording(tmp_path, samples=3)), MonitorOptions(me="bob"))
    async with app.run_test(size=(140, 40)) as pilot:
        await at(pilot, 0)
        await pilot.press("A")
        await pilot.pause()
        assert said(app)[-1] == "A recording: there is no process to attach a probe to or detach one from."
        assert app.screen_stack == [app.main]  # no confirmation asked


async def test_screens_without_a_process_do_not_offer_the_key():
    app = make_app([with_job(4242)])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")  # the help screen: no process to act on
        await pilot.pause()
        shown = {b.binding.id for b in app.active_bindings.values() if b.binding.show}
        assert "probe.attach" not in shown and "help.close" in shown


def test_the_detail_screens_probe_view_says_when_the_probe_attached():
    from gputui.analysis.text import probe_history
    from gputui.model import StepRecord
    from gputui.ui.widgets.probe_panel import headline

    steps = tuple(StepRecord(step=i, ended_at=T0 + i) for i in range(1, 13))
    report = ProbeReport(pid=4242, taken_at=T0 + 20, started_at=T0, via="attach", steps=steps)
    words = probe_history(report)
    assert words.endswith("(gputui attach) to a running job: steps, phase peaks and activations count from its "
                          "first step after that; 12 steps so far, leak verdicts fit 12 of their 64")
    assert words in str(headline(report, None)).split("\n")


async def test_the_words_name_the_detach_key_as_the_config_maps_it(job):
    app = make_app([with_job(job.pid)], attacher=Runner(), keymap={"probe.detach": "ctrl+d"})
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A")
        assert str(app.screen.query_one("#confirm-effect").render()).endswith("ctrl+d detaches it again.")
