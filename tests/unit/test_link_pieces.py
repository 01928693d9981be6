"""The monitor's side of the wire in its three pieces: discovery (which probes there are), connection
(one probe's replies and what they mean) and the watcher (every probe, polled for the live monitor),
each usable without the others above it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from gputui.link import connection, discovery, peers, protocol


@pytest.mark.parametrize(("code", "reason", "detail"), [
    (protocol.REFUSED, connection.REFUSED, "the probe refused the connection: go away"),
    (protocol.BUSY, connection.BUSY, "the probe is busy: go away"),
    (protocol.WRONG_VERSION, connection.MISMATCH, "go away"),
    (protocol.HANDLER_FAILED, connection.FAILED, "the probe could not answer: go away"),
])
def test_an_error_reply_is_the_reason_the_probe_could_not_answer(code, reason, detail):
    reply = {"v": protocol.VERSION, "id": 3, "ok": False, "code": code, "error": "go away"}
    with pytest.raises(connection.ProbeUnavailable) as caught:
        connection.result_of(42, reply, 3)
    assert (caught.value.pid, caught.value.reason, caught.value.detail) == (42, reason, detail)


def test_a_reply_to_another_request_is_a_bad_reply_and_the_right_one_its_result():
    reply = {"v": protocol.VERSION, "id": 4, "ok": True, "result": {"x": 1}}
    assert connection.result_of(42, reply, 4) == {"x": 1}
    with pytest.raises(connection.ProbeUnavailable) as caught:
        connection.result_of(42, reply, 3)
    assert caught.value.reason == connection.BAD_REPLY
    assert caught.value.detail == "the probe answered request 4, not the one sent (3)"


def test_the_peer_pid_is_the_process_at_the_other_end():
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        assert peers.peer_pid(a) == os.getpid()
    finally:
        a.close()
        b.close()


def test_only_a_stale_socket_is_removed(tmp_path):
    stale = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(os.fspath(stale))
    sock.close()  # bound, never listening: what a killed probe leaves
    regular = tmp_path / "notes.txt"
    regular.write_text("mine")
    assert not discovery._listening(stale)
    discovery.remove_stale(stale)
    discovery.remove_stale(regular)
    assert not stale.exists() and regular.read_text() == "mine"


def test_the_watcher_loads_without_the_one_shot_client():
    code = ("import json, sys, gputui.link.watcher\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gputui.link.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["gputui.link.connection", "gputui.link.discovery", "gputui.link.paths",
                                      "gputui.link.peers", "gputui.link.protocol", "gputui.link.watcher"]
