"""The live monitor's side of alerts: a toast for each alert that starts (one for a crowd) where the pane has room
for toasts above the process table, the terminal bell, and a desktop notification through the terminal's escape
sequence, as [alerts] asks; once for each delivery of the monitor's alert channel, which groups and limits them as
it does the others'. Where toasts have no room, the alert line over the footer says it (main_screen.py), and the
alert list (!) has every alert with its detail.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gputui.alerts.desktop import sequence
from gputui.alerts.settings import AlertSettings
from gputui.model.alert import STARTED, AlertEvent
from gputui.ui.notices import SEVERITIES

if TYPE_CHECKING:
    from textual.app import App

# Alerts started in one delivery shown one toast each; more go in one toast. A toast is two lines (its title, then the
# alert's severity and title: the detail is the alert list's), and a big pane gives toasts five lines at least (a
# GPU's two, the charts' three: main_screen.py): two of them fit there.
TOASTS = 2
TOAST_SECONDS = 15
TERMINAL = "/dev/tty"  # where the desktop notification's escape is written
SEVERITY = {"critical": "error", "warning": "warning", "info": "information"}


def tell(app: App, events: Sequence[AlertEvent], settings: AlertSettings,
         environ: Mapping[str, str] | None = None, *, toasts: bool) -> None:
    """Shows the alerts ``events`` (one delivery's) start, in toasts where ``toasts`` (the pane has room for
    them); those that end are left to the views, which show the change."""
    # Each alert once: a delivery that waited for the rate limit may hold a flapping alert's every start.
    began = list({(e.alert.kind, e.alert.key): e for e in events if e.change == STARTED}.values())
    if not began:
        return
    if toasts and len(began) <= TOASTS:
        for event in began:
            app.notify(headline(event), title="Alert", severity=SEVERITY[event.alert.severity],  # type: ignore[arg-type]
                       timeout=TOAST_SECONDS, markup=False)
    elif toasts:
        worst = min(began, key=lambda e: SEVERITIES.index(e.alert.severity))
        app.notify(f"{headline(worst)}, and {len(began) - 1} more", title=f"{len(began)} alerts",
                   severity=SEVERITY[worst.alert.severity], timeout=TOAST_SECONDS, markup=False)  # type: ignore[arg-type]
    if settings.bell:
        app.bell()
    _desktop(began, settings, os.environ if environ is None else environ)


def headline(event: AlertEvent) -> str:
    """An alert in a toast: `[critical] process 51200 runs out of GPU memory in 3 min` (the detail is the list's)."""
    return f"[{event.alert.severity}] {event.alert.title}"


def _desktop(began: Sequence[AlertEvent], settings: AlertSettings, environ: Mapping[str, str]) -> None:
    more = f" (+{len(began) - 1} more)" if len(began) > 1 else ""
    shown = sequence("gputui", began[0].alert.title + more, environ, setting=settings.desktop,
                     tmux_passthrough=settings.tmux_passthrough)
    if shown is None:
        return
    # Textual has no public way to write raw bytes: the terminal is written directly, in one write, which
    # lands between two of Textual's frames (each is one write too).
    try:
        tty = os.open(TERMINAL, os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return
    try:
        os.write(tty, shown.encode())
    except OSError:
        pass
    finally:
        os.close(tty)
