"""The monitor's Textual app, one for every source (ui/sources/__init__.py): this machine's sampler, the many-host
view's, a recording. What differs by source is the source's: its main screen, how its samples come in, its
section of the help, where it is, what it costs, what it cannot do. ui/startup/launch.py opens it.

A sampled source's samples are taken on one thread of their own (SamplingThread) for the app's life: a chained
timer asks it for one sample at a time (the next is scheduled only when the last one is in), so slow samples never
pile up. Widgets only ever see the
immutable Snapshot it delivers, with the analysis's verdicts. Requests to a probe (allocation-site recording)
go out from a thread worker too, never from the UI thread.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, cast

from textual import work
from textual.actions import parse as parse_action
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.timer import Timer

from gputui.alerts.alerting import Alerting
from gputui.alerts.delivery import Delivery
from gputui.analysis.history import History, ProcessKey
from gputui.collect.users import current_user
from gputui.errors import UserError
from gputui.model import GpuProcess, Snapshot
from gputui.model.judgement import Judgements
from gputui.model.verdicts import LeakVerdict, ProcessTrend
from gputui.model.waste import Waste
from gputui.sample.judge import Sample
from gputui.sample.state import HostState
from gputui.ui import bindings
from gputui.ui.actions import attaching
from gputui.ui.actions.attaching import Runner, run_command
from gputui.ui.actions.signals import EXIT_SIGNALS, StopGuard, Target, cannot_signal, send
from gputui.ui.bindings import binding_sections
from gputui.ui.main_screen import MainScreen
from gputui.ui.notices import Notices
from gputui.ui.requests import OpenJobDetail, OpenProcessDetail, OpenWaste, RecordSites
from gputui.ui.sources import ASKS, INTERVAL, PROBE, RECORD_SITES, SIGNAL, Player, Sampled, Source
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.table.columns import COLUMNS
from gputui.ui.widgets.processes import ProcessTable
from gputui.untrusted import harmless, visible, visible_all

if TYPE_CHECKING:  # imported when first needed: the first frame does without it
    from gputui.ui.screens.detail import ProcessDetail
    from gputui.ui.screens.job_detail import JobDetail
    from gputui.ui.sources.ahead import Ahead

# Sends one request to a probe and returns its answer: JSON off the wire, of whatever shape it has.
Requester = Callable[[int, str, dict[str, Any]], Any]

INTERVALS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
THEMES = {"dark": "textual-dark", "light": "textual-light"}


class SnapshotReady(Message):
    """A new judged look (this machine's Sample, the many hosts'), and how long it took to take (seconds)."""

    def __init__(self, sample: Any, took: float) -> None:
        super().__init__()
        self.sample = sample
        self.took = took


class AlertsDue(Message):
    """The monitor's alert channel delivers (alerts/delivery.py: grouped, at most per_minute a minute)."""

    def __init__(self, delivery: Delivery) -> None:
        super().__init__()
        self.delivery = delivery


class SampleFailed(Message):
    """Sampling raised: the monitor keeps the last snapshot and says why. ``refusal`` is the
    UserError when the request itself cannot be met (``--only 99``), which ends the monitor before
    a first sample as it ends ``--once``."""

    def __init__(self, error: str, refusal: UserError | None = None) -> None:
        super().__init__()
        self.error = error
        self.refusal = refusal


class Delivered(Message):
    """A sample a source made ready off the UI thread (a recording's, decoded): ``show`` shows it on the UI
    thread. (A message, not call_from_thread: the worker never waits on an app that is ending.)"""

    def __init__(self, show: Callable[[], None]) -> None:
        super().__init__()
        self.show = show


class ProbeCommandDone(Message):
    """``gputui attach`` (or detach) ran on process ``pid``: whether it succeeded, and its words."""

    def __init__(self, pid: int, attach: bool, ok: bool, words: str) -> None:
        super().__init__()
        self.pid, self.attach, self.ok, self.words = pid, attach, ok, words


class ProbeAnswered(Message):
    """A probe answered a request (``result``), or could not (``error``)."""

    def __init__(self, pid: int, op: str, params: dict[str, Any], result: Any = None,
                 error: str | None = None) -> None:
        super().__init__()
        self.pid, self.op, self.params, self.result, self.error = pid, op, params, result, error


def _link_request(pid: int, op: str, params: dict[str, Any]) -> Any:
    from gputui.link.client import request

    return request(pid, op, params)


class SamplingThread:
    """The one thread a sampled source's samples are taken on: it waits to be asked (``take``), runs
    ``sample`` once, and waits again, until closed. (A Textual thread worker a sample cost a thread, a
    Worker and its three state messages every second, for no more than this.)"""

    def __init__(self, sample: Callable[[], None]) -> None:
        self._sample = sample
        self._asked = threading.Event()
        self._closed = False
        threading.Thread(target=self._run, name="gputui-sampler", daemon=True).start()

    def take(self) -> None:
        self._asked.set()

    def close(self) -> None:
        """No more samples; a sample in flight is still handed over (the app, ending, ignores it)."""
        self._closed = True
        self._asked.set()

    def _run(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            if self._closed:
                return
            self._sample()


class AsciiScrollBarRender(ScrollBarRender):
    """Scrollbar thumbs of whole cells (spaces), no block characters."""

    VERTICAL_BARS = [" "] * len(ScrollBarRender.VERTICAL_BARS)
    HORIZONTAL_BARS = [" "] * len(ScrollBarRender.HORIZONTAL_BARS)


# The replay's actions: live, and shown, only where the source plays a recording (Source.PLAYS).
PLAYBACK = frozenset({"step", "jump", "seek", "speed"})


class GpuTuiApp(App[int]):
    """gputui's monitor, on whichever source feeds it."""

    CSS_PATH = "gputui.tcss"
    TITLE = "gputui"

    BINDINGS = bindings.APP + bindings.REPLAY  # the replay's hidden but for a recording (check_action)

    def __init__(self, source: Source, options: MonitorOptions | None = None, *, banner: str | None = None,
                 first_sample: Ahead[Snapshot] | None = None, requester: Requester | None = None,
                 attacher: Runner | None = None) -> None:
        """``source``: this machine's Sampler, the many-host view's HostsSampler, a recording's Replay; it keeps
        its own state (paused, where a replay is, every host), and the app asks it;
        ``options``: how the monitor looks and what it may do (``MonitorOptions.of`` the user's Options);
        ``banner`` is a standing problem shown above everything (no NVIDIA driver);
        ``first_sample`` is a first Snapshot already being taken (``launch.open_ahead``);
        ``requester(pid, op, params) -> dict`` sends a request to a probe (tests inject one);
        ``attacher(argv, time limit) -> (status, line)`` runs ``gputui attach``/``detach`` (tests inject one)."""
        # NO_COLOR (no-color.org): Textual draws greys unless told the theme is ANSI, in which case
        # it takes every colour out; the selection is then drawn in reverse video (gputui.tcss).
        no_color = bool(os.environ.get("NO_COLOR"))
        super().__init__(ansi_color=True) if no_color else super().__init__()
        self.source = source
        self.options = options = options or MonitorOptions()
        self.sampler = source if isinstance(source, Sampler) else None  # this machine's, where it is the source
        self.interval = source.own_interval() or options.interval  # a recording keeps its own
        self.readonly = options.readonly or source.PLAYS
        self.me = options.me if options.me is not None else current_user()  # the uid where there is no passwd entry
        self.state = HostState()  # the history and latest judged sample shown (the many-host view's: per host)
        self.requester = requester or _link_request
        self.attacher = attacher or run_command
        self.banner = banner
        self.problem: str | None = banner
        self.refusal: UserError | None = None  # why the monitor ended before its first sample
        self.samples = 0  # snapshots received, for tests and the benchmark
        self.first_frame_at: float | None = None
        self._next: Timer | None = None
        self._sampling: SamplingThread | None = None  # started with the first sample asked for
        self._first_sample = first_sample
        self._screens_opened = False  # a process's, a job's or the waste screen: their modules are loaded
        self._told: set[str] = set()
        self.notices = Notices()  # what is wrong now: the alert line's and the alert list's (!)
        self._stop_guard: StopGuard | None = None
        self.theme = THEMES.get(options.theme, options.theme)
        self._scrollbar_renderer: type[ScrollBarRender] | None = None  # Textual's own, while --ascii swaps it out
        if options.keymap:
            self.set_keymap(dict(options.keymap))
        alerts = options.alerts
        self._alert_failures: deque[str] = deque(maxlen=10)  # from the channels' threads, told each sample
        self._alerting = Alerting(alerts, self._alert_failures.append, self._alerts_due) \
            if alerts is not None and alerts.enabled else None

    # What the widgets ask of whichever app they are in (getattr: a test's plain App has neither).

    @property
    def ascii(self) -> bool:
        return self.options.ascii

    @property
    def keymap(self) -> Mapping[str, str]:
        """The config's [keys]: binding id -> key(s)."""
        return self.options.keymap

    # -- start and stop ----------------------------------------------------------------------

    def on_mount(self) -> None:
        if self.options.ascii:
            self.add_class("-ascii")
            self._use_ascii_scrollbars()
        if self.no_color:
            self.add_class("-nocolor")
        if self.options.handle_signals:
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                # Asked to stop, SSH dropped, kill -QUIT: leave through exit() so the terminal is
                # restored, with the status a shell expects of a process ended by that signal.
                loop.add_signal_handler(signum, functools.partial(self.exit, None, 128 + signum))
            # kill -STOP, then -CONT: Textual would restart its terminal set-up (see StopGuard).
            self._stop_guard = StopGuard(functools.partial(loop.call_soon_threadsafe, self._reclaim_terminal))
            self._stop_guard.install()
        self.source.start(self)

    def get_default_screen(self) -> Screen:
        """The main screen is the bottom of the stack itself: a plain screen of Textual's under it would
        cost a screen's widgets (its tooltip, its toasts' rack) and never be seen."""
        self.main = self.make_main_screen()
        if self.banner is not None:
            self.main.charts_on = False  # no driver: there is no GPU history to chart
        return self.main

    def make_main_screen(self) -> MainScreen:
        return self.source.main_screen(self)

    def on_unmount(self) -> None:
        self._restore_scrollbars()
        if self._sampling is not None:
            self._sampling.close()
        if self._alerting is not None:
            self._alerting.close()
        if self.options.handle_signals:
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                loop.remove_signal_handler(signum)
        if self._stop_guard is not None:
            self._stop_guard.uninstall()
            self._stop_guard = None

    def _reclaim_terminal(self) -> None:
        """After a plain SIGSTOP and SIGCONT: whoever had the terminal meanwhile may have set its modes
        back (a job-control shell puts its own back when a job stops). Leaving application mode and
        entering it again takes the terminal as it is now, sets it up again and repaints."""
        if self.is_running:
            with self.suspend():
                pass

    # -- sampling ----------------------------------------------------------------------------

    def sample_now(self) -> None:
        """Take a sample now (the worker is exclusive: a sample in flight is replaced)."""
        self.stop_sampling()
        self._sample()

    def stop_sampling(self) -> None:
        """No next sample until ``sample_now`` (sampling paused)."""
        if self._next is not None:
            self._next.stop()
            self._next = None

    def _sample(self) -> None:
        """Ask the sampling thread for a sample (one in flight is followed by another)."""
        if self._sampling is None:
            self._sampling = SamplingThread(self._take_sample)
        self._sampling.take()

    def _take_sample(self) -> None:
        """On the sampling thread: one sample taken, judged, checked for alerts and handed to the UI thread."""
        source = cast(Sampled, self.source)  # (only a sampled source asks for samples: Declared.start)
        started = time.monotonic()
        ahead, self._first_sample = self._first_sample, None
        try:
            # The first sample may already be on its way, started while Textual was starting.
            taken = ahead.result() if ahead is not None else source.sample()
        except UserError as exc:  # the request cannot be met (--only 99): said in --once's words
            self.post_message(SampleFailed(harmless(str(exc)), refusal=exc))
            return
        except Exception as exc:  # noqa: BLE001 - the monitor keeps its last picture and says why
            self.post_message(SampleFailed(visible(f"sampling failed: {type(exc).__name__}: {exc}")))
            return
        judged = source.judge(taken)  # contains its own failures: said among the problems
        if self._alerting is not None:
            self._alerting(judged.snapshot, judged.judgements)
        self.post_message(SnapshotReady(judged, time.monotonic() - started))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        cast(Sampled, self.source).accept(self, message.sample)
        while self._alert_failures:
            self.notify(self._alert_failures.popleft(), title="Alert not delivered", severity="error", markup=False)
        self._schedule(message.took)

    def _alerts_due(self, delivery: Delivery) -> None:
        """The monitor's alert channel (on its own thread) hands a delivery to the app's."""
        self.post_message(AlertsDue(delivery))

    def on_alerts_due(self, message: AlertsDue) -> None:
        if self.options.alerts is not None:
            from gputui.ui.alert_toasts import tell

            self.notices.take(message.delivery.events)
            tell(self, message.delivery.events, self.options.alerts, toasts=self.main.toasts_fit())
            self.show_notices()

    def show_notices(self) -> None:
        """The alert line, and the alert list where it is open, brought up to what is wrong now."""
        notices = self.notices.newest_first()
        self.main.show_notices(notices)
        stack = self.screen_stack  # (empty before the first screen: the first sample may come first)
        listed = getattr(stack[-1], "show_notices", None) if stack and stack[-1] is not self.main else None
        if listed is not None:
            listed(notices)

    def action_show_alerts(self) -> None:
        from gputui.ui.screens.alerts import AlertsScreen

        if not isinstance(self.screen, AlertsScreen):
            self.push_screen(AlertsScreen(self.notices.newest_first()))

    def on_delivered(self, message: Delivered) -> None:
        message.show()

    def on_sample_failed(self, message: SampleFailed) -> None:
        if message.refusal is not None and self.snapshot is None:
            # Nothing could ever be shown (no such GPU): leave, and run_tui says why as --once does.
            self.refusal = message.refusal
            self.exit(return_code=message.refusal.exit_code)
            return
        self.problem = message.error
        self.main.render_snapshot()
        self._schedule(0.0)

    def _schedule(self, took: float) -> None:
        self.stop_sampling()  # one next sample at a time, whatever came in meanwhile
        if not self.source.paused:
            self._next = self.set_timer(max(0.05, self.interval - took), self._sample)

    def accept(self, sample: Sample | Snapshot) -> None:
        """Take a new judged sample in (its history, its judgements), then draw whichever screen is showing.
        A bare Snapshot (tests, the benchmark, with sampling paused) is judged first by the sampler's Judge."""
        if isinstance(sample, Snapshot):
            assert self.sampler is not None  # (the many-host view and a replay hand in judged samples)
            sample = self.sampler.judge(sample)
        self.state.take(sample)
        self.problem = self.banner
        snapshot = sample.snapshot
        self.notices.problems(snapshot.problems, snapshot.taken_at)  # listed while they last
        for problem in snapshot.problems:
            if problem not in self._told:  # a toast for each problem once, not every second
                self._told.add(problem)
                if self.main.toasts_fit():  # else the alert line says it (and no driver: the banner, too)
                    self.notify(problem, severity="warning", timeout=8, markup=False)  # outside words
        self.show_notices()
        self.show_latest()

    # What the screens read (ui/state.py's MonitorState): the latest sample's, and this machine's history.

    @property
    def snapshot(self) -> Snapshot | None:
        return self.state.snapshot

    @property
    def history(self) -> History:
        return self.state.history

    @property
    def trends(self) -> Mapping[ProcessKey, ProcessTrend]:
        return self.state.trends

    @property
    def leaks(self) -> Mapping[int, LeakVerdict]:
        return self.state.leaks

    @property
    def judgements(self) -> Judgements | None:
        return self.state.judgements

    @property
    def waste(self) -> Waste | None:
        return self.state.waste

    def show_latest(self) -> None:
        """Draw the latest sample on whichever screen is showing."""
        self.samples += 1
        # The first snapshot can arrive before the main screen is mounted (it is taken while Textual
        # starts): the screen then draws it when it mounts (apply_layout draws the latest).
        stack = self.screen_stack
        screen = stack[-1] if stack else None
        if screen is self.main and self.main.is_mounted:
            self.main.render_snapshot()
        else:
            self.main.stale = True
            # Never opened, none of them shows: not imported just to ask (2.5 MB with the plotting library).
            if self._screens_opened:
                from gputui.ui.screens.detail import ProcessDetail
                from gputui.ui.screens.job_detail import JobDetail
                from gputui.ui.screens.waste import WasteScreen

                if isinstance(screen, (ProcessDetail, JobDetail)):
                    self.show_detail(screen)
                elif isinstance(screen, WasteScreen):
                    screen.show(self.waste_views())
        if self.first_frame_at is None:
            self.call_after_refresh(self._first_frame)

    @property
    def position(self) -> str | None:
        """The header's words on where the monitor is in its source: a replay's, in its recording."""
        return self.source.position_words(self)

    def _first_frame(self) -> None:
        if self.first_frame_at is None:
            self.first_frame_at = time.monotonic()

    # -- screens -----------------------------------------------------------------------------

    def open_detail(self, proc: GpuProcess | None, *, pid: int | None = None, host: str | None = None) -> None:
        """The detail screen of a GPU process, or (``pid``) of a probed process NVML does not list;
        ``host``: the many-host view's host of it."""
        # Imported when first opened: it brings the plotting library, not needed for a first frame.
        from gputui.ui.screens.detail import ProcessDetail

        if proc is not None:
            screen = ProcessDetail(proc.pid, proc.device_index, ascii=self.options.ascii, host=host)
        elif pid is not None:
            screen = ProcessDetail(pid, None, ascii=self.options.ascii, host=host)
        else:
            raise TypeError("open_detail: give a process or a pid")
        self._screens_opened = True
        self.push_screen(screen)
        self.call_after_refresh(self.show_detail, screen)

    def open_job_detail(self, key: str, *, host: str | None = None) -> None:
        """The detail screen of the job with this Job.key; ``host``: the many-host view's host of it."""
        from gputui.ui.screens.job_detail import JobDetail

        screen = JobDetail(key, ascii=self.options.ascii, host=host)
        self._screens_opened = True
        self.push_screen(screen)
        self.call_after_refresh(self.show_detail, screen)

    def open_waste(self) -> None:
        """The w view: who holds the GPUs and who holds them idle."""
        from gputui.ui.screens.waste import WasteScreen

        if isinstance(self.screen, WasteScreen):
            return
        screen = WasteScreen()
        self._screens_opened = True
        self.push_screen(screen)
        self.call_after_refresh(lambda: screen.show(self.waste_views()))

    def waste_views(self) -> list[tuple[str | None, Waste | None]]:
        """What the w view shows: this machine's judgement, or each host's as its own gputui made it."""
        return self.source.waste_views(self)

    def show_detail(self, screen: ProcessDetail | JobDetail) -> None:
        """Bring a detail screen (a process's or a job's) up to the latest sample: its host's, in the many-host
        view."""
        state = self.state if screen.host is None else self.source.host_state(screen.host)
        if state is not None and state.snapshot is not None:
            screen.show(state.snapshot, state.history, state.trends, state.leaks, state.judgements)

    def on_process_table_probe_detail_requested(self, message: ProcessTable.ProbeDetailRequested) -> None:
        self.open_detail(None, pid=message.pid, host=message.host)

    def on_open_process_detail(self, message: OpenProcessDetail) -> None:
        self.open_detail(message.process, host=message.host)

    def on_open_job_detail(self, message: OpenJobDetail) -> None:
        self.open_job_detail(message.key, host=message.host)

    def on_open_waste(self, message: OpenWaste) -> None:
        self.open_waste()

    # -- requests to probes ------------------------------------------------------------------

    def on_record_sites(self, message: RecordSites) -> None:
        self.record_sites(message.pid, on=message.on, steps=message.steps)

    def record_sites(self, pid: int, *, on: bool, steps: int) -> None:
        """Ask ``pid``'s probe to start (or stop) recording allocation sites, off the UI thread."""
        if self.refused(RECORD_SITES, title="Allocation sites"):
            return
        if self.options.simulated:
            self.notify("Demo mode: this probe is simulated, so no request was sent. Its allocation "
                        "sites are simulated too (the leaking job records them already).",
                        title="Allocation sites", timeout=8)
            return
        self._request(pid, "record_sites", {"on": on, "steps": steps})

    @work(thread=True, group="probe-requests", exit_on_error=False)
    def _request(self, pid: int, op: str, params: dict[str, Any]) -> None:
        try:
            result = self.requester(pid, op, params)
        except Exception as exc:  # noqa: BLE001 - a refusal is news for the user, never a crash
            detail = getattr(exc, "detail", None) or f"{type(exc).__name__}: {exc}"
            self.post_message(ProbeAnswered(pid, op, params, error=visible(str(detail))))
            return
        # The answer comes off the wire: whatever it holds is shown, never obeyed.
        self.post_message(ProbeAnswered(pid, op, params, result=visible_all(result)))

    def on_probe_answered(self, message: ProbeAnswered) -> None:
        title = "Allocation sites"
        if message.error is not None:
            self.notify(f"Process {message.pid}: {message.error}", title=f"{title}: request refused", markup=False,
                        severity="error", timeout=8)
            return
        result = message.result if isinstance(message.result, dict) else {}
        if result.get("recording"):
            start = result.get("starts_at_step")
            self.notify(f"Process {message.pid} records where it allocates for the next "
                        f"{result.get('steps', message.params.get('steps'))} steps"
                        + (f" (from step {start})" if start is not None else "")
                        + "; growing sites appear here as the steps come in.", title=title, timeout=6)
        else:
            self.notify(f"Process {message.pid} stopped recording allocation sites.", title=title,
                        timeout=4)

    def action_help(self) -> None:
        from gputui.ui.screens.help import HelpScreen, describe_bindings

        if isinstance(self.screen, HelpScreen):
            return
        keymap = dict(self.options.keymap)
        sections = [(title, self._described(describe_bindings(listed, keymap, self), listed))
                    for title, listed in binding_sections()]
        # This app's own keys come right after those that work everywhere: the first screenful is
        # the keys the user can press here (the live monitor's help opened on the replay's keys).
        own = [s for s in sections if s[0] == self.source.HELP_SECTION]
        sections = sections[:1] + own + [s for s in sections[1:] if s not in own]
        hint = ("Arrows, PgUp/PgDn and Home/End move in the table; click a column header to sort by it; "
                "ctrl+p opens the command palette.\nRemap keys in config.toml, e.g.\n"
                "  [keys]\n  quit = \"q,ctrl+q\"")
        # What gputui itself costs: the header has it only where there is room.
        self.push_screen(HelpScreen(sections, hint, ascii=self.options.ascii, cost=self.source.cost_words(self)))

    def _described(self, rows: list[tuple[str, str, str]], listed: list[Any]) -> list[tuple[str, str, str]]:
        """The help's rows, those of keys this mode refuses (a replay's, the many-host view's, a browser's
        signals and attach) said to be refused here, as the footer leaves them out."""
        action_of = {binding.id: parse_action(binding.action)[1] for binding in listed if binding.id}
        return [(keys, f"{does} (not in this view: pressed, it says why)"
                 if self.refuses_in_mode(action_of.get(binding_id, "")) else does, binding_id)
                for keys, does, binding_id in rows]

    # -- actions -----------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        """Sampling paused, or a replay stopped (or going on): the source's."""
        self.source.toggle_pause(self)
        self.main.render_snapshot()

    # A replay's keys: live only where the source plays a recording (check_action).

    @property
    def player(self) -> Player | None:
        """The source, where it plays a recording."""
        return cast(Player, self.source) if self.source.PLAYS else None

    def action_step(self, samples: int) -> None:
        if self.player is not None:
            self.player.step(samples)

    def action_jump(self, seconds: float) -> None:
        if self.player is not None:
            self.player.jump_by(seconds)

    def action_seek(self, index: int) -> None:
        if self.player is not None:
            self.player.seek_to(index)

    def action_speed(self) -> None:
        if self.player is not None:
            self.player.faster()

    def action_interval(self, step: int) -> None:
        if self.refused(INTERVAL):
            return
        longer = [i for i in INTERVALS if i > self.interval]
        shorter = [i for i in INTERVALS if i < self.interval]
        if step > 0 and longer:
            self.interval = longer[0]
        elif step < 0 and shorter:
            self.interval = shorter[-1]
        self.notify(f"Refreshing every {self.interval:g} s", timeout=2)
        self.main.render_snapshot()

    def action_signal(self, name: str) -> None:
        if self.refused(SIGNAL, signal=name):
            return
        choose = getattr(self.screen, "signal_target", None)
        target = choose() if choose else None
        if target is None:
            why = getattr(self.screen, "why_no_signal_target", None)
            # The reason quotes a command line: an outside string, never read as markup.
            self.notify(why(name) if why else "Select a process first.", severity="warning", markup=False)
            return
        if self.readonly:
            self.notify("Read-only mode (--readonly): signals are disabled.", severity="warning")
            return
        if self.options.simulated:
            self.notify(f"Demo mode: process {target.pid} is simulated, no signal sent.",
                        severity="warning")
            return
        never = cannot_signal(target)
        if never is not None:  # said now: asking first would offer a choice there is not
            self.notify(never, title=f"{name} not sent", severity="error", markup=False)
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            why = send(target, name)
            if why:
                self.notify(why, title=f"{name} not sent", severity="error", markup=False)
            else:
                self.notify(f"Sent {name} to process {target.local_pid}.", title="Signal sent")

        from gputui.ui.screens.confirm import ConfirmSignal

        self.push_screen(ConfirmSignal(name, target.pid, target.what), answered)

    # -- what this monitor cannot do -------------------------------------------------------------

    def cannot(self, what: str) -> str | None:
        """Why this monitor cannot do ``what`` (SIGNAL, PROBE, RECORD_SITES, INTERVAL) at all, or None: its
        source's refusal first (it may name the selected process), then --readonly's."""
        selected = getattr(self.screen, "selected_row", None)
        why = self.source.cannot(what, selected() if selected is not None else None) if self.source else None
        if why is None and what == PROBE and self.readonly:
            return "Read-only mode (--readonly): gputui attaches and detaches no probe."
        return why

    def refuses_in_mode(self, action: str) -> bool:
        """Whether this mode refuses ``action`` whatever is selected (replay: attach, signals, sites,
        the interval; --readonly: attach): the footer leaves its key out; pressed, it still says why."""
        what = ASKS.get(action)
        if what is None or self.source is None:
            return False
        return self.source.cannot(what, None) is not None or (what == PROBE and self.readonly)

    def refused(self, what: str, *, title: str = "", signal: str = "") -> bool:
        """Whether this monitor cannot do ``what``, having said why: every refusal of a source's is
        made here, before anything is asked or opened."""
        why = self.cannot(what)
        if why is None:
            return False
        # Not str.format: a refusal may quote outside words (a host's name), braces and all.
        self.notify(why.replace("{signal}", signal), title=title, severity="warning", timeout=8, markup=False)
        return True

    def get_key_display(self, binding: Binding) -> str:
        """A key as Textual shows it (``^p``, ``?``, ``⏎``), without Textual's lookup in Unicode's
        table of names for punctuation, letters and digits (bindings.PUNCTUATION_KEYS says why); in
        the ASCII look, a key Textual shows by a symbol (⏎, ↑) by its name."""
        modifiers, key = binding.parse_key()
        shown = bindings.PUNCTUATION_KEYS.get(key, key if len(key) == 1 else None)
        if binding.key_display or shown is None:
            shown = super().get_key_display(binding)
            return binding.key if self.options.ascii and not shown.isascii() else shown
        if "ctrl" in modifiers:
            modifiers.remove("ctrl")
            shown = f"^{shown}"
        return "+".join([*modifiers, shown])

    # -- attaching and detaching the probe -----------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The probe keys act on a process: shown (and live) only on the screens that have one to offer.
        if action == "probe":
            return hasattr(self.screen, "probe_target")
        if action in PLAYBACK:  # the replay's keys: hidden (footer, keys) but on a recording
            return self.source.PLAYS
        return True

    def action_probe(self, attach: bool) -> None:
        """Attach the probe to the selected process (or detach it), after confirmation."""
        title = "Probe not attached" if attach else "Probe not detached"
        if self.refused(PROBE, title=title):
            return
        choose = getattr(self.screen, "probe_target", None)
        found = choose() if choose else None
        if found is None:
            self.notify("Select a process first.", severity="warning")
            return
        if self.options.simulated:
            self.notify(f"Demo mode: process {found.target.pid} is simulated; no probe attached or detached.",
                        severity="warning")
            return
        detach_key = self.options.keymap.get("probe.detach", "D").split(",")[0]  # as the config maps it
        why = attaching.why_not(found, attach, detach_key)
        if why is not None:  # said now: asking first would offer a choice there is not
            self.notify(why, title=title, severity="error", markup=False)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"Running gputui {attaching.verb(attach)} {found.target.local_pid}...", timeout=3)
                self._probe_command(found.target, attach)

        from gputui.ui.screens.confirm import ConfirmProbe

        self.push_screen(ConfirmProbe(found.target.pid, found.target.what, attach=attach, detach_key=detach_key),
                         answered)

    @work(thread=True, group="probe-commands", exit_on_error=False)
    def _probe_command(self, target: Target, attach: bool) -> None:
        try:
            ok, words = attaching.act(target, attach, self.attacher)
        except Exception as exc:  # noqa: BLE001 - a failure is news for the user, never a crash
            ok, words = False, f"{type(exc).__name__}: {exc}"
        self.post_message(ProbeCommandDone(target.pid, attach, ok, visible(words)))

    def on_probe_command_done(self, message: ProbeCommandDone) -> None:
        done = "attached" if message.attach else "detached"
        if message.ok:
            self.notify(message.words, title=f"Probe {done}", timeout=6, markup=False)
            self.sample_now()  # the probe's socket is there (or gone) now: show it
        else:
            self.notify(message.words, title=f"Probe not {done}", severity="error", timeout=10, markup=False)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        main = self.main
        yield SystemCommand("Pause / resume", "Stop or restart sampling", self.action_toggle_pause)
        yield SystemCommand("Refresh slower", "Longer interval between samples",
                            lambda: self.action_interval(1))
        yield SystemCommand("Refresh faster", "Shorter interval between samples",
                            lambda: self.action_interval(-1))
        yield SystemCommand("Process tree", "Show GPU processes under their parents",
                            main.action_toggle_tree)
        yield SystemCommand("Job view", "Group processes under their training job",
                            main.action_toggle_jobs)
        yield SystemCommand("Who holds the GPUs idle", "Memory, mean SM utilisation and idle GPUs per pod, container, "
                            "Slurm job or user", self.open_waste)
        yield SystemCommand("Only my processes", f"Show only {self.me}'s processes",
                            main.action_toggle_mine)
        yield SystemCommand("Filter processes", "Type to match command, user or pid",
                            main.action_filter)
        yield SystemCommand("Show / hide charts", "History charts of the selected GPU",
                            main.action_toggle_charts)
        for cid, column in COLUMNS.items():
            yield SystemCommand(f"Sort by {column.label}", f"Order processes by {cid}",
                                lambda cid=cid: main.sort_by(cid))
        if not self.readonly:
            for name, words in (("SIGINT", "Interrupt"), ("SIGTERM", "Terminate"), ("SIGKILL", "Kill")):
                yield SystemCommand(f"{words} selected process ({name})", "Asks for confirmation",
                                    lambda name=name: self.action_signal(name))
            yield SystemCommand("Attach the probe to the selected process", "Asks for confirmation",
                                lambda: self.action_probe(True))
            yield SystemCommand("Detach the probe from the selected process", "Asks for confirmation",
                                lambda: self.action_probe(False))
        yield SystemCommand("Keys", "Every key and what it does", self.action_help)

    def _use_ascii_scrollbars(self) -> None:
        # Scrollbars draw eighth-blocks for smooth thumbs; plain spaces keep --ascii honest. The
        # renderer is a class-wide setting of Textual's, so it is put back when the app ends.
        if self._scrollbar_renderer is None:
            self._scrollbar_renderer = ScrollBar.renderer
            ScrollBar.renderer = AsciiScrollBarRender

    def _restore_scrollbars(self) -> None:
        if self._scrollbar_renderer is not None:
            ScrollBar.renderer = self._scrollbar_renderer
            self._scrollbar_renderer = None

