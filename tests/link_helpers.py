"""Talking to a probe's socket by hand, for the server's abuse tests."""

import json
import os
import socket


def connect(path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2.0)
    sock.connect(os.fspath(path))
    return sock


def read_reply(sock: socket.socket) -> dict:
    buffer = b""
    while b"\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a full reply; got {buffer!r}"
        buffer += chunk
    return json.loads(buffer.split(b"\n", 1)[0])
