"""An https alert webhook from the live monitor, as from --watch (issue 46): the real ``gputui`` on a
pseudo-terminal, its alerts POSTed to a real TLS receiver whose self-signed certificate the `openssl`
command made. The monitor once left ssl out of its process to save memory, and its https webhook then
never arrived while --watch delivered the same alert."""

import contextlib
import json
import os
import queue
import shutil

import pytest
from test_alerts_receivers import certificate, serving  # noqa: F401 - certificate is a fixture
from test_terminal_life import Terminal, env  # noqa: F401 - env is a fixture

pytestmark = [pytest.mark.slow,  # the real monitor in a subprocess, a few seconds
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")]

LEAK = "process 51200 leaks activations"  # the leaky demo's first alert


def first_delivery(httpd) -> tuple[dict, dict]:
    """The receiver's first POST: its headers and its JSON body (60 s at most: a loaded machine)."""
    try:
        headers, body = httpd.got.get(timeout=60)
    except queue.Empty:
        pytest.fail("no alert reached the https receiver in 60 s")
    return headers, json.loads(body)


def test_the_live_monitor_delivers_an_https_webhook(env, certificate, monkeypatch):  # noqa: F811 - fixtures
    with serving(certificate, monkeypatch) as (httpd, url):
        term = Terminal({**env, "SSL_CERT_FILE": str(certificate[0])}, "--demo", "leaky", "--alert-webhook", url)
        try:
            term.drawn()
            headers, body = first_delivery(httpd)
        finally:
            with contextlib.suppress(OSError):  # already gone
                os.write(term.fd, b"q")
            code = term.wait()
    assert code == 0
    assert headers["Content-Type"] == "application/json"
    assert [(e["change"], e["alert"]["kind"], e["alert"]["title"]) for e in body["events"]][0] == \
        ("started", "leak", LEAK)
    assert b"Traceback" not in term.out and b"alert webhook" not in term.out  # no failure said in a toast
