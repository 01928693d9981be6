"""The live monitor's alerts: the leaky demo's leak and coming OOM appear as toasts (in a big pane) and ring the bell
once, and are listed with their detail; a receiver that fails is said in a toast; the desktop notification's escape
sequence, per terminal. Alerts in small panes: test_small_panes.py."""

import os

import pytest
from ui_data import settle, wait_for

from gputui.alerts.desktop import sequence
from gputui.alerts.rules import AlertState, Thresholds, evaluate
from gputui.alerts.settings import AlertSettings
from gputui.collect import open_collector
from gputui.model.alert import Alert, AlertEvent
from gputui.options import Options
from gputui.sample.pipeline import open_pipeline
from gputui.ui import alert_toasts
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions


def leaky_app(settings):
    clock = lambda: 100.0  # noqa: E731 - the leaky scenario's second 100: the leak confirmed, its OOM minutes off
    app = GpuTuiApp(Sampler(open_collector("leaky", clock=clock, environ={}), watch_probes=False),
                    MonitorOptions(interval=30.0, me="dev", alerts=settings))
    rings = []
    app.bell = lambda: rings.append(1)
    return app, rings


async def test_the_leaky_demo_shows_its_alerts_as_toasts_and_rings_once():
    app, rings = leaky_app(AlertSettings(desktop="off"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        toasts = [(n.title, n.message, n.severity) for n in app._notifications]
        listed = [(n.severity, n.title, n.detail) for n in app.notices.newest_first()]
    # A toast is two lines: the detail is the alert list's (!).
    assert ("Alert", "[warning] process 51200 leaks activations", "warning") in toasts
    assert ("Alert", "[critical] process 51200 runs out of GPU memory in 3 min", "error") in toasts
    assert listed == [("critical", "process 51200 runs out of GPU memory in 3 min", "under the 30 min threshold"),
                      ("warning", "process 51200 leaks activations",
                       "leak: 48.0 MiB a step, kept at train.py:131 in main")]
    assert rings == [1]


async def test_no_toast_and_no_bell_when_alerts_are_off():
    app, rings = leaky_app(AlertSettings(enabled=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert not [n for n in app._notifications if n.title == "Alert"]
    assert rings == []


async def test_a_failing_alert_command_is_said_in_a_toast():
    app, _ = leaky_app(AlertSettings(desktop="off", command="echo 'pager down' >&2; exit 1"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        import time

        time.sleep(1.0)  # the channel's thread runs the command meanwhile
        app.sample_now()
        await settle(pilot)
        failures = [n.message for n in app._notifications if n.title == "Alert not delivered"]
    assert failures == ["alert command: alert command exited 1: pager down"]


# The faults demo's GPU 2 runs two jobs whose utilisation swings around 78 %: counted idle at up to 78 %,
# with no time to wait, it is idle one sample and busy the next, samples 5 s apart.
FLAPPING = Thresholds(idle_after=0.0, idle_util=78, kinds=frozenset({"gpu_idle"}))
FLAPS, EVERY = 40, 5.0


def flaps_in_the_faults_demo():
    """How many times GPU 2's gpu_idle starts over the samples the test below takes (the rules alone)."""
    now, state, starts = [60.0], AlertState(), 0
    with open_pipeline(Options(mode="once", demo="faults", demo_processes=None), clock=lambda: now[0],
                       pause=lambda s: None, environ={}) as pipeline:
        for _ in range(FLAPS + 1):
            sample = pipeline.sample()
            state, events = evaluate(state, sample.snapshot, sample.judgements, FLAPPING)
            starts += sum(e.change == "started" for e in events)
            now[0] += EVERY
    return starts


@pytest.fixture
def terminal(monkeypatch):
    """A real terminal (a pty) for the desktop notification's escape, which is read back from its other end,
    on a terminal that shows it (WezTerm), outside tmux."""
    master, slave = os.openpty()
    monkeypatch.setattr(alert_toasts, "TERMINAL", os.ttyname(slave))
    monkeypatch.setenv("TERM_PROGRAM", "WezTerm")
    monkeypatch.delenv("TMUX", raising=False)
    os.set_blocking(master, False)
    written = []

    def read():
        try:
            while chunk := os.read(master, 65536):
                written.append(chunk)
        except BlockingIOError:
            pass
        return b"".join(written).decode()

    yield read
    os.close(master)
    os.close(slave)


async def test_a_flapping_alert_rings_and_notifies_no_more_often_than_the_other_channels_deliver(terminal):
    assert flaps_in_the_faults_demo() >= 8  # (the condition does flap)
    now = [60.0]
    app = GpuTuiApp(Sampler(open_collector("faults", clock=lambda: now[0], environ={}), watch_probes=False),
                    MonitorOptions(interval=30.0, me="ana",
                                   alerts=AlertSettings(thresholds=FLAPPING, per_minute=2, desktop="on")))
    rings = []
    app.bell = lambda: rings.append(1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for n in range(FLAPS):
            now[0] += EVERY
            app.sample_now()
            await settle(pilot, n + 2)
        await wait_for(pilot, lambda: rings)
        await pilot.pause(0.3)  # (anything still on its way)
        toasts = [n.message for n in app._notifications if n.title == "Alert" or n.title.endswith(" alerts")]
    notifications = terminal().count("\x1b]777;notify;gputui;")
    # Two deliveries a minute, as the command and the webhook get them: the first at once, the second with
    # what started meanwhile; the rest waits for the next minute.
    assert 1 <= len(rings) <= 2
    assert notifications == len(rings)
    assert len(toasts) == len(rings) and all("holds memory while idle" in toast for toast in toasts)


async def test_a_delivery_that_waited_shows_a_flapping_alert_once():
    app, rings = leaky_app(AlertSettings(enabled=False))
    idle = Alert("gpu_idle", "gpu GPU-2", "info", "GPU 2 holds memory while idle", "1.0 GiB held", gpu="GPU-2")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        alert_toasts.tell(app, [AlertEvent("started", idle, 1.0), AlertEvent("ended", idle, 2.0),
                                AlertEvent("started", idle, 3.0)], AlertSettings(desktop="off"), toasts=True)
        await pilot.pause()
        toasts = [n.message for n in app._notifications if n.title == "Alert"]
    assert toasts == ["[info] GPU 2 holds memory while idle"]
    assert rings == [1]


@pytest.mark.parametrize(("environ", "setting", "passthrough", "expected"), [
    ({"TERM_PROGRAM": "WezTerm"}, "auto", False, "\x1b]777;notify;gputui;GPU 1 is lost\x07"),
    ({"TERM_PROGRAM": "iTerm.app"}, "auto", False, "\x1b]9;gputui: GPU 1 is lost\x07"),
    ({"TERM": "xterm-256color"}, "auto", False, None),  # not known to show one
    ({"TERM": "xterm-256color"}, "on", False, "\x1b]777;notify;gputui;GPU 1 is lost\x07"),
    ({"TERM_PROGRAM": "WezTerm"}, "off", False, None),
    ({"TMUX": "/tmp/tmux-0/default,1,0"}, "auto", False, None),  # tmux swallows it unless told
    ({"TMUX": "/tmp/tmux-0/default,1,0"}, "auto", True,
     "\x1bPtmux;\x1b\x1b]777;notify;gputui;GPU 1 is lost\x07\x1b\\"),
])
def test_the_desktop_notification_escape(environ, setting, passthrough, expected):
    assert sequence("gputui", "GPU 1 is lost", environ, setting=setting, tmux_passthrough=passthrough) == expected


def test_outside_words_cannot_end_the_escape_or_add_fields():
    shown = sequence("gputui", "leak; at x.py\x07\x1b]0;pwned", {"TERM": "foot"})
    assert shown == "\x1b]777;notify;gputui;leak, at x.py  ]0,pwned\x07"
