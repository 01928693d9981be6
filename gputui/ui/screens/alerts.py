"""The alert list (!): every alert and problem of now, the newest first, each with when it began and its detail,
kept up to date while it is open. The alert line over the footer says how many there are; this says what they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui import units
from gputui.ui import bindings
from gputui.ui.notices import Notice
from gputui.ui.widgets.alert_line import STYLES

NOTHING = "No alert and no problem now."


def described(notices: Sequence[Notice]) -> Content:
    """The notices as the list shows them: severity, since when and title on one line, the detail under it."""
    if not notices:
        return Content.styled(NOTHING, "$text-muted")
    entries = []
    for notice in notices:
        kind = notice.severity if notice.alert else "problem"
        head = Content.assemble((f"{kind:<8}", STYLES[notice.severity]), " ",
                                (f"since {units.clock_time(notice.since)}", "$text-muted"), "  ",
                                (notice.title, "bold"))  # outside words: never read as markup
        entries.append(head if not notice.detail else
                       Content("\n").join([head, Content.styled(f"  {notice.detail}", "$text-muted")]))
    return Content("\n\n").join(entries)


class AlertsScreen(ModalScreen[None]):
    """Over the screen it was opened on; Escape (or the key that opened it) closes it."""

    BINDINGS = bindings.ALERTS

    def __init__(self, notices: Sequence[Notice]) -> None:
        super().__init__()
        self.notices = tuple(notices)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="alerts-box"):
            yield Static(Content.assemble(("Alerts and problems now, newest first", "bold"),
                                          ("  (Esc closes)", "$text-muted")))
            yield Static(described(self.notices), id="alerts-list")

    def show_notices(self, notices: Sequence[Notice]) -> None:
        """What is wrong now (the app hands it over as alerts start and end, and with each sample)."""
        if tuple(notices) != self.notices:
            self.notices = tuple(notices)
            self.query_one("#alerts-list", Static).update(described(self.notices))

    def text(self) -> str:
        """The list as plain text (what a screen reader, or a test, reads)."""
        return described(self.notices).plain

    def action_close(self) -> None:  # (Textual's own action_dismiss waits for callbacks first)
        self.dismiss(None)
