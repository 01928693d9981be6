"""How the monitor was asked to look and behave, whatever its source: the user's Options as the app takes them
(one object, not a keyword argument each), and how the process runs it (as root, owning its exit signals).

No Textual here: the screens read it (ui/state.py's MonitorState) and ui/startup/launch.py builds it before
Textual loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.model.alert import AlertSettings
from gputui.model.record import Record
from gputui.options import Options
from gputui.ui.table.columns import DEFAULT


@dataclass(frozen=True, eq=False, repr=False)
class MonitorOptions(Record):
    """What the monitor shows and may do; the defaults are a test's monitor."""

    interval: float = 1.0  # seconds between samples at the start (x changes it; a recording keeps its own)
    readonly: bool = False  # --readonly: no signal sent, no probe attached or detached
    simulated: bool = False  # --demo: the processes are simulated, so nothing is sent to them
    ascii: bool = False
    theme: str = "dark"
    columns: tuple[str, ...] = DEFAULT  # the process table's, as the config names them
    keymap: Mapping[str, str] = field(default_factory=dict)  # the config's [keys]: binding id -> key(s)
    me: str | None = None  # the user "only mine" shows; None: whoever runs gputui
    alerts: AlertSettings | None = None  # the alerts to raise (toasts, bell, desktop) and send; None: none
    as_root: bool = False  # gputui runs as root: the header says so (its signals reach every process)
    handle_signals: bool = False  # the exit signals and SIGSTOP/SIGCONT are the monitor's (the CLI's; not tests')

    @classmethod
    def of(cls, options: Options, **how: Any) -> MonitorOptions:
        """The monitor ``options`` ask for (resolved with the config file by the CLI); ``how``: the fields the
        mode sets itself (the many-host view is read-only, the CLI's monitor handles its signals)."""
        asked: dict[str, Any] = dict(
            interval=options.interval or 1.0, readonly=options.readonly, simulated=options.demo is not None,
            ascii=options.ascii, theme=options.theme or "dark", columns=options.columns or DEFAULT,
            keymap=dict(options.keys), alerts=options.alerts)
        return cls(**(asked | how))
