"""``gputui web``: check what was asked, listen, say where, then serve browser sessions until SIGINT or SIGTERM.

Everything given (the address, the users file, the TLS files, and what the monitor would show: a driver, the
GPUs asked for, a recording, the hosts) is checked once before the first page, so trouble with any of it is
one line and exit status 2, as in every mode, rather than a page whose every session ends at once.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gputui.collect.host import host_name
from gputui.errors import UserError
from gputui.options import WEB_LISTEN, Options
from gputui.serve.auth import Users
from gputui.serve.server import (
    BACKLOG,
    Address,
    cannot_listen,
    exposure_warnings,
    loopback,
    parse_address,
    resolved,
    tls_context,
)

if TYPE_CHECKING:
    from gputui.config import Config

SESSION_FLAG = "--web-session"  # cli.py's: what makes a gputui process one browser tab's monitor


def serve_web(options: Options, config: Config) -> int:
    """Serve the monitor ``options`` ask for to browsers until stopped (130 for Ctrl-C, 143 for SIGTERM)."""
    try:  # the web extra: not every install has it, and nothing else of gputui needs it
        from gputui.web import server
    except ImportError as exc:
        raise UserError(f"gputui web needs textual-serve, which is not installed ({exc}): "
                        "pip install 'gputui[web]'") from None
    asked = options.web
    address = parse_address(asked.listen or WEB_LISTEN)
    users = Users.load(asked.basic_auth_file) if asked.basic_auth_file else None
    tls = tls_context(asked.tls_cert, asked.tls_key) if asked.tls_cert else None
    check_source(options, config)
    listening = bind(address)
    app = server.make_app(session_command(asked.argv), f"gputui {host_name()}", users=users, limit=asked.sessions,
                          idle=asked.idle)

    def say_where() -> None:
        host, port = listening.getsockname()[:2]
        url = f"{'https' if tls else 'http'}://{Address(host, port)}/"
        print(f"gputui web: {url}, at most {asked.sessions} browser session{'s' if asked.sessions != 1 else ''} "
              "at once", file=sys.stderr, flush=True)
        for warning in exposure_warnings(loopback(host), users is not None, tls is not None):
            print(f"gputui web: warning: {warning}", file=sys.stderr, flush=True)

    return server.serve(app, listening, tls, say_where)


def session_command(argv: Sequence[str]) -> list[str]:
    """The command line of one browser tab's monitor: this gputui's, as it was given, marked as a session."""
    return [sys.executable, "-m", "gputui", *argv, SESSION_FLAG]


def check_source(options: Options, config: Config) -> None:
    """What every session would refuse to show, said once now: a recording that cannot be read, a [hosts] list
    that is not one, no driver (and no probe), GPUs or users that are not there."""
    if options.hosts is not None:
        from gputui.fleet.entries import HostsSettings, host_entries

        host_entries(options.hosts, config.hosts or HostsSettings())
        return
    if options.replay.file:
        from gputui.record.run import open_recording

        open_recording(options.replay.file)
        return
    from gputui.ui.startup.launch import open_sampler

    sampler, _ = open_sampler(options)
    try:
        sampler.sample()  # --only 99: the same UserError the monitor would end on
    finally:
        sampler.close()


def bind(address: Address) -> socket.socket:
    """A listening socket at ``address``; UserError, in one line, where that cannot be."""
    family, sockaddr = resolved(address)
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart finds its port free
        listening.bind(sockaddr)
        listening.listen(BACKLOG)
    except OSError as exc:
        listening.close()
        raise cannot_listen(address, exc, "web") from None
    return listening
