"""Which hosts to watch and how to reach each: the ``--hosts`` list, the config file's ``[hosts]``
table, checked into HostEntry values before anything is started.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from gputui.errors import UserError
from gputui.model.record import Record
from gputui.options import settings_table
from gputui.untrusted import visible

DEFAULT_COMMAND = "gputui"
DEFAULT_WAIT = 10.0  # seconds --once and --json wait for each host's first answer
SSH_ENV = "GPUTUI_SSH"  # the ssh command (words), where the config does not name one
KNOWN_KEYS = ("names", "command", "commands", "ssh", "auth", "wait")
# An ssh destination as ssh takes it: an alias from ~/.ssh/config, host, user@host, an address.
_DESTINATION = re.compile(r"[A-Za-z0-9_.%@:\[\]+-]+")


@dataclass(frozen=True, eq=False, repr=False)
class HostsSettings(Record):
    """The config file's ``[hosts]`` table."""

    names: tuple[str, ...] = ()  # the hosts a bare --hosts watches
    command: str = DEFAULT_COMMAND  # the remote gputui, as the remote shell runs it
    commands: dict[str, str] = field(default_factory=dict)  # host -> its own remote command
    ssh: str | None = None  # the ssh command as words ("ssh -F ~/.ssh/cluster"); None: $GPUTUI_SSH or ssh
    auth: dict[str, str] = field(default_factory=dict)  # URL entry -> "user:password"
    wait: float = DEFAULT_WAIT


@dataclass(frozen=True, eq=False, repr=False)
class HostEntry(Record):
    """One host to watch: over ssh (``ssh`` + ``command``) or, for a URL, from its /snapshot."""

    name: str
    ssh: tuple[str, ...] = ()  # the ssh argv up to (not including) the destination
    command: str = DEFAULT_COMMAND
    url: str | None = None  # http(s)://host:port of a `gputui serve`, without its userinfo
    auth: tuple[str, str] | None = None  # basic auth (user, password) for a URL

    @property
    def is_url(self) -> bool:
        return self.url is not None


def parse_hosts_table(table: object, bad: Callable[[str, str], Exception]) -> HostsSettings:
    """The ``[hosts]`` table of the config file; ``bad(key, why)`` makes the error to raise."""
    table = settings_table(table, "hosts", KNOWN_KEYS, bad, '[hosts] names = ["node1", "node2"]')
    names = table.get("names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("hosts.names", "must be a list of host names or URLs")
    for name in names:
        problem = name_problem(name)
        if problem:
            raise bad("hosts.names", problem)
    command = table.get("command", DEFAULT_COMMAND)
    if not isinstance(command, str) or not command.strip():
        raise bad("hosts.command", 'must be the remote gputui command, e.g. "~/venv/bin/gputui"')
    commands = _table_of_words(table, "commands", bad, 'node2 = "/opt/venv/bin/gputui"')
    auth = _table_of_words(table, "auth", bad, '"https://node3:9403" = "user:password"')
    for url, pair in auth.items():
        if ":" not in pair:
            raise bad("hosts.auth", f"{url}: must be \"user:password\"")
    ssh = table.get("ssh")
    if ssh is not None and (not isinstance(ssh, str) or not _words(ssh)):
        raise bad("hosts.ssh", 'must be the ssh command, e.g. "ssh -F ~/.ssh/cluster"')
    wait = table.get("wait", DEFAULT_WAIT)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 < wait <= 600:
        raise bad("hosts.wait", "must be a number of seconds between 0 and 600")
    return HostsSettings(tuple(names), command, commands, ssh, auth, float(wait))


def _table_of_words(table: dict, key: str, bad: Callable[[str, str], Exception], example: str) -> dict[str, str]:
    found = table.get(key, {})
    if not isinstance(found, dict) or not all(isinstance(v, str) and v.strip() for v in found.values()):
        raise bad(f"hosts.{key}", f"must be a table of host = \"...\", e.g. {example}")
    return dict(found)


def _words(text: str) -> tuple[str, ...]:
    import shlex  # here: only a config with [hosts] needs it, not the live monitor (issue 31 item 21)

    try:
        return tuple(shlex.split(text))
    except ValueError:
        return ()


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a host entry, or None when it can."""
    if name.startswith(("http://", "https://")):
        parts = urlsplit(name)
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            return f"{name!r}: not a valid port"
        return None if parts.hostname else f"{name!r}: a URL needs a host name"
    if "://" in name:
        return f"{name!r}: only http:// and https:// URLs (or ssh host names) are hosts"
    if name.startswith("-"):  # ssh would take it for an option
        return f"{name!r}: a host name cannot start with '-'"
    if not _DESTINATION.fullmatch(name):
        return f"{name!r}: not a host name (letters, digits and . _ - @ : only)"
    return None


def host_entries(names: tuple[str, ...], settings: HostsSettings,
                 environ: Mapping[str, str] | None = None) -> list[HostEntry]:
    """The hosts to watch: ``names`` (from --hosts), or the config's list where --hosts named none.

    Raises UserError for a name no transport can take, a repeated one, or no hosts at all.
    """
    env = os.environ if environ is None else environ
    names = names or settings.names
    if not names:
        raise UserError("--hosts: name the hosts (--hosts node1,node2) or list them in the config "
                        'file: [hosts] names = ["node1", "node2"]')
    ssh = _words(settings.ssh or env.get(SSH_ENV, "") or "ssh")
    if not ssh:
        raise UserError(f"${SSH_ENV}: not a command: {visible(env.get(SSH_ENV, ''))!r}")
    entries: list[HostEntry] = []
    for name in names:
        problem = name_problem(name)
        if problem:
            raise UserError(f"--hosts: {visible(problem)}")
        if name in (e.name for e in entries):
            raise UserError(f"--hosts: {visible(name)!r} is named twice")
        entries.append(_entry(name, ssh, settings))
    return entries


def _entry(name: str, ssh: tuple[str, ...], settings: HostsSettings) -> HostEntry:
    if not name.startswith(("http://", "https://")):
        return HostEntry(name, ssh=ssh, command=settings.commands.get(name, settings.command))
    parts = urlsplit(name)
    auth = None
    if parts.username is not None:  # userinfo in the URL wins over the config's
        auth = (parts.username, parts.password or "")
    elif name in settings.auth:
        user, _, password = settings.auth[name].partition(":")
        auth = (user, password)
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    url = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
    return HostEntry(_without_password(name, parts.password), url=url, auth=auth)


def _without_password(name: str, password: str | None) -> str:
    """The name as shown: a password in the URL never reaches the screen or --json."""
    return name if not password else name.replace(f":{password}@", ":***@", 1)
