"""``--at TIME``: a moment of a recording, as an offset from its start (``90s``, ``5m``, ``1h30m``), a
clock time (``12:34:56``, local time: on the day it began, or the next where that is in it), or an ISO
timestamp; and the sample it names, refused (naming the recording's span) where it is not in it."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gputui import units
from gputui.errors import UserError
from gputui.units import parse_duration
from gputui.untrusted import visible

if TYPE_CHECKING:
    from gputui.record.reader import Recording

# Seconds before the first sample that still name it: the recorder's first reading (for CPU %) comes
# a moment before that sample, so the clock time a recording was started at is in it.
EARLY = 1.0
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(:\d{2}(\.\d*)?)?")


def moment(text: str, start: float, end: float = math.inf) -> float:
    """The epoch time ``text`` names in a recording from ``start`` to ``end``."""
    offset = parse_duration(text)
    if offset is not None:
        return start + offset
    try:
        if _CLOCK.fullmatch(text.strip()):
            return _clock_time(text.strip(), start, end)
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # local time, as a clock time is
        return parsed.timestamp()
    except (ValueError, OverflowError):  # not a time, or none there is (25:00, 09:99, the year 1)
        raise UserError(f"--at {visible(text)}: give an offset (90s, 5m, 1h30m), a clock time (12:34:56) "
                        "or an ISO timestamp (2026-01-05T09:00:00)") from None


def _clock_time(text: str, start: float, end: float) -> float:
    """The clock time on the recording's first day, or on the next where only that one is in it (a
    recording across midnight); the first day's where neither is (the caller says it is not in it)."""
    parts = [float(p) for p in text.split(":")]
    if len(parts) > 2 and parts[2] >= 60:
        raise ValueError("no such second")  # (hours and minutes: replace refuses them)
    began = datetime.fromtimestamp(start).astimezone()
    when = began.replace(hour=int(parts[0]), minute=int(parts[1]), second=0, microsecond=0)
    when += timedelta(seconds=parts[2] if len(parts) > 2 else 0.0)
    for day in (when, when + timedelta(days=1)):
        if start - EARLY <= day.timestamp() <= end:
            return day.timestamp()
    return when.timestamp()


def sample_at(text: str, recording: Recording) -> int:
    """The index of the sample ``--at text`` names: the last one taken at or before it. A moment up to
    an interval after the last sample is still that one's (it stood until the next would have come);
    outside that, and more than EARLY before the first, a UserError that names the recording's span."""
    times = recording.times
    end = times[-1] + recording.interval
    when = moment(text, times[0], end)
    if times[0] - EARLY <= when <= end:
        return recording.index_at(when)
    where = "before the recording's start" if when < times[0] else "after the recording's end"
    older = recording.path.with_name(recording.path.name + ".1")
    if when < times[0] and older.exists():  # rotated out (writer.rotate): the earlier samples are there
        where += f" ({visible(older.name)} holds older samples)"
    raise UserError(f"--at {visible(text)}{_read_as(text, when)} is {where}: {visible(recording.path.name)} "
                    f"holds {span(recording)}")


def span(recording: Recording) -> str:
    """``2026-01-05 09:00:00 to 09:02:20 UTC (2:20, 141 samples)``: from the first sample to the last."""
    first, last = recording.times[0], recording.times[-1]
    one_day = units.clock_time(first, date=True)[:10] == units.clock_time(last, date=True)[:10]
    to = units.clock_time(last, date=not one_day, zone=True)
    count = len(recording)
    return (f"{units.clock_time(first, date=True)} to {to} ({units.elapsed(last - first)}, "
            f"{count} sample{'s' if count != 1 else ''})")


def _read_as(text: str, when: float) -> str:
    """How a clock time was read, and how an offset is written: ``2:20`` is twenty past two, not 2m20s."""
    clock = _CLOCK.fullmatch(text.strip())
    if clock is None:
        return ""
    shown = f" (the clock time {units.clock_time(when, date=True, zone=True)}"
    if clock.group(3) is None:
        shown += f"; an offset into the recording is written {int(clock.group(1))}m{clock.group(2)}s"
    return shown + ")"
