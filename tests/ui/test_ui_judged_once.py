"""The monitor's detail screens and job lines show the sampling pipeline's judgements: one computation
per judgement. Each call of the process and job analyses is counted by who made it, over several samples
with a detail screen open; the screens make none of their own where the pipeline judged (issue 34). The
many-host view and a replay judge nothing in the ui at all: no trends, leak verdicts, advice or findings.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter

import pytest
from still import still_app
from test_ui_jobs import TORCHRUN, job_view, open_job
from test_ui_probe import advice_shown, open_detail_of, settle, text

import gputui.analysis.jobs
import gputui.analysis.process
import gputui.ui.screens.detail
import gputui.ui.screens.job_detail

pytestmark = pytest.mark.usefixtures("utc")  # times of day in UTC (conftest.py)

SAMPLES = 4  # samples taken with the screen open


def count_callers(monkeypatch, name: str, *modules) -> Counter:
    """Calls of the function ``name`` of ``modules[0]`` (and as the others imported it), by the package of
    the nearest caller above the analysis: "sample" (the pipeline) or "ui" (a screen or a job line)."""
    calls: Counter = Counter()
    real = getattr(modules[0], name)

    def counted(*args, **kwargs):
        frame = sys._getframe(1)
        while frame.f_globals["__name__"].startswith("gputui.analysis"):
            frame = frame.f_back
        calls[frame.f_globals["__name__"].split(".")[1]] += 1
        return real(*args, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, name, counted, raising=False)
    return calls


async def more_samples(pilot, count: int) -> None:
    await settle(pilot, pilot.app.samples + count)


@contextlib.asynccontextmanager
async def leaky_job_detail(calls: Counter):
    """The leaky demo with its job's detail screen open for SAMPLES samples, ``calls`` counted from the
    opening on: the app and the screen."""
    app = still_app("leaky", seconds=120, interval=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_detail_of(pilot, 51200)
        calls.clear()
        await more_samples(pilot, SAMPLES)
        yield app, screen


async def test_the_process_detail_shows_the_pipelines_judgement_and_judges_nothing_itself(monkeypatch):
    calls = count_callers(monkeypatch, "analyse", gputui.analysis.process, gputui.ui.screens.detail)
    async with leaky_job_detail(calls) as (app, screen):
        assert calls["sample"] >= SAMPLES  # the pipeline judged the probed job at each sample
        assert calls["ui"] == 0  # and the screen took its judgement
        # Its advice, as the screen has always shown it (test_ui_probe's leaky demo).
        assert "advice 1: Out of memory in about 69 s" in text(screen, "#detail-headline")
        advice = advice_shown(screen)
        assert advice[1] == "1. Out of memory in about 69 s  [critical]"
        assert advice[3] == "2. Each step's autograd graph is kept alive  [critical]"
        assert advice[5] == "3. Other processes hold 4.99 GiB on GPU 0  [info]"
        assert screen.analysis is not None and screen.analysis.headroom  # its room to grow, worked out here


async def test_the_process_detail_takes_its_room_to_grow_from_the_judgement(monkeypatch):
    import gputui.analysis.whatif

    calls = count_callers(monkeypatch, "headrooms", gputui.analysis.whatif, gputui.analysis.process)
    async with leaky_job_detail(calls) as (app, screen):
        assert calls["ui"] == 0 and calls["sample"] >= SAMPLES
        judged = app.judgements.of(51200).headroom
        assert [h.device for h in judged] == ["cuda:0"]
        assert screen.analysis.headroom == judged  # the judgement's, as it was judged
        assert judged[0].withheld is not None and judged[0].withheld.startswith("allocated grows 48.0 MiB per step")
        assert text(screen, "#analysis-headroom").startswith("Will it fit (cuda:0)\nheadroom ")


async def test_a_process_the_pipeline_gives_no_advice_gets_it_from_the_detail_screen(monkeypatch):
    calls = count_callers(monkeypatch, "analyse", gputui.analysis.process, gputui.ui.screens.detail)
    app = still_app("leaky", seconds=120, interval=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        other = next(p for p in app.snapshot.processes if p.pid != 51200)
        assert app.judgements.of(other.own_pid).advice == ()  # neither probed nor growing: no advice made
        screen = await open_detail_of(pilot, other.pid)
        calls.clear()
        await more_samples(pilot, 2)
        assert calls["ui"] >= 2  # the screen asks for its advice at each sample
        assert screen.analysis is not None and screen.analysis.advice
        assert advice_shown(screen)[0] == "Advice"


async def test_job_lines_show_the_pipelines_findings_and_judge_nothing_themselves(monkeypatch):
    calls = count_callers(monkeypatch, "analyse_job", gputui.analysis.jobs, gputui.ui.screens.job_detail)
    app = still_app("torchrun", seconds=120, interval=0.2)
    async with app.run_test(size=(160, 40)) as pilot:
        await job_view(pilot)
        calls.clear()
        await more_samples(pilot, SAMPLES)
        assert calls["sample"] >= SAMPLES
        assert calls["ui"] == 0  # the job's line took the pipeline's findings
        line = app.screen.query_one("ProcessTable").rows_by_key[TORCHRUN]
        assert line.cells["command"] == "▾ rank 13 lags · pretrain.py (torchrun) · 8 ranks of 16"


async def test_the_job_detail_shows_the_pipelines_findings_and_judges_nothing_itself(monkeypatch):
    calls = count_callers(monkeypatch, "analyse_job", gputui.analysis.jobs, gputui.ui.screens.job_detail)
    app = still_app("torchrun", seconds=120, interval=0.2)
    async with app.run_test(size=(160, 40)) as pilot:
        await job_view(pilot)
        screen = await open_job(pilot, TORCHRUN)
        calls.clear()
        await more_samples(pilot, SAMPLES)
        assert calls["sample"] >= SAMPLES
        assert calls["ui"] == 0
        assert {s.rank for s in screen.analysis.stragglers} == {13}


# The many-host view and a replay show the judgements a pipeline's Judge made (each host's own gputui's, as
# `--hosts --once` prints them; the recording monitor's), never judging in the app, its screens or job lines.
JUDGING = (("trends", "gputui.analysis.trends"), ("judge_leaks", "gputui.analysis.leaks"),
           ("analyse", "gputui.analysis.process"), ("analyse_job", "gputui.analysis.jobs"))


def judged_by(monkeypatch):
    """Counters of each judging function's calls by the caller's package ("ui", "sample", ...)."""
    import importlib

    import gputui.ui.sources.hosts_sampler  # noqa: F401 - it imported judge_leaks itself before issue 34

    counters = {}
    for name, module in JUDGING:
        users = [m for m in list(sys.modules.values())
                 if m is not None and m.__name__.startswith(("gputui.ui", "gputui.sample")) and name in vars(m)]
        counters[name] = count_callers(monkeypatch, name, importlib.import_module(module), *users)
    return counters


def by_ui(counters) -> dict[str, int]:
    return {name: calls["ui"] for name, calls in counters.items() if calls["ui"]}


async def open_host_detail(pilot, key: str):
    from gputui.ui.screens.detail import ProcessDetail

    table = pilot.app.screen.query_one("ProcessTable")
    table.move_cursor(row=list(table.row_keys).index(key))
    await pilot.pause()
    await pilot.press("enter")
    for _ in range(200):
        await pilot.pause(0.05)
        if isinstance(pilot.app.screen, ProcessDetail) and pilot.app.screen.analysis is not None:
            return pilot.app.screen
    raise AssertionError("the detail screen did not show")


async def test_the_many_host_view_shows_each_hosts_judgement_and_judges_nothing_itself(monkeypatch):
    from still import still_hosts_app

    counters = judged_by(monkeypatch)
    app = still_hosts_app({"node1": "leaky", "node2": "torchrun"}, seconds=120, interval=0.2)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        screen = await open_host_detail(pilot, "node1//51200/0")
        await more_samples(pilot, SAMPLES)
        assert screen.host == "node1"
        # node1's probed job judged by its host's Judge: its leak and its advice, as on one machine
        own = next(h for h in app.source.hosts if h.name == "node1").judgements  # node1's gputui's
        assert app.source.states["node1"].leaks[51200] is own.of(51200).leak and own.of(51200).leak.state == "leak"
        assert "advice 1: Out of memory in about 69 s" in text(screen, "#detail-headline")
        await pilot.press("escape")
        await pilot.press("j")
        await pilot.pause()
        line = app.screen.query_one("ProcessTable").rows_by_key["node2//" + TORCHRUN]
        assert line.cells["command"] == "▾ rank 13 lags · pretrain.py (torchrun) · 8 ranks of 16"
    assert counters["judge_leaks"]["sample"] >= 2 and counters["analyse_job"]["sample"] >= 1
    assert by_ui(counters) == {}  # the app, its screens and its job lines judged nothing


async def test_a_replay_shows_the_recorded_judgements_and_judges_nothing_itself(monkeypatch, tmp_path):
    from still import still_replay_app

    app = still_replay_app("leaky", tmp_path / "leaky.rec", seconds=150, at=100)
    counters = judged_by(monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_detail_of(pilot, 51200)
        for _ in range(SAMPLES):  # step on, and seek back: the state is built again
            await pilot.press("full_stop")
            await pilot.pause(0.1)
        await pilot.press("left_square_bracket")
        for _ in range(200):
            if app.source.index == 24 and app.snapshot is not None:
                break
            await pilot.pause(0.05)
        assert app.source.index == 24  # a minute back from sample 54: the state built again there
        assert app.leaks[51200].state == "leak" and app.leaks[51200].oom_step == 495
        headline = "probe: LEAK in activations  ·  advice 1: Out of memory in about 2 min"
        assert text(screen, "#detail-headline") == headline
        advice = advice_shown(screen)
        assert advice[1] == "1. Out of memory in about 2 min  [critical]"
        assert advice[3] == "2. Each step's autograd graph is kept alive  [critical]"
    assert by_ui(counters) == {}
