"""What feeds a monitor (this machine's sampler, the many-host view's sampler, a recording), and what differs
by source: what each cannot do, in the user's words (the app refuses in one place, GpuTuiApp.refused), the main
screen it needs, how its samples come in, its section of the help, where it is and what it costs.
The monitor is one app (GpuTuiApp): it asks its source. Each source keeps its own state (whether it stands
still, where a replay is, every host the many-host view shows); the screens read it through the source, as
ui/state.py's read-only views type it, and the app holds none of it.

No Textual here: the sources are read by worker threads, and the live one before Textual is imported. The
screens a source needs are imported when the app asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from gputui.model.waste import Waste
    from gputui.sample.state import HostState
    from gputui.ui.main_screen import MainScreen
    from gputui.ui.table.rows import Row

# What a monitor may be asked that its source may not do (the keys' actions, and the detail screen's request).
SIGNAL, PROBE, RECORD_SITES, INTERVAL = "signal", "probe", "record_sites", "interval"
# The app's actions that ask a source for one of those (a footer leaves out the keys a mode refuses).
ASKS = {"signal": SIGNAL, "probe": PROBE, "record_sites": RECORD_SITES, "interval": INTERVAL}

# The help's sections that open on a source's keys: ui/bindings.py's titles (it imports nothing of gputui, so
# it cannot take them from here; tests/ui/test_ui_app.py's help tests hold the two to the same words).
MAIN_KEYS = "Main screen"
REPLAY_KEYS = "Replay (gputui replay)"


class Source(Protocol):
    """A monitor's source: the app's hooks."""

    HELP_SECTION: ClassVar[str]  # the section of keys the help lists first, after "Everywhere"
    PLAYS: ClassVar[bool]  # a recording: the replay's keys (play, step, jump, speed) are live, and shown

    @property
    def paused(self) -> bool:
        """Whether the monitor stands still (p): sampling paused, a recording not playing."""
        ...

    def toggle_pause(self, app: Any) -> None:
        """p: stand still, or go on (the app draws the screen after)."""
        ...

    def cannot(self, what: str, selected: Row | None) -> str | None:
        """Why this source cannot do ``what`` (SIGNAL, PROBE, RECORD_SITES, INTERVAL) at all, or None;
        ``selected``: the row selected on the screen showing, where the words name its process."""
        ...

    def main_screen(self, app: Any) -> MainScreen:
        """The main screen this source's samples are shown on."""
        ...

    def start(self, app: Any) -> None:
        """Begin delivering samples to ``app`` (when it is mounted): a Sampled source, by the app's sampling
        worker; a recording, by its timed playback."""
        ...

    def own_interval(self) -> float | None:
        """The interval this source keeps, whatever the monitor is asked (a recording's), or None."""
        ...

    def position_words(self, app: Any) -> str | None:
        """The header's words on where the monitor is in its source (None: live)."""
        ...

    def cost_words(self, app: Any) -> str:
        """What gputui itself costs, for the help screen ("": not known)."""
        ...

    def waste_views(self, app: Any) -> list[tuple[str | None, Waste | None]]:
        """What the w view shows: (host, its judgement of who holds its GPUs idle); host None: this machine."""
        ...

    def host_state(self, host: str) -> HostState | None:
        """Host ``host``'s history and latest sample, where the source shows many hosts (None elsewhere)."""
        ...


class Sampled(Source, Protocol):
    """A source the app's sampling worker samples, one look at a time (this machine's, the many hosts')."""

    def sample(self) -> Any:
        """The next look (on the worker's thread)."""
        ...

    def judge(self, taken: Any) -> Any:
        """``taken`` judged, as ``accept`` takes it (on the worker's thread)."""
        ...

    def accept(self, app: Any, judged: Any) -> None:
        """Hand a judged look to ``app`` (on the UI thread)."""
        ...


class Player(Protocol):
    """A source that plays a recording (PLAYS): the replay's keys, as the app hands them on."""

    def step(self, samples: int) -> None: ...

    def jump_by(self, seconds: float) -> None: ...

    def seek_to(self, index: int) -> None: ...

    def faster(self) -> None: ...


class Declared:
    """A source whose refusals are a table: CANNOT, what -> why ("{signal}" is the signal's name). The
    other hooks are the live monitor's: sampled by the app's worker, one machine on the main screen."""

    CANNOT: ClassVar[Mapping[str, str]] = {}  # this machine's sampler can do everything
    HELP_SECTION: ClassVar[str] = MAIN_KEYS
    PLAYS: ClassVar[bool] = False
    paused = False  # sampling paused (p): read and set on the UI thread only

    def toggle_pause(self, app: Any) -> None:
        """Stop sampling, or take a sample now and go on."""
        self.paused = not self.paused
        if self.paused:
            app.stop_sampling()
        else:
            app.sample_now()

    def cannot(self, what: str, selected: Row | None) -> str | None:
        return self.CANNOT.get(what)

    def main_screen(self, app: Any) -> MainScreen:
        from gputui.ui.main_screen import MainScreen

        return MainScreen(app, ascii=app.options.ascii, columns=app.options.columns, me=app.me)

    def start(self, app: Any) -> None:
        app.sample_now()

    def own_interval(self) -> float | None:
        return None

    def position_words(self, app: Any) -> str | None:
        return None

    def waste_views(self, app: Any) -> list[tuple[str | None, Waste | None]]:
        return [(None, app.waste)]

    def host_state(self, host: str) -> HostState | None:
        return None

    def cost_words(self, app: Any) -> str:
        cost = app.snapshot.monitor if app.snapshot is not None else None
        if cost is None:
            return ""
        cpu = ("not measured yet" if cost.cpu_percent is None
               else f"{cost.cpu_percent:.1f}% of one CPU core (all its threads)")
        return (f"gputui itself uses {cpu}; its last sample took {cost.sample_ms:.1f} ms, "
                f"{cost.nvml_ms:.1f} ms of it in NVML calls, every {app.interval:g} s.")
