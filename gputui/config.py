"""gputui's configuration, read once: the settings file (--config, else $XDG_CONFIG_HOME/gputui/config.toml
or ~/.config/gputui/config.toml: interval, theme, columns, keys, hosts, alerts, waste), then the command
line's flags over it, resolved into the typed Options every mode reads (``resolve``). ``gputui.cli.main``
reads the file once, before a mode starts.

Read and checked before anything is drawn or sampled, so a bad value is one line naming the file, the key
and what is allowed, never a traceback halfway through drawing the screen.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gputui.alerts import settings as alert_settings
from gputui.analysis import waste_rules
from gputui.analysis.vocabulary import COLUMNS
from gputui.errors import UserError
from gputui.files import read_small
from gputui.model.alert import AlertSettings
from gputui.model.record import Record
from gputui.model.waste import WasteRules
from gputui.options import THEMES, Options
from gputui.untrusted import visible

if TYPE_CHECKING:  # the many-host view's settings: loaded where a config file has [hosts] or --hosts runs
    from gputui.fleet.entries import HostsSettings

# Seconds between samples, for the config file and --interval/--watch alike: below 0.1 s sampling
# costs a CPU core and shows nothing new; above an hour it is not a monitor.
INTERVAL_MIN, INTERVAL_MAX = 0.1, 3600.0
KNOWN_KEYS = ("interval", "theme", "columns", "keys", "hosts", "alerts", "waste")
# Bytes read at most: a real config is a few hundred; a path to /dev/zero or a log must not be read
# until memory runs out.
CONFIG_LIMIT = 1 << 20


class ConfigError(UserError):
    """The config file is unreadable or holds a value gputui cannot use."""


@dataclass(frozen=True, eq=False, repr=False)
class Config(Record):
    """What the config file asks for; None means "not set, use the default"."""

    path: Path | None = None
    interval: float | None = None
    theme: str | None = None
    columns: tuple[str, ...] | None = None
    keys: Mapping[str, str] = field(default_factory=dict)  # binding id -> key string ("q,ctrl+q")
    hosts: HostsSettings | None = None  # the many-host view's [hosts] (None: none set)
    alerts: AlertSettings = field(default_factory=AlertSettings)  # [alerts], before the --alert-* flags
    waste: WasteRules = field(default_factory=WasteRules)  # [waste], before the --idle-* flags


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the config file is looked for when --config names none: XDG's config directory."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "gputui" / "config.toml"


def load_config(path: str | Path | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Read the config file; a missing default file means defaults, a missing explicit one an error."""
    explicit = path is not None
    file = Path(path) if path is not None else default_path(environ)
    shown = visible(str(file))
    if str(file) == os.devnull:  # `--config /dev/null`, the usual way to ask for no settings
        return parse_config({}, file)
    if _missing(file):
        if explicit:
            raise ConfigError(f"config file {shown} does not exist")
        return Config()
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


def parse_config(data: dict, file: Path | None = None) -> Config:
    """The parsed TOML ``data`` of ``file`` checked, key by key: the first bad value is a ConfigError."""
    where = visible(str(file)) if file else "config"

    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{where}: `{visible(key)}` {visible(why)}")

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
    alerts = alert_settings.parse_alerts_table(data["alerts"], bad) if "alerts" in data else AlertSettings()
    waste = waste_rules.parse_waste_table(data["waste"], bad) if "waste" in data else WasteRules()
    return Config(file, interval, theme, columns, dict(keys), hosts, alerts, waste)


def check_binding_ids(config: Config, known: set[str]) -> None:
    """Key remaps must name bindings that exist (the help screen lists their ids)."""
    wrong = sorted(set(config.keys) - known)
    if wrong:
        raise ConfigError(
            f"{visible(str(config.path or 'config'))}: [keys] names unknown binding {wrong[0]!r} "
            f"(known: {', '.join(sorted(known))})"
        )


def resolve(options: Options, config: Config) -> Options:
    """``options`` with ``config`` under them: a flag given wins over the file's value, which wins over each
    mode's own default (left to the mode). The file's ``interval`` is the live monitor's (in a terminal or a
    browser); serve, record and --watch sample at their own pace unless told on the command line."""

    def alert_flag(key: str, why: str) -> UserError:
        return UserError(f"--alert-{key.replace('_', '-')} {why}")

    def waste_flag(key: str, why: str) -> UserError:
        return UserError(f"{waste_rules.FLAGS[key]} {why}")

    live = options.mode in ("tui", "web")
    return dataclasses.replace(
        options,
        interval=options.interval or (config.interval if live else None),
        theme=options.theme or config.theme,
        columns=config.columns,
        keys=config.keys,
        alerts=alert_settings.with_values(config.alerts, dict(options.alert_flags), alert_flag),
        waste=waste_rules.with_values(config.waste, dict(options.idle_flags), waste_flag),
    )
