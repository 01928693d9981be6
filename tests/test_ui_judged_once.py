"""The live monitor's detail screens and job lines show the sampling pipeline's judgements: one computation
per judgement. Each call of the process and job analyses is counted by who made it, over several samples
with a detail screen open; the screens make none of their own where the pipeline judged (issue 34).
"""

from __future__ import annotations

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
    the caller: "sample" (the pipeline) or "ui" (a screen or a job line)."""
    calls: Counter = Counter()
    real = getattr(modules[0], name)

    def counted(*args, **kwargs):
        caller = sys._getframe(1).f_globals["__name__"]
        calls[caller.split(".")[1]] += 1
        return real(*args, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, name, counted, raising=False)
    return calls


async def more_samples(pilot, count: int) -> None:
    await settle(pilot, pilot.app.samples + count)


async def test_the_process_detail_shows_the_pipelines_judgement_and_judges_nothing_itself(monkeypatch):
    calls = count_callers(monkeypatch, "analyse", gputui.analysis.process, gputui.ui.screens.detail)
    app = still_app("leaky", seconds=120, interval=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        screen = await open_detail_of(pilot, 51200)
        calls.clear()
        await more_samples(pilot, SAMPLES)
        assert calls["sample"] >= SAMPLES  # the pipeline judged the probed job at each sample
        assert calls["ui"] == 0  # and the screen took its judgement
        # Its advice, as the screen has always shown it (test_ui_probe's leaky demo).
        assert "advice 1: Out of memory in about 69 s" in text(screen, "#detail-headline")
        advice = advice_shown(screen)
        assert advice[1] == "1. Out of memory in about 69 s  [critical]"
        assert advice[3] == "2. Each step's autograd graph is kept alive  [critical]"
        assert advice[5] == "3. Other processes hold 4.99 GiB on GPU 0  [info]"
        assert screen.analysis is not None and screen.analysis.headroom  # its room to grow, worked out here


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
