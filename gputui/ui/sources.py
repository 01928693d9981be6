"""What feeds a monitor (this machine's sampler, the many-host view's sampler, a recording), and what each
source cannot do, in the user's words: the app asks its source, and refuses in one place (GpuTuiApp.refused).

No Textual here: the sources are read by worker threads, and the live one before Textual is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from gputui.ui.rows import Row

# What a monitor may be asked that its source may not do (the keys' actions, and the detail screen's request).
SIGNAL, PROBE, RECORD_SITES, INTERVAL = "signal", "probe", "record_sites", "interval"


class Source(Protocol):
    """A monitor's source, as far as the app's refusals go."""

    def cannot(self, what: str, selected: Row | None) -> str | None:
        """Why this source cannot do ``what`` (SIGNAL, PROBE, RECORD_SITES, INTERVAL) at all, or None;
        ``selected``: the row selected on the screen showing, where the words name its process."""
        ...


class Declared:
    """A source whose refusals are a table: CANNOT, what -> why ("{signal}" is the signal's name)."""

    CANNOT: ClassVar[Mapping[str, str]] = {}  # this machine's sampler can do everything

    def cannot(self, what: str, selected: Row | None) -> str | None:
        return self.CANNOT.get(what)
