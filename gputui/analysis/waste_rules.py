"""When a held GPU counts as idle: the config file's ``[waste]`` table, then the --idle-* and
--waste-window flags over it, checked in one place. A bad value is one clear line naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from gputui import units
from gputui.model.waste import WasteRules

EXAMPLE = """\
[waste]
window = "10m"        # the owners' mean SM utilisation is taken over this
idle_memory = "1GiB"  # a GPU an owner holds this much of or more,
idle_util = 5         # at under this SM utilisation (percent),
idle_after = "10m"    # for this long without a break, is held idle
"""

KNOWN = ("window", "idle_memory", "idle_util", "idle_after")
# The flags that set them (gputui.cli), by key: errors name what the user typed.
FLAGS = {"window": "--waste-window", "idle_memory": "--idle-memory", "idle_util": "--idle-util",
         "idle_after": "--idle-after"}
WINDOW_MAX = 24 * 3600.0
IDLE_AFTER_MAX = 30 * 86400.0


def parse_waste_table(table: object, bad: Callable[[str, str], Exception]) -> WasteRules:
    """``[waste]`` from the config file; ``bad(key, why)`` makes the error for a wrong value."""
    if not isinstance(table, dict):
        raise bad("waste", "must be a table: [waste]")
    unknown = sorted(set(table) - set(KNOWN))
    if unknown:
        raise bad(f"waste.{unknown[0]}", f"is not a setting (known: {', '.join(KNOWN)})")
    return with_values(WasteRules(), table, lambda key, why: bad(f"waste.{key}", why))


def with_values(rules: WasteRules, values: Mapping[str, object], bad: Callable[[str, str], Exception]) -> WasteRules:
    """``rules`` with each of ``values`` (config values, or the flags' words) checked and applied."""
    changes: dict[str, object] = {}
    for key, value in values.items():
        if key == "window":
            changes["window"] = _duration(key, value, WINDOW_MAX, bad)
        elif key == "idle_after":
            changes["idle_after"] = _duration(key, value, IDLE_AFTER_MAX, bad)
        elif key == "idle_memory":
            changes["min_memory"] = _size(key, value, bad)
        elif key == "idle_util":
            changes["max_util"] = _percent(key, value, bad)
        else:
            raise bad(key, f"is not a setting (known: {', '.join(KNOWN)})")
    return dataclasses.replace(rules, **changes)  # type: ignore[arg-type]


def _number(value: object) -> float | None:
    """A number typed as one (not true or false), or written as one in a flag's words."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%"))
        except ValueError:
            return None
    return None


def _duration(key: str, value: object, most: float, bad: Callable[[str, str], Exception]) -> float:
    seconds = units.parse_duration(value) if isinstance(value, str) else _number(value)
    if seconds is None or not 0 < seconds <= most:
        raise bad(key, f'must be a duration such as "10m", "1h", "90s", up to {units.span(most)}, not {value!r}')
    return seconds


def _size(key: str, value: object, bad: Callable[[str, str], Exception]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value  # bytes
    if isinstance(value, str):
        try:
            return units.parse_size(value)
        except ValueError:
            pass
    raise bad(key, f'must be a size such as "1GiB", "512MiB" or a number of bytes, not {value!r}')


def _percent(key: str, value: object, bad: Callable[[str, str], Exception]) -> float:
    percent = _number(value)
    if percent is None or not 0 < percent <= 100:
        raise bad(key, f"must be a percentage above 0 and at most 100, not {value!r}")
    return percent
