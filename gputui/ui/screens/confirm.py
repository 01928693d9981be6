"""The confirmation asked before sending a signal: names the process, the signal and what it does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gputui.ui.signals import WHAT_IT_DOES


class ConfirmSignal(ModalScreen[bool]):
    """Dismissed with True to send the signal, False to leave the process alone."""

    BINDINGS = [
        Binding("y", "answer(True)", "Send", tooltip="Send the signal", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "Cancel", tooltip="Leave the process alone", id="confirm.no"),
    ]

    def __init__(self, signal_name: str, pid: int, what: str) -> None:
        super().__init__()
        self.signal_name, self.pid, self.what = signal_name, pid, what

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(f"Send {self.signal_name} to process {self.pid}?", id="confirm-title")
            yield Static(self.what, id="confirm-what", markup=False)
            yield Static(f"This will {WHAT_IT_DOES[self.signal_name]}.", id="confirm-effect")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"Send {self.signal_name} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
