"""``--at TIME``: a moment of a recording, as an offset from its start (``90s``, ``5m``, ``1h30m``), a
clock time on the day it began (``12:34:56``, local time), or an ISO timestamp."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from gputui.errors import UserError
from gputui.units import parse_duration


def moment(text: str, start: float) -> float:
    """The epoch time ``text`` names in a recording that began at ``start``."""
    offset = parse_duration(text)
    if offset is not None:
        return start + offset
    began = datetime.fromtimestamp(start).astimezone()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d*)?)?", text.strip()):
        parts = [float(p) for p in text.strip().split(":")]
        when = began.replace(hour=int(parts[0]), minute=int(parts[1]), second=0, microsecond=0)
        when += timedelta(seconds=parts[2] if len(parts) > 2 else 0.0)
        if when.timestamp() < start - 1:  # a clock time earlier than the start: the next day
            when += timedelta(days=1)
        return when.timestamp()
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--at {text}: give an offset (90s, 5m, 1h30m), a clock time (12:34:56) "
                        "or an ISO timestamp (2026-01-05T09:00:00)") from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # local time, as a clock time is
    return parsed.timestamp()
