"""The confirmations asked before acting on a process: sending a signal, attaching or detaching the probe.
Each names the process and says what will happen to it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gputui.ui import bindings
from gputui.ui.actions.attaching import what_happens
from gputui.ui.actions.signals import WHAT_IT_DOES


class Confirm(ModalScreen[bool]):
    """Dismissed with True to go ahead, False to leave the process alone (the default)."""

    BINDINGS = bindings.CONFIRM

    def __init__(self, title: str, what: str, effect: str, yes: str) -> None:
        super().__init__()
        self.title_words, self.what, self.effect, self.yes = title, what, effect, yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.title_words, id="confirm-title")
            yield Static(self.what, id="confirm-what", markup=False)  # a command line: outside words
            yield Static(self.effect, id="confirm-effect", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ConfirmSignal(Confirm):
    """Asked before sending a signal."""

    def __init__(self, signal_name: str, pid: int, what: str) -> None:
        super().__init__(f"Send {signal_name} to process {pid}?", what,
                         f"This will {WHAT_IT_DOES[signal_name]}.", f"Send {signal_name}")
        self.signal_name, self.pid = signal_name, pid


class ConfirmProbe(Confirm):
    """Asked before attaching the probe to a running process, or detaching it."""

    def __init__(self, pid: int, what: str, *, attach: bool, detach_key: str = "D") -> None:
        title = f"Attach the PyTorch probe to process {pid}?" if attach else f"Detach the probe from process {pid}?"
        super().__init__(title, what, what_happens(pid, attach, detach_key), "Attach" if attach else "Detach")
        self.pid, self.attach = pid, attach
