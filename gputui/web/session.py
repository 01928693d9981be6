"""One browser tab's monitor: the process ``gputui web`` starts for each tab (its own command line, with
--web-session), drawn through Textual's web driver, which textual-serve names in TEXTUAL_DRIVER.

The live monitor, the many-host view or a replay, as ``gputui`` shows them in a terminal, with every screen and
key, but read-only by construction: this machine's sampler is a BrowserSampler, which refuses (in the page, in
words) every request that acts on a process, signals, probes attached or detached, allocation sites recorded;
the monitor is told it is read-only besides; the many-host view and a replay refuse them already. It raises
no alerts (each tab would send them again: gputui serve or the terminal's monitor send them), and ends with
the server.
"""

from __future__ import annotations

import ctypes
import signal
from typing import TYPE_CHECKING

from gputui.options import Options
from gputui.ui.sources import PROBE, RECORD_SITES, SIGNAL
from gputui.ui.sources.sampler import Sampler

if TYPE_CHECKING:
    from gputui.config import Config
    from gputui.model import Snapshot
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.sources import Source
    from gputui.ui.sources.ahead import Ahead

BROWSER = "The browser view (gputui web) is read-only"


class BrowserSampler(Sampler):
    """This machine's sampler, in a browser: it samples and judges as the terminal's does, and refuses whatever
    acts on a process."""

    CANNOT = {
        SIGNAL: f"{BROWSER}: it sends no signal ({{signal}} not sent). Send it from gputui in a terminal on "
                "this machine.",
        PROBE: f"{BROWSER}: it attaches and detaches no probe. Run gputui attach PID in a terminal on this "
               "machine.",
        RECORD_SITES: f"{BROWSER}: it asks no probe to record its allocation sites. Press s in gputui in a "
                      "terminal on this machine.",
    }


def run_session(options: Options, config: Config) -> int:
    """Run the monitor ``options`` ask for (resolved with ``config``) until its tab closes or it is quit."""
    _end_with_the_server()
    from gputui.ui.startup.launch import colour_as_asked

    colour_as_asked(options)
    if options.hosts is not None:
        return _many_hosts(options, config)
    if options.replay.file:
        return _replay(options)
    return _live(options)


def _live(options: Options) -> int:
    from gputui.ui.startup.launch import open_ahead, open_sampler

    # The driver opens and the first sample is taken while Textual loads, as in the terminal (launch.py).
    opened, first_sample = open_ahead(lambda: open_sampler(options, BrowserSampler))
    sampler, banner = opened.result()
    try:
        app = browser_monitor(sampler, options, banner=banner, first_sample=first_sample)
        app.run()
    finally:
        sampler.close()
    if app.refusal is not None:
        raise app.refusal  # the CLI says it on stderr, which the server passes on
    return app.return_code or 0


def _many_hosts(options: Options, config: Config) -> int:
    from gputui.fleet.entries import HostsSettings, host_entries
    from gputui.fleet.fleet import Fleet
    from gputui.ui.sources.hosts_sampler import HostsSampler

    interval = options.interval or 1.0
    fleet = Fleet(host_entries(options.hosts or (), config.hosts or HostsSettings()), interval)
    sampler = HostsSampler(fleet)
    try:
        fleet.start()
        app = browser_monitor(sampler, options, interval=interval)
        app.run()
    finally:
        sampler.close()  # every ssh child ends with the session
    return app.return_code or 0


def _replay(options: Options) -> int:
    from gputui.record.run import open_recording
    from gputui.ui.sources.replay import Replay

    app = browser_monitor(Replay(open_recording(options.replay.file)), options, simulated=False)
    app.run()
    return app.return_code or 0


def browser_monitor(source: Source, options: Options, *, banner: str | None = None,
                    first_sample: Ahead[Snapshot] | None = None, **how: object) -> GpuTuiApp:
    """The monitor on ``source``, read-only, without alerts; Textual's web driver takes the signals that end it."""
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.startup.monitor_options import MonitorOptions

    asked = MonitorOptions.of(options, readonly=True, alerts=None, handle_signals=False, as_root=False, **how)
    return GpuTuiApp(source, asked, banner=banner, first_sample=first_sample)


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _end_with_the_server() -> None:
    """SIGTERM from the kernel when the server goes, however it goes (the web driver leaves on SIGTERM): a
    session's monitor never outlives the page it draws for."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
