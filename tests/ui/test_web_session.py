"""A browser session's monitor (gputui/web/session.py) on Textual's pilot: every key that acts on a process is
refused in words, before anything is asked or sent, on a real process that the terminal's monitor would signal
(tests/ui/test_ui_app.py::test_kill_confirmation_sends_the_chosen_signal, with the same snapshot)."""

from __future__ import annotations

import dataclasses

import psutil
import pytest
from ui_data import T0, ReplaySource, process, settle, sleeping_child, training_snapshot

from gputui.collect.probed import ProbedProcesses
from gputui.model import ProbeReport
from gputui.options import Options
from gputui.ui.actions.signals import started_at
from gputui.ui.main_screen import MainScreen
from gputui.ui.screens.detail import ProcessDetail
from gputui.web.session import BROWSER, BrowserSampler, browser_monitor


@pytest.fixture
def sleeper():
    child = sleeping_child()
    yield child
    child.kill()
    child.wait()


def browser_app(pid: int, asked: list, *, probed: bool = False):
    """The browser's monitor on a snapshot whose biggest process (the first row) is the real process ``pid``
    (``probed``: the only one, a probed job's, as the collector reads it); whatever the monitor asks of a probe
    or runs (gputui attach) is put in ``asked``."""
    snapshot = training_snapshot(extra=[process(pid, 0, gpu_memory=70 << 30, command=("sleep-child",), user="bob",
                                                 started_at=started_at(pid))])
    if probed:
        report = ProbeReport(pid=pid, taken_at=T0, command=("python", "train.py"))
        bare = dataclasses.replace(training_snapshot(), processes=(), parents=(), probes=(report,))
        snapshot = ProbedProcesses(psutil).add_to(bare)
    app = browser_monitor(BrowserSampler(ReplaySource([snapshot]), watch_probes=False), Options())
    app.requester = lambda *request: asked.append(request)
    app.attacher = lambda *command: asked.append(command)
    return app


def said(app) -> list[str]:
    return [n.message for n in app._notifications]


@pytest.mark.parametrize("key, signal", [("K", "SIGKILL"), ("T", "SIGTERM"), ("I", "SIGINT")])
async def test_a_signal_key_in_the_browser_sends_nothing_and_says_why(sleeper, key, signal):
    asked: list = []
    app = browser_app(sleeper.pid, asked)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.screen.target_process().pid == sleeper.pid
        await pilot.press(key)
        assert isinstance(app.screen, MainScreen)  # no confirmation asked: there is nothing to confirm
        await pilot.press("y", "enter")
        await pilot.pause()
    assert sleeper.poll() is None
    assert f"{BROWSER}: it sends no signal ({signal} not sent). Send it from gputui in a terminal on this " \
           "machine." in said(app)
    assert not any(m.startswith("Sent") for m in said(app)) and asked == []


async def test_attaching_detaching_and_recording_sites_are_refused_too(sleeper):
    asked: list = []
    app = browser_app(sleeper.pid, asked, probed=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("A", "y", "D", "y")
        await pilot.press("enter")  # the probed process's detail screen, where s records allocation sites
        assert isinstance(app.screen, ProcessDetail)
        await pilot.press("s")
        await pilot.pause()
    messages = said(app)
    assert messages.count(f"{BROWSER}: it attaches and detaches no probe. Run gputui attach PID in a terminal on "
                          "this machine.") == 2
    assert f"{BROWSER}: it asks no probe to record its allocation sites. Press s in gputui in a terminal on this " \
           "machine." in messages
    assert asked == [] and sleeper.poll() is None


async def test_the_page_offers_no_key_or_command_that_acts_on_a_process(sleeper):
    from gputui.ui.widgets.key_bar import KeyBar

    app = browser_app(sleeper.pid, [])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        footer = "".join(text for text, _ in app.screen.query_one(KeyBar).lines[0][1])
        titles = [command.title for command in app.get_system_commands(app.screen)]
    assert "Tree" in footer and "Attach" not in footer  # the terminal's footer offers A Attach
    assert not any(word in title for title in titles for word in ("SIGKILL", "SIGTERM", "SIGINT", "Attach", "Detach"))
    assert "Process tree" in titles and "Pause / resume" in titles  # what only looks is all there
