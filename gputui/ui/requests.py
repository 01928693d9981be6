"""What a screen asks of its app, as Textual Messages: the app answers them, and
refuses what its source cannot do, so no screen needs to know which source feeds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from gputui.model import GpuProcess


class OpenProcessDetail(Message):
    """Open the detail screen of ``process`` (``host``: the many-host view's host of it)."""

    def __init__(self, process: GpuProcess, host: str | None = None) -> None:
        super().__init__()
        self.process, self.host = process, host


class OpenJobDetail(Message):
    """Open the detail screen of the job with this Job.key (``host``: the many-host view's host of it)."""

    def __init__(self, key: str, host: str | None = None) -> None:
        super().__init__()
        self.key, self.host = key, host


class RecordSites(Message):
    """Have process ``pid``'s probe start (``on``) or stop recording allocation sites for ``steps`` steps."""

    def __init__(self, pid: int, *, on: bool, steps: int) -> None:
        super().__init__()
        self.pid, self.on, self.steps = pid, on, steps


class OpenWaste(Message):
    """Open the idle view (w): who holds the GPUs, and who holds them idle."""
