"""The alert line, over the footer of the main screen: how many alerts and problems there are now, the newest one's
title, and the key that lists them all. One line at any size, so no alert hides the rows it is about; hidden while
nothing is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.ui.notices import SEVERITIES, Notice, counted
from gputui.ui.widgets.bars import join, styled
from gputui.ui.widgets.line import StyledLines

STYLES = {"critical": "bold $error", "warning": "bold $warning", "info": "bold $text-muted"}


class AlertLine(StyledLines):
    """``! 2 alerts · critical: process 51200 runs out of GPU memory in 3 min``, cut at the pane's edge."""

    DEFAULT_CSS = "AlertLine { height: 1; padding: 0 1; background: $panel; display: none; }"

    def show_notices(self, notices: Sequence[Notice], key: str) -> None:
        """``notices``: newest first; ``key``: the key that lists them, as the footer shows it."""
        self.display = bool(notices)
        if not notices:
            return
        newest = notices[0]
        worst = min(notices, key=lambda n: SEVERITIES.index(n.severity))
        dot = "-" if getattr(self.app, "ascii", False) else "·"
        # The key and the count first: the pane's edge cuts the title, never what to press.
        words = join([styled(key, "bold $footer-key-foreground"), styled(counted(notices), STYLES[worst.severity]),
                      dot, styled(f"{newest.severity}:", STYLES[newest.severity]) if newest.alert else "",
                      newest.title])
        self.show_lines([("", words)])
