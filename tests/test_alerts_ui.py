"""The live monitor's alerts: the leaky demo's leak and coming OOM appear as toasts and ring the bell once;
a receiver that fails is said in a toast; the desktop notification's escape sequence, per terminal."""

import pytest
from ui_data import settle

from gputui.alerts.desktop import sequence
from gputui.alerts.settings import AlertSettings
from gputui.collect import open_collector
from gputui.ui.app import GpuTuiApp
from gputui.ui.sampler import Sampler


def leaky_app(settings):
    clock = lambda: 100.0  # noqa: E731 - the leaky scenario's second 100: the leak confirmed, its OOM minutes off
    app = GpuTuiApp(Sampler(open_collector("leaky", clock=clock, environ={}), watch_probes=False),
                    interval=30.0, me="dev", alerts=settings)
    rings = []
    app.bell = lambda: rings.append(1)
    return app, rings


async def test_the_leaky_demo_shows_its_alerts_as_toasts_and_rings_once():
    app, rings = leaky_app(AlertSettings(desktop="off"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        toasts = [(n.title, n.message, n.severity) for n in app._notifications]
    assert ("Alert", "[warning] process 51200 leaks activations: leak: 48.0 MiB a step, kept at train.py:131 in main",
            "warning") in toasts
    assert ("Alert", "[critical] process 51200 runs out of GPU memory in 3 min: under the 30 min threshold",
            "error") in toasts
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
