"""What alerts are asked for: the config file's ``[alerts]`` table, then the command line's --alert-*
flags over it. Bad values are one clear line naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from gputui import units
from gputui.model.alert import ALERT_KINDS, WEBHOOK_FORMATS, AlertSettings
from gputui.options import settings_table

DESKTOP = ("auto", "on", "off")  # the live monitor's desktop notification (OSC 777/9)
EXAMPLE = """\
[alerts]
kinds = ["leak", "oom_soon", "oom_ended", "gpu_lost", "gpu_errors", "gpu_idle", "straggler", "imbalance"]
oom_within = "30m"             # time to OOM that alerts
idle_after = "1h"              # memory held on an idle GPU that alerts
free_after = "1m"              # a GPU free this long after being busy (kind gpu_free)
command = "~/bin/page-me"      # gets each delivery as JSON on stdin
webhook = "https://ntfy.sh/my-gpus"
webhook_format = "ntfy"        # json, slack or ntfy
per_minute = 6                 # deliveries per channel at most
bell = true                    # the live monitor rings the terminal bell
desktop = "auto"               # desktop notification: auto (where the terminal has one), on, off
tmux_passthrough = false       # wrap it for tmux (needs `set -g allow-passthrough on`)
"""


_DURATIONS = ("oom_within", "idle_after", "free_after", "timeout")
_STRINGS = ("command", "webhook")
_FLAGS = ("enabled", "bell", "tmux_passthrough")
KNOWN = ("kinds", *_DURATIONS, *_STRINGS, "webhook_format", "per_minute", *_FLAGS, "desktop")


def parse_alerts_table(table: object, bad: Callable[[str, str], Exception]) -> AlertSettings:
    """``[alerts]`` from the config file; ``bad(key, why)`` makes the error for a wrong value."""
    table = settings_table(table, "alerts", KNOWN, bad)
    return with_values(AlertSettings(), table, lambda key, why: bad(f"alerts.{key}", why))


def with_values(settings: AlertSettings, values: Mapping[str, object],
                bad: Callable[[str, str], Exception]) -> AlertSettings:
    """``settings`` with each of ``values`` (config values, or the flags given) checked and applied."""
    changes: dict[str, object] = {}
    limits: dict[str, object] = {}
    for key, value in values.items():
        if key in _DURATIONS:
            seconds = units.parse_duration(value) if isinstance(value, str) else (
                float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
            if seconds is None or seconds <= 0:
                raise bad(key, f'must be a duration such as "30m", "1h", "90s", not {value!r}')
            (changes if key == "timeout" else limits)[key] = seconds
        elif key in _STRINGS:
            if not isinstance(value, str) or not value.strip():
                raise bad(key, f"must be a non-empty string, not {value!r}")
            changes[key] = value
        elif key in _FLAGS:
            if not isinstance(value, bool):
                raise bad(key, f"must be true or false, not {value!r}")
            changes[key] = value
        elif key == "kinds":
            limits[key] = _kinds(value, bad)
        else:
            changes[key] = _choice(key, value, bad)
    thresholds = dataclasses.replace(settings.thresholds, **limits)  # type: ignore[arg-type]
    return dataclasses.replace(settings, thresholds=thresholds, **changes)  # type: ignore[arg-type]


def _kinds(value: object, bad: Callable[[str, str], Exception]) -> frozenset:
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("kinds", f"must be a list of alert kinds ({', '.join(ALERT_KINDS)})")
    wrong = [n for n in names if n.strip() not in ALERT_KINDS]
    if wrong:
        raise bad("kinds", f"has unknown kind {wrong[0]!r} (known: {', '.join(ALERT_KINDS)})")
    return frozenset(n.strip() for n in names)


def _choice(key: str, value: object, bad: Callable[[str, str], Exception]) -> object:
    if key == "webhook_format" and value not in WEBHOOK_FORMATS:
        raise bad(key, f"must be one of {', '.join(WEBHOOK_FORMATS)}, not {value!r}")
    if key == "desktop" and value not in DESKTOP:
        raise bad(key, f"must be one of {', '.join(DESKTOP)}, not {value!r}")
    if key == "per_minute" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 600):
        raise bad(key, f"must be a whole number from 1 to 600, not {value!r}")
    return value

