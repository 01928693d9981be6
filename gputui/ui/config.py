"""The monitor's settings file: $XDG_CONFIG_HOME/gputui/config.toml (interval, theme, columns, keys,
hosts, alerts, waste).

Read and checked before the app starts, so a bad value is a clear UserError naming the file and the key,
never a traceback halfway through drawing the screen.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gputui.alerts.settings import AlertSettings, parse_alerts_table
from gputui.analysis.waste_rules import parse_waste_table
from gputui.errors import UserError
from gputui.files import read_small
from gputui.model.record import Record
from gputui.model.waste import WasteRules
from gputui.untrusted import visible

if TYPE_CHECKING:  # the many-host view's settings: loaded where a config file has [hosts] or --hosts runs
    from gputui.fleet.entries import HostsSettings

THEMES = ("dark", "light")
# Seconds between samples, for the config file and --interval/--watch alike: below 0.1 s sampling
# costs a CPU core and shows nothing new; above an hour it is not a monitor.
INTERVAL_MIN, INTERVAL_MAX = 0.1, 3600.0
KNOWN_KEYS = ("interval", "theme", "columns", "keys", "hosts", "alerts", "waste")
# Bytes read at most: a real config is a few hundred; a path to /dev/zero or a log must not be read
# until memory runs out.
CONFIG_LIMIT = 1 << 20

EXAMPLE = """\
interval = 2.0                 # seconds between samples
theme = "light"                # "dark" or "light"
columns = ["pid", "user", "gpu", "gpu_memory", "sm", "command"]
[keys]                         # binding id = key(s), see the help screen (?)
quit = "q,ctrl+q"
[hosts]                        # gputui --hosts: the machines to watch over ssh, or serve URLs
names = ["node1", "node2", "https://node3:9403"]
command = "~/venv/bin/gputui"  # the remote gputui (default: gputui)
[alerts]                       # see README's Alerts
oom_within = "30m"
command = "~/bin/page-me"
[waste]                        # when a held GPU counts as idle (the w view)
idle_after = "30m"
"""


class ConfigError(UserError):
    """The config file is unreadable or holds a value the monitor cannot use."""

    multiline = True


@dataclass(frozen=True, eq=False, repr=False)
class UiConfig(Record):
    """What the config file asks for; None means "not set, use the default"."""

    path: Path | None = None
    interval: float | None = None
    theme: str | None = None
    columns: tuple[str, ...] | None = None
    keys: dict = field(default_factory=dict)  # binding id -> key string ("q,ctrl+q")
    hosts: HostsSettings | None = None  # the many-host view's [hosts] (None: none set)
    alerts: AlertSettings = field(default_factory=AlertSettings)  # [alerts], before the --alert-* flags
    waste: WasteRules = field(default_factory=WasteRules)  # [waste], before the --idle-* flags


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "gputui" / "config.toml"


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> UiConfig:
    """Read the config file; a missing default file means defaults, a missing explicit one an error."""
    explicit = path is not None
    file = Path(path) if path is not None else default_path(environ)
    shown = visible(str(file))
    if str(file) == os.devnull:  # `--config /dev/null`, the usual way to ask for no settings
        return parse_config({}, file)
    if _missing(file):
        if explicit:
            raise ConfigError(f"config file {shown} does not exist")
        return UiConfig()
    try:
        # read_small: never blocks on a FIFO, refuses devices and anything over CONFIG_LIMIT.
        data = read_small(file, CONFIG_LIMIT, "config file")
    except UserError as exc:  # one type for every trouble with the config, as callers expect
        raise ConfigError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {shown} is not UTF-8 text: byte 0x{data[exc.start]:02x} at "
                          f"offset {exc.start}") from None
    # Imported here: most users have no config file, and the monitor's first frame waits on imports.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # tomllib is new in 3.11; tomli is the same parser (a dependency on 3.10 only)
        import tomli as tomllib
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{shown} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses into each nested array or table: a = [[[[...
        raise ConfigError(f"{shown} is not valid TOML: nested too deeply") from None
    return parse_config(config, file)


def _missing(file: Path) -> bool:
    """True when there is no file at ``file``; one that is there but cannot be read is for read_small
    to say why (Path.exists raises on a directory we may not search)."""
    try:
        os.stat(file)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def interval_problem(seconds: float) -> str | None:
    """Why ``seconds`` cannot be a sampling interval, or None when it can."""
    if seconds <= 0:  # a sign slip, or --watch -1 read as seconds: not a "too short" interval
        return f"must be a positive number of seconds ({INTERVAL_MIN:g} or more), not {seconds:g}"
    if not INTERVAL_MIN <= seconds <= INTERVAL_MAX:  # also false for NaN
        return f"must be between {INTERVAL_MIN:g} and {INTERVAL_MAX:g} seconds, not {seconds:g}"
    return None


def parse_config(data: dict, file: Path | None = None) -> UiConfig:
    where = visible(str(file)) if file else "config"

    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{where}: `{visible(key)}` {visible(why)}\nExample of a valid file:\n{EXAMPLE}")

    unknown = sorted(set(data) - set(KNOWN_KEYS))
    if unknown:
        raise bad(unknown[0], f"is not a setting (known: {', '.join(KNOWN_KEYS)})")

    interval = data.get("interval")
    if interval is not None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise bad("interval", f"must be a number of seconds, not {interval!r}")
        problem = interval_problem(interval)
        if problem:
            raise bad("interval", problem)
        interval = float(interval)

    theme = data.get("theme")
    if theme is not None and theme not in THEMES:
        raise bad("theme", f"must be one of {', '.join(THEMES)}, not {theme!r}")

    columns = data.get("columns")
    if columns is not None:
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or not columns:
            raise bad("columns", "must be a non-empty list of column names")
        # Imported here: --once checks the config too and should not load the table's code for it.
        from gputui.ui.columns import COLUMNS

        wrong = [c for c in columns if c not in COLUMNS]
        if wrong:
            raise bad("columns", f"has unknown column {wrong[0]!r} (known: {', '.join(COLUMNS)})")
        columns = tuple(dict.fromkeys(columns))

    keys = data.get("keys", {})
    if not isinstance(keys, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in keys.items()
    ):
        raise bad("keys", 'must be a table of binding id = "key", e.g. quit = "q,ctrl+q"')
    hosts = None
    if "hosts" in data:
        from gputui.fleet.entries import parse_hosts_table

        hosts = parse_hosts_table(data["hosts"], bad)
    alerts = parse_alerts_table(data["alerts"], bad) if "alerts" in data else AlertSettings()
    waste = parse_waste_table(data["waste"], bad) if "waste" in data else WasteRules()
    return UiConfig(file, interval, theme, columns, dict(keys), hosts, alerts, waste)


def check_binding_ids(config: UiConfig, known: set[str]) -> None:
    """Key remaps must name bindings that exist (the help screen lists their ids)."""
    wrong = sorted(set(config.keys) - known)
    if wrong:
        raise ConfigError(
            f"{config.path or 'config'}: [keys] names unknown binding {wrong[0]!r} "
            f"(known: {', '.join(sorted(known))})"
        )
