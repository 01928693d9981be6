"""``gputui`` with no mode: open the driver and take the first sample while Textual loads, then run
the live monitor.

Importing Textual and the monitor's screens takes a few hundred milliseconds, and opening NVML can
take as long on a real driver (nvmlInit without the persistence daemon): they overlap here, in a
thread of their own, instead of following each other, and the first sample is drawn as ``--once``
draws it (ui/startup/early_frame.py) until the monitor's own first frame replaces it. Nothing in this module
imports Textual before the sampler is on its way.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable

from gputui.collect.users import running_as_root
from gputui.model import Snapshot
from gputui.options import Options
from gputui.ui.sources.ahead import Ahead
from gputui.ui.sources.sampler import NoDriverSource, Sampler, Source
from gputui.ui.startup.early_frame import EarlyFrame, until_the_monitor_starts
from gputui.ui.startup.terminal import drawing_on_the_terminal

if TYPE_CHECKING:  # the many-host view's: not loaded by the live monitor of this machine
    from gputui.fleet.entries import HostEntry

EARLY_WAIT = 0.3  # seconds the first sample is waited for before Textual is imported (about its import time)
NO_DRIVER_BANNER = ("No NVIDIA driver (NVML is missing): no GPUs to show; probed processes are shown "
                    "from their probes.")


def colour_as_asked(options: Options) -> None:
    """NO_COLOR set where --no-color asks: Textual reads it when the app starts."""
    if options.color is False:
        os.environ["NO_COLOR"] = "1"


def run_tui(options: Options) -> int:
    """Open the live monitor (``options`` resolved with the config file by the CLI). No driver and no
    probe to show: UserError before drawing."""
    with drawing_on_the_terminal():
        return _run_tui(options)


def _run_tui(options: Options) -> int:
    colour_as_asked(options)
    early = EarlyFrame.for_terminal(options)
    with until_the_monitor_starts(early):
        opened, first_sample = open_ahead(lambda: open_sampler(options), early.draw if early else None)
        if early:
            # Importing Textual now would slow the first sample down (both want the GIL), and with
            # it the early frame; a driver slow to open is left to overlap the import after all.
            first_sample.done(timeout=EARLY_WAIT)
        from gputui.ui.app import GpuTuiApp  # Textual loads while the driver opens
        from gputui.ui.startup.monitor_options import MonitorOptions

        sampler, banner = opened.result()  # raises what opening raised (no driver, no probe to show)
        asked = MonitorOptions.of(options, handle_signals=True, as_root=running_as_root())
        app = GpuTuiApp(sampler, asked, banner=banner, first_sample=first_sample)
    try:
        app.run()
    finally:
        sampler.close()
    if app.refusal is not None:
        raise app.refusal  # printed by the CLI once the terminal is restored, exit 2
    return app.return_code or 0


def run_hosts(options: Options, entries: Sequence[HostEntry]) -> int:
    """Open the many-host monitor (``--hosts``): every host's connection starts at once, and the
    monitor draws each host as its first snapshot comes in."""
    with drawing_on_the_terminal():
        return _run_hosts(options, entries)


def _run_hosts(options: Options, entries: Sequence[HostEntry]) -> int:
    colour_as_asked(options)
    interval = options.interval or 1.0
    from gputui.fleet.fleet import Fleet
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.sources.hosts_sampler import HostsSampler
    from gputui.ui.startup.monitor_options import MonitorOptions

    fleet = Fleet(entries, interval)
    sampler = HostsSampler(fleet)
    try:
        fleet.start()
        # Read-only: the processes are on other machines. The alerts are this machine's monitor's.
        app = GpuTuiApp(sampler, MonitorOptions.of(options, interval=interval, readonly=True, alerts=None,
                                                   handle_signals=True))
        app.run()
    finally:
        sampler.close()  # every ssh child ends with the monitor
    return app.return_code or 0


def run_replay(options: Options) -> int:
    """Open the monitor on the recording ``options.replay.file`` (``gputui replay FILE``)."""
    with drawing_on_the_terminal():
        return _run_replay(options)


def _run_replay(options: Options) -> int:
    colour_as_asked(options)
    from gputui.record.run import open_recording
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.sources.replay import Replay
    from gputui.ui.startup.monitor_options import MonitorOptions

    recording = open_recording(options.replay.file)
    # What was recorded is shown as it was: no alert raised again, nothing simulated to refuse.
    app = GpuTuiApp(Replay(recording), MonitorOptions.of(options, alerts=None, simulated=False,
                                                         handle_signals=True))
    app.run()
    return app.return_code or 0


def open_sampler(options: Options, kind: type[Sampler] = Sampler) -> tuple[Sampler, str | None]:
    """The sampler the options ask for, and a banner to show while it lasts (no driver); ``kind``: its class
    (the browser view's refuses what a browser may not ask)."""
    from gputui.collect import NvmlUnavailable, open_collector

    banner = None
    collector: Source
    try:
        collector = open_collector(options.demo, seed=options.seed, processes=options.demo_processes)
    except NvmlUnavailable as exc:
        # No driver: the monitor is still worth opening when probed processes (CPU-only jobs) can
        # be reached; otherwise the clear message is all there is to say.
        if options.demo is not None or not _probes_reachable():
            raise
        banner = NO_DRIVER_BANNER
        collector = NoDriverSource(str(exc))
    sampler = kind(collector, only=options.only, only_visible=options.only_visible,
                   users=options.users, pids=options.pids, watch_probes=options.demo is None,
                   waste=options.waste)
    return sampler, banner


def open_ahead(opener: Callable[[], tuple[Sampler, str | None]],
               show: Callable[[Snapshot], None] | None = None
               ) -> tuple[Ahead[tuple[Sampler, str | None]], Ahead[Snapshot]]:
    """Open the sampler (``opener``) and take its first sample in a thread, starting now: (sampler,
    banner) and the first Snapshot when they are there, which ``show`` (if given) draws at once,
    after drawing its outline (the GPUs and their processes, before /proc is read: Sampler.sample).
    The app's sampling worker waits for the second before sampling again, so the sampler is used by
    one thread at a time."""
    opened: Ahead[tuple[Sampler, str | None]] = Ahead()
    first: Ahead[Snapshot] = Ahead()

    def run() -> None:
        try:
            sampler, banner = opener()
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            opened.set_exception(exc)
            first.set_exception(exc)  # not waited for: the main thread raises it from ``opened``
            return
        opened.set_result((sampler, banner))
        try:
            snapshot = sampler.sample(outline=show)
        except BaseException as exc:  # noqa: BLE001 - handed to the app, which says why
            first.set_exception(exc)
            return
        if show is not None:
            show(snapshot)
        first.set_result(snapshot)

    threading.Thread(target=run, name="gputui-open", daemon=True).start()
    return opened, first


def _probes_reachable() -> bool:
    from gputui.link.client import discover

    try:
        return bool(discover())
    except OSError:
        return False
