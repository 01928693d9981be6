"""Pilot tests of the probe's view and the analysis in the monitor: the leaky demo's verdict in the
table and the detail screen, the training-node rank's memory breakdown, probed processes NVML does not
list, the allocation-site recording key, and the monitor without a driver.
"""

from __future__ import annotations

import dataclasses
import os
import pwd

import pytest
import ui_data
from plain_data import judged_document, once_text, probe_text
from still import still_app
from ui_data import GIB, MIB, T0, ReplaySource, sleeping_child, training_snapshot

from gputui.errors import UserError
from gputui.model import (
    AllocatorStats,
    MemoryCategories,
    ProbeDevice,
    ProbeReport,
    StepRecord,
)
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.detail import ProcessDetail
from gputui.ui.sources.sampler import NoDriverSource, Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.memory_bar import MemoryBreakdown
from gputui.ui.widgets.processes import ProcessTable

CONTEXT = 742 * MIB  # the simulated H100's CUDA context per process (as measured): NVML = reserved + context


pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)


async def settle(pilot, samples: int = 1) -> None:
    await ui_data.settle(pilot, samples, tries=200)  # the simulated probe's reports take longer


def row(app, key: str):
    return app.screen.query_one(ProcessTable).rows_by_key[key]


def text(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


def drawn_text(widget) -> str:
    """The widget's lines as they are drawn, whatever way it renders them."""
    return "\n".join(strip.text for strip in widget.render_lines(widget.size.region))


def screen_text_all(screen) -> str:
    """Every Static's text on the screen, shown or scrolled out of view."""
    return "\n".join(str(w.render()) for w in screen.query("Static"))


def advice_shown(screen) -> list[str]:
    """The advice as drawn: each shown title and body, in order."""
    box = screen.query_one("#analysis-advice")
    return [str(w.render()) for w in box.query("Static") if w.display]


async def open_detail_of(pilot, pid: int) -> ProcessDetail:
    app = pilot.app
    table = app.screen.query_one(ProcessTable)
    index = next(i for i, key in enumerate(table.row_keys) if key.startswith(f"{pid}/"))
    table.move_cursor(row=index)
    await pilot.pause()
    await pilot.press("enter")
    for _ in range(200):  # generous: the machine's two cores are shared
        await pilot.pause(0.05)
        screen = app.screen
        if isinstance(screen, ProcessDetail) and screen.analysis is not None:
            return screen
    raise AssertionError("the detail screen did not show")


# -- the leaky demo ---------------------------------------------------------------------------

async def test_leaky_demo_shows_the_leak_in_the_table_and_the_detail_screen():
    app = still_app("leaky", seconds=120)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        leak = app.leaks[51200]
        assert (leak.state, leak.category, leak.allocated_per_step, leak.oom_step) == (
            "leak", "activations", 48 * MIB, 498)
        job = row(app, "51200/0")
        # Probe column: the growing category's letter in the error colour; trend: NVML's rate per
        # minute (127.25 MiB/s) and the probe's forecast, counted from the snapshot (68.9 s: the
        # simulator's OOM comes 69.4 s on, at 09:03:09.4, when the reservation for step 499 fails).
        assert job.cells["probe"] == "A" and job.styles["probe"] == "bold $error"
        assert job.cells["trend"] == "▲7.5G/m 69s" and job.styles["trend"] == "$error"
        others = [r for k, r in app.screen.query_one(ProcessTable).rows_by_key.items() if k != "51200/0"]
        assert all(r.cells["probe"] == "" for r in others)

        screen = await open_detail_of(pilot, 51200)
        assert "probe: LEAK in activations" in text(screen, "#detail-headline")
        assert "advice 1: Out of memory in about 69 s" in text(screen, "#detail-headline")
        verdict = text(screen, "#analysis-leak")
        assert "allocated grows 48.0 MiB per step" in verdict
        assert "growing: activations (tensors saved for backward) grows 48.0 MiB per step" in verdict
        assert "(7.03 GiB/min at 0.40 s per step)" in verdict
        assert "out of memory: at step 498, in about 1:09 at 09:03:08" in verdict
        sites = text(screen, "#analysis-sites")
        assert "recording (16 steps recorded, steps 310-325, costs 3.1 ms per step)" in sites
        assert "train.py:97 in train_step  +48.0 MiB/step over 16 steps, 15.2 GiB live" in sites
        room = text(screen, "#analysis-headroom")
        # No larger batch for a job that runs out of memory in 69 s (the room would have read 1.5x).
        assert room.startswith("Will it fit (cuda:0)\nheadroom 12.3 GiB (free 8.56 GiB + cache 3.72 GiB); "
                               "no larger batch fits: allocated grows 48.0 MiB per step (leak), "
                               "out of memory in about 69 s\n")
        assert "largest batch" not in room
        assert "what if 8-bit optimizer state: saves 2.02 GiB (peak 22.1 GiB, computed)" in room
        advice = advice_shown(screen)
        assert advice[0] == "Advice"
        assert advice[1] == "1. Out of memory in about 69 s  [critical]"
        assert advice[2].startswith("saw: At 48.0 MiB per step (leak), the device is full by step 498.\n"
                                    "do: Apply the fix below before then")
        assert advice[3] == "2. Each step's autograd graph is kept alive  [critical]"
        # (the demo's job keeps its losses in a list: the fix is written for it, issue 47 item 7)
        assert "losses.append(loss.item())   # a number; not: losses.append(loss)" in advice[4]
        assert advice[4].endswith("saves about 15.2 GiB")
        assert advice[5] == "3. Other processes hold 4.99 GiB on GPU 0  [info]"
        assert len(advice) == 7
        trend = text(screen, "#detail-trend")
        # One time to OOM on the screen: NVML's straight line (1:08) gives way to the probe's (69 s).
        assert trend.endswith("growing at 7.46 GiB/min; time to out of memory: the probe's forecast, below")
        assert "1:08" not in screen_text_all(screen)


async def test_a_probed_job_an_oom_ended_keeps_its_row_and_its_report():
    """The leaky demo's job runs out at 09:03:09 and its launcher starts it again as 51217: the
    ended process stays, marked, with the report it left; nothing is signalled or asked of it."""
    app = still_app("leaky", seconds=200)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        ended = row(app, "51200/oom")
        assert [k for k in app.screen.query_one(ProcessTable).row_keys][-1] == "51200/oom"
        assert (ended.cells["pid"], ended.cells["probe"], ended.cells["gpu"], ended.cells["type"]) == (
            "51200", "✗", "0", "end")
        assert ended.cells["gpu_memory"] == "34.6G" and ended.cells["trend"] == "✗ OOM 09:03:09"
        assert ended.styles["trend"] == "$error"
        assert "51217/0" in app.screen.query_one(ProcessTable).rows_by_key  # the restarted run
        assert "PROCESSES  3" in str(app.screen.query_one("#table-status").render())  # the ended one not counted
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=len(table.row_keys) - 1)
        await pilot.pause()
        assert app.screen.signal_target() is None
        assert app.screen.why_no_signal_target("SIGTERM") == (
            "Process 51200 has ended (out of memory): there is nothing to signal.")

        screen = await open_detail_of(pilot, 51200)
        assert text(screen, "#detail-title") == "Process 51200 ended: out of memory at 2026-01-05 09:03:09"
        headline = text(screen, "#detail-headline")
        assert headline.startswith("in the forward pass of step 499; at model.py:41 in forward")
        assert "Out of memory in about" not in screen_text_all(screen)  # no forecast for what has ended
        assert "devices  GPU 0, holding 34.6G when last seen" in text(screen, "#detail-info")
        assert "report  none written: these figures are its probe's last report" in text(screen, "#detail-info")
        probe = screen_text_all(screen)
        assert "Last OOM at 2026-01-05 09:03:09 on cuda:0" in probe
        assert "in your code at model.py:41 in forward" in probe
        await pilot.press("s")
        await pilot.pause()
        assert any("Process 51200 has ended: there is no probe left to record." in n.message
                   for n in app._notifications)


async def test_the_demo_record_key_says_its_sites_are_simulated():
    asked = []
    app = still_app("leaky", seconds=120, requester=lambda *a: asked.append(a) or {})
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await open_detail_of(pilot, 51200)
        await pilot.press("s")
        await pilot.pause()
        assert asked == []
        assert any("simulated" in n.message and "no request was sent" in n.message
                   for n in app._notifications)


# -- training-node's probed rank --------------------------------------------------------------

async def test_the_live_bar_once_json_and_gputui_probe_show_the_same_breakdown():
    """The breakdown is the product's central figure: every view shows the same parts, in bytes."""
    import json

    from gputui import units
    from gputui.plain.document import dumps
    from gputui.plain.render import ALLOCATOR_WORDS, TENSOR_WORDS

    app = still_app("leaky", seconds=120)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        (report,) = app.snapshot.probes
        screen = await open_detail_of(pilot, report.pid)
        live = [(item.key, item.size) for item in screen.query_one(MemoryBreakdown).breakdown.items]
        snapshot = app.snapshot
    assert {key for key, _ in live} >= {"parameters", "activations", "cache", "fragmentation", "context"}
    (document,) = json.loads(dumps(judged_document(snapshot)))["breakdowns"]
    assert [(item["key"], item["size"]) for item in document["items"]] == live
    words = {**TENSOR_WORDS, **ALLOCATOR_WORDS}
    for text in (once_text(snapshot, width=200), probe_text(report, snapshot, width=200)):
        flat = " ".join(text.split())
        for key, size in live:
            assert f"{words[key]} {units.size_compact(size)}" in flat, (key, size)


async def test_training_node_rank_breakdown_adds_up_to_the_nvml_figure():
    app = still_app("training-node", seconds=120)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        (report,) = app.snapshot.probes
        proc = next(p for p in app.snapshot.processes if p.pid == report.pid)
        alloc, cats = report.devices[0].allocator, report.devices[0].categories
        screen = await open_detail_of(pilot, report.pid)
        breakdown = screen.query_one(MemoryBreakdown).breakdown
        sizes = {item.key: item.size for item in breakdown.items}
        assert breakdown.nvml == breakdown.total == proc.gpu_memory == 63_036_194_816
        assert sum(sizes.values()) == proc.gpu_memory
        assert sizes == {
            "parameters": cats.parameters,
            "gradients": cats.gradients,
            "optimizer_state": cats.optimizer_state,
            "buffers": cats.buffers,
            "activations": cats.activations,  # mid-step: the forward pass's saved tensors
            "other": cats.other,
            "cache": alloc.reserved - alloc.allocated - alloc.inactive_split,
            "fragmentation": alloc.inactive_split,
            "context": CONTEXT,
        }
        assert (cats.parameters, cats.gradients, cats.optimizer_state, cats.buffers, cats.activations,
                cats.other) == (3_543_348_019, 3_543_348_019, 14_173_392_076, 125_829_120, 26_109_542_400,
                                1_377_409_433)
        assert cats.tensor_bytes() == alloc.allocated == 48_872_869_067
        assert (alloc.reserved, alloc.inactive_split) == (62_258_151_424, 2_677_056_471)
        legend = text(screen, "#probe-breakdown")
        assert "Where its memory goes: 58.7 GiB (NVML per-process memory)" in legend
        assert "742 MiB   1.2%  CUDA context and libraries (NVML - reserved)" in legend
        allocator = text(screen, "#probe-allocator")
        assert "allocated  45.5 GiB (peak 54.7 GiB)" in allocator and "segments  2968" in allocator


async def test_training_node_after_warm_up_has_no_leak_marker():
    app = still_app("training-node", seconds=300)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        (report,) = app.snapshot.probes
        assert app.leaks[report.pid].state == "clean"
        rank = row(app, f"{report.pid}/0")
        assert rank.cells["probe"] == "●" and rank.styles["probe"] == "$accent"
        assert rank.cells["trend"] == ""  # steady
        screen = await open_detail_of(pilot, report.pid)
        assert "probe: no leak" in text(screen, "#detail-headline")
        assert "LEAK" not in text(screen, "#analysis-leak")
        advice = advice_shown(screen)
        assert advice[1] == "1. Activations dominate the step's peak memory  [info]"


# -- probed processes NVML does not list ------------------------------------------------------

def cpu_job(pid: int = 7777, steps: int = 0) -> ProbeReport:
    cats = MemoryCategories(parameters=40 * MIB, gradients=40 * MIB, optimizer_state=80 * MIB,
                            activations=0, other=8 * MIB)
    return ProbeReport(
        pid=pid, taken_at=T0, torch_version="2.13.0+cpu",
        command=("python", "examples/train.py", "--cpu"),
        devices=(ProbeDevice("cpu", categories=cats),),
        steps=tuple(StepRecord(step=k, ended_at=T0 - (steps - k) * 0.01, duration=0.01, device="cpu",
                               categories=cats) for k in range(1, steps + 1)),
    )


async def test_a_probed_process_nvml_does_not_list_is_a_row_and_has_details():
    snap = dataclasses.replace(training_snapshot(), probes=(cpu_job(steps=12),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        job = row(app, "7777/probe")
        assert job.process is None and job.report.pid == 7777
        assert (job.cells["pid"], job.cells["gpu"], job.cells["gpu_memory"], job.cells["probe"]) == (
            "7777", "cpu", "-", "●")
        assert job.cells["command"] == "python examples/train.py --cpu"
        table = app.screen.query_one(ProcessTable)
        assert table.row_keys[-1] == "7777/probe"  # after the GPU processes
        screen = await open_detail_of(pilot, 7777)
        assert screen.key == (7777, None)
        assert "Process 7777  on cpu, not listed by NVML" in text(screen, "#detail-title")
        assert "does not list this process" in text(screen, "#detail-info")
        assert not screen.query_one("#detail-charts").display
        legend = text(screen, "#probe-breakdown")
        assert "Where its memory goes: 168 MiB (tracked tensors; no CUDA allocator)" in legend
        assert "80.0 MiB  47.6%  optimizer state" in legend
        assert "No CUDA allocator figures" in text(screen, "#probe-allocator")
        assert "steps 1-12  step time 10 ms" in text(screen, "#step-summary")


def gone(snapshot, pid: int, t: float):
    """``snapshot`` at time ``t`` with process ``pid`` and its probe gone (it exited)."""
    return dataclasses.replace(snapshot, taken_at=t, processes=tuple(p for p in snapshot.processes if p.pid != pid),
                               probes=tuple(r for r in snapshot.probes if r.pid != pid))


async def test_the_detail_of_a_probed_process_that_exited_says_it_ended_and_when():
    """It went on saying "Probe attached" and "probe: no leak" from its probe's last report."""
    job = cpu_job(steps=60)
    job = dataclasses.replace(job, steps=tuple(dataclasses.replace(s, host_memory=900 * MIB, host_allocated=400 * MIB)
                                               for s in job.steps))  # a flat heap: "no leak"
    snap = dataclasses.replace(training_snapshot(), probes=(job,))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")  # no more samples: the test hands the next one in
        screen = await open_detail_of(pilot, 7777)
        assert "no leak" in text(screen, "#detail-headline")  # (the verdict while it runs)
        assert text(screen, "#probe-summary").startswith("Probe attached")
        app.accept(gone(snap, 7777, T0 + 5))
        await pilot.pause()
        assert text(screen, "#detail-title") == "Process 7777 has ended: last seen at 2026-01-05 09:00:00"
        assert text(screen, "#probe-summary").startswith("The probe's last report (torch 2.13.0+cpu) on cpu")
        everything = screen_text_all(screen)
        assert "Probe attached" not in everything and "probe: no leak" not in everything
        assert "Leak verdict at its last report (per training step)" in text(screen, "#analysis-leak")
        await pilot.press("s")
        await pilot.pause()
        assert "Process 7777 has ended: there is no probe left to record." in list(app._notifications)[-1].message


async def test_the_detail_of_a_gpu_process_that_exited_with_its_probe_says_it_ended():
    snap = dataclasses.replace(training_snapshot(), probes=(cuda_job(2000),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        screen = await open_detail_of(pilot, 2000)
        app.accept(gone(snap, 2000, T0 + 5))
        await pilot.pause()
        assert text(screen, "#detail-title") == "Process 2000 on GPU 0 has ended: last seen at 2026-01-05 09:00:00"
        assert text(screen, "#probe-summary").startswith("The probe's last report (torch 2.5.1+cu124) on cuda:0")
        assert "command  python train.py --rank=0" in text(screen, "#detail-info")  # its last details stay
        assert screen.query_one("#detail-charts").display  # and its history
        everything = screen_text_all(screen)
        assert "Probe attached" not in everything and "at the training loop's next step" not in everything
        assert "no device figures were read before it ended" in text(screen, "#probe-summary")


async def test_the_detail_of_an_unprobed_process_that_left_the_gpu_says_when():
    app = GpuTuiApp(Sampler(ReplaySource([training_snapshot()]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        screen = await open_detail_of(pilot, 3100)
        app.accept(gone(training_snapshot(), 3100, T0 + 5))
        await pilot.pause()
        assert text(screen, "#detail-title") == ("Process 3100 on GPU 0 is no longer on the GPU: last seen at "
                                                 "2026-01-05 09:00:00 (showing its last history)")


async def test_probed_rows_nvml_does_not_list_are_counted():
    snap = dataclasses.replace(training_snapshot(), probes=(cpu_job(steps=12),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "PROCESSES  7  sort" in text(app.screen, "#table-status")  # 6 GPU processes + the job
        await pilot.press("slash", *"examples")
        await pilot.pause()
        assert "PROCESSES  1 of 7  sort" in text(app.screen, "#table-status")


async def test_a_probed_row_nvml_does_not_list_can_be_signalled():
    import signal

    import psutil

    from gputui.collect.probed import ProbedProcesses
    from gputui.ui.screens.confirm import ConfirmSignal

    job = sleeping_child()
    try:
        # The collector reads what /proc says of it (its start time: the identity the key checks).
        snap = ProbedProcesses(psutil).add_to(
            dataclasses.replace(training_snapshot(), probes=(cpu_job(pid=job.pid),)))
        app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"))
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            table = app.screen.query_one(ProcessTable)
            table.move_cursor(row=len(table.row_keys) - 1)
            await pilot.pause()
            await pilot.press("T")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmSignal) and app.screen.pid == job.pid
            assert "not listed by NVML" in app.screen.what
            await pilot.press("y")
            assert job.wait(timeout=10) == -signal.SIGTERM
            assert any(n.message == f"Sent SIGTERM to process {job.pid}." for n in app._notifications)
    finally:
        job.kill()
        job.wait()


async def test_demo_probed_rows_are_not_signalled():
    snap = dataclasses.replace(training_snapshot(), probes=(cpu_job(),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob", simulated=True))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=len(table.row_keys) - 1)
        await pilot.pause()
        await pilot.press("K")
        assert not isinstance(app.screen, ProcessDetail)
        assert any("Demo mode: process 7777 is simulated" in n.message for n in app._notifications)


async def test_a_probed_process_nvml_does_not_list_shows_what_proc_knows():
    # A real CPU-only job (this test's own child), known to the monitor through its probe only.
    job = sleeping_child()
    try:
        source = NoDriverSource("no driver", clock=lambda: T0, hostname="laptop")
        app = GpuTuiApp(Sampler(source, watcher=FakeWatcher([cpu_job(job.pid)])),
                        MonitorOptions(me="bob"), banner="no driver")
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            app.sample_now()
            await settle(pilot, 2)  # CPU % needs two readings
            cells = row(app, f"{job.pid}/probe").cells
            assert cells["user"] == pwd.getpwuid(os.getuid()).pw_name
            assert cells["cpu"].endswith("%") and cells["host_memory"] not in ("", "n/a")
            assert cells["elapsed"] not in ("", "n/a")
    finally:
        job.kill()
        job.wait()


class FakeWatcher:
    def __init__(self, reports, unavailable=None) -> None:
        self.reports = reports
        self.unavailable = unavailable or {}
        self.error = None

    def poll(self):
        return {r.pid: r for r in self.reports}

    def close(self):
        pass


async def test_without_a_driver_the_monitor_shows_probes_under_a_banner():
    source = NoDriverSource("NVML Shared Library Not Found", clock=lambda: T0, hostname="laptop")
    sampler = Sampler(source, watcher=FakeWatcher([cpu_job()]))
    app = GpuTuiApp(sampler, MonitorOptions(me="bob"), banner="NVML is not available, so no GPU is shown")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        header = drawn_text(app.screen.query_one("#header"))
        assert "laptop" in header and "NVML is not available, so no GPU is shown" in header
        assert app.screen.query_one(ProcessTable).row_keys == ["7777/probe"]
        app.sample_now()
        await settle(pilot, 2)
        assert "NVML is not available" in drawn_text(app.screen.query_one("#header"))  # it stays
        told = [n.title for n in app.notices.newest_first()]  # the alert line's, and the alert list's (!)
        assert told.count("NVML Shared Library Not Found") == 1  # the full reason, said once
        assert "PROCESSES  1  sort" in text(app.screen, "#table-status")
        await pilot.press("c")  # charts asked for, but there is no GPU to chart
        await pilot.pause()
        assert app.screen.charts_on and not app.screen.query_one("#charts").display
        assert "NVML is not available" in drawn_text(app.screen.query_one("#header"))


async def test_without_a_driver_the_header_still_shows_the_hosts_figures():
    from gputui.model import Host

    class Reader:  # what psutil would say, through the same HostReader interface
        def read(self):
            return Host(hostname="laptop", cpu_count=8, cpu_percent=37.0, memory_total=16 * 2**30,
                        memory_used=6 * 2**30, swap_total=0, swap_used=0, load_average=(1.5, 1.0, 0.5))

    source = NoDriverSource("NVML Shared Library Not Found", clock=lambda: T0, hostname="laptop",
                            host=Reader())
    app = GpuTuiApp(Sampler(source, watcher=FakeWatcher([cpu_job()])), MonitorOptions(me="bob"), banner="no driver")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        header = drawn_text(app.screen.query_one("#header"))
        assert "37%" in header and "6.0G" in header and "16.0G" in header, header


def test_no_driver_source_reads_the_host_through_psutil_by_default():
    source = NoDriverSource("no driver", hostname="laptop")
    source.sample()  # CPU % is measured between two readings
    host = source.sample().host
    assert host.hostname == "laptop" and host.memory_total > 0 and host.cpu_percent is not None


def test_run_tui_refuses_without_a_driver_only_when_no_probe_is_reachable(monkeypatch):
    import gputui.collect
    from gputui.collect import NvmlUnavailable

    def no_driver(*args, **kwargs):
        raise NvmlUnavailable("NVML Shared Library Not Found: is the NVIDIA driver installed?")

    from gputui.ui.startup import launch

    monkeypatch.setattr(gputui.collect, "open_collector", no_driver)
    options = _options()
    monkeypatch.setattr(launch, "_probes_reachable", lambda: False)
    with pytest.raises(UserError, match="NVIDIA driver"):
        launch.run_tui(options)

    started = []

    def run(self):
        started.append(self)

    monkeypatch.setattr(launch, "_probes_reachable", lambda: True)
    monkeypatch.setattr(GpuTuiApp, "run", run)
    monkeypatch.setattr(launch, "Sampler", lambda collector, **kw: _Closing(collector))
    assert launch.run_tui(options) == 0
    (app,) = started
    assert isinstance(app.sampler.collector, NoDriverSource)
    assert app.banner == ("No NVIDIA driver (NVML is missing): no GPUs to show; probed processes "
                          "are shown from their probes.")
    assert "NVML Shared Library Not Found: is the NVIDIA driver installed?" in app.sampler.collector.reason


class _Closing(Sampler):
    """A sampler that opens nothing (its source's hooks: Sampler's)."""

    def __init__(self, collector) -> None:
        self.collector = collector

    def close(self) -> None:
        pass


def _options():
    from gputui.options import Options

    return Options()  # the live monitor on this machine, as a bare `gputui` asks


# -- the record-sites key ---------------------------------------------------------------------

def cuda_job(pid: int, *, recording: bool = False) -> ProbeReport:
    alloc = AllocatorStats(allocated=3 * GIB, reserved=4 * GIB, inactive_split=256 * MIB)
    return ProbeReport(pid=pid, taken_at=T0, torch_version="2.5.1+cu124",
                       command=("python", "train.py", "--rank=0"),
                       devices=(ProbeDevice("cuda:0", 0, "GPU-00000000", alloc,
                                            MemoryCategories(GIB, GIB, GIB, 0, 0)),),
                       recording=recording)


async def test_record_key_asks_the_probe_from_a_worker_and_shows_the_answer():
    asked = []

    def requester(pid, op, params):
        asked.append((pid, op, params))
        return {"recording": params["on"], "steps": params["steps"], "starts_at_step": 43}

    snap = dataclasses.replace(training_snapshot(), probes=(cuda_job(2000),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"), requester=requester)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_detail_of(pilot, 2000)
        assert "not recording; s records" in text(screen, "#analysis-sites")
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asked == [(2000, "record_sites", {"on": True, "steps": 16})]
        assert any("Process 2000 records where it allocates for the next 16 steps (from step 43)"
                   in n.message for n in app._notifications)
        # Breakdown of the whole NVML figure (4 GiB rank 0 = 4 GiB reserved, no context left).
        sizes = {i.key: i.size for i in screen.query_one(MemoryBreakdown).breakdown.items}
        assert sizes == {"parameters": GIB, "gradients": GIB, "optimizer_state": GIB,
                         "cache": 768 * MIB, "fragmentation": 256 * MIB}


async def test_record_key_stops_a_recording_and_shows_refusals():
    from gputui.link.client import ProbeUnavailable

    def refuse(pid, op, params):
        raise ProbeUnavailable(pid, "failed", "the probe could not answer: recording needs torch 2.1")

    snap = dataclasses.replace(training_snapshot(), probes=(cuda_job(2000, recording=True),))
    app = GpuTuiApp(Sampler(ReplaySource([snap]), watch_probes=False), MonitorOptions(me="bob"), requester=refuse)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_detail_of(pilot, 2000)
        assert "recording (0 steps recorded" in text(screen, "#analysis-sites")
        await pilot.press("s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        refusal = [n for n in app._notifications if n.severity == "error"]
        assert refusal and refusal[-1].message == (
            "Process 2000: the probe could not answer: recording needs torch 2.1")
        assert "request refused" in refusal[-1].title
        assert isinstance(app.screen, ProcessDetail)


async def test_record_key_without_a_probe_says_so():
    app = GpuTuiApp(Sampler(ReplaySource([training_snapshot()]), watch_probes=False),
                    MonitorOptions(me="bob"), requester=lambda *a: pytest.fail("no probe: nothing to ask"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await open_detail_of(pilot, 2000)
        await pilot.press("s")
        await pilot.pause()
        assert any("No PyTorch probe in this process" in n.message for n in app._notifications)


def test_probes_that_do_not_answer_become_problems():
    watcher = FakeWatcher([cpu_job()], unavailable={4242: "the probe did not answer within 0.25 s"})
    sampler = Sampler(ReplaySource([training_snapshot()]), watcher=watcher)
    snap = sampler.sample()
    assert [r.pid for r in snap.probes] == [7777]
    assert snap.problems == ("probe of process 4242 did not answer: the probe did not answer within 0.25 s",)
    watcher.error = "probe watcher: OSError: too many open files"
    assert sampler.sample().problems[-1] == "probe watcher: OSError: too many open files"
