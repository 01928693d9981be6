"""The browser view's server without a browser: ``gputui web`` in a subprocess, asked over HTTP and websockets as
Textual's web client asks it (aiohttp's client). The page asks nothing of another host; each websocket is a
monitor process of its own, drawing the demo; the password is asked before any websocket opens; a page of
another site gets none; the session limit holds, with a page that says so; an idle session is closed saying
why; what a browser sends is bounded; TLS; SIGTERM ends every session."""

from __future__ import annotations

import asyncio
import json
import re
import select
import shutil
import ssl
import subprocess
import time

import aiohttp
import psutil
import pytest
from cli_helpers import gputui
from serve_helpers import serving
from web_helpers import basic, serve_env, serving_web, sessions_of, users_file, wait_until

from gputui.web.server import HEIGHT, STOP_WAIT, WIDTH, _within

DEMO = ("--demo", "training-node")
HOST = b"dgx-sim-01"  # the demo's host name, in the monitor's header


@pytest.fixture
def env(tmp_path):
    return serve_env(tmp_path)


def websocket_url(url: str) -> str:
    return url.replace("http", "ws", 1) + "ws?width=120&height=40"


async def drawn(websocket: aiohttp.ClientWebSocketResponse, wanted: bytes, seconds: float = 60.0) -> bytes:
    """What the session drew until ``wanted`` was among it (the terminal's bytes, as the client gets them)."""
    seen = b""
    deadline = time.monotonic() + seconds
    while wanted not in seen:
        message = await websocket.receive(timeout=max(0.1, deadline - time.monotonic()))
        assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), (message, seen[-2000:])
        if message.type == aiohttp.WSMsgType.BINARY:
            seen += message.data
    return seen


async def next_text(websocket: aiohttp.ClientWebSocketResponse, seconds: float = 30.0) -> object:
    """The next text message, as JSON, past the screen's frames drawn meanwhile (binary: the terminal's bytes)."""
    deadline = time.monotonic() + seconds
    while True:
        message = await websocket.receive(timeout=max(0.1, deadline - time.monotonic()))
        assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
        if message.type == aiohttp.WSMsgType.TEXT:
            return json.loads(message.data)


async def closed_after(websocket: aiohttp.ClientWebSocketResponse, seconds: float = 60.0) -> bytes:
    """What the session drew until its websocket closed."""
    seen = b""
    deadline = time.monotonic() + seconds
    while True:
        message = await websocket.receive(timeout=max(0.1, deadline - time.monotonic()))
        if message.type == aiohttp.WSMsgType.BINARY:
            seen += message.data
        elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            return seen


async def test_the_page_asks_nothing_of_another_host(env):
    with serving_web(env, *DEMO, "web") as (_, url):
        async with aiohttp.ClientSession() as client:
            async with client.get(url) as answer:
                assert answer.status == 200 and answer.content_type == "text/html"
                policy = answer.headers["Content-Security-Policy"]
                page = await answer.text()
            links = [link for link in re.findall(r'(?:src|href)="([^"]*)"', page) if link != "data:,"]  # no icon
            assert links and all(not re.match(r"[a-z]+:|//", link) for link in links), links
            for link in filter(None, links):  # each of them served here (href="": the page itself)
                async with client.get(url + link) as answer:
                    assert answer.status == 200, link
                    assert len(await answer.read()) > 1000, link
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "font-src 'self'" in policy
    assert "fonts.googleapis" not in page and "RobotoMono-VariableFont_wght.ttf" in page


async def test_each_tab_is_a_monitor_process_of_its_own_and_q_ends_it(env):
    with serving_web(env, *DEMO, "web") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(websocket_url(url)) as first, client.ws_connect(websocket_url(url)) as second:
                for websocket in (first, second):
                    screen = await drawn(websocket, HOST)
                    assert b"H100" in screen
                monitors = sessions_of(proc)
                assert len(monitors) == 2
                await first.send_str(json.dumps(["stdin", "q"]))
                await closed_after(first)
                wait_until(lambda: len(sessions_of(proc)) == 1)
                await second.send_str(json.dumps(["ping", "1"]))  # the other tab goes on
                assert await drawn(second, HOST)


async def test_a_monitor_that_does_not_leave_is_killed_and_its_place_given_back(env):
    """A tab's monitor that cannot answer the quit (stopped, hung) would hold a session's place for the server's
    life: STOP_WAIT after its tab closed it is killed, said on stderr, and the next tab gets the place."""
    with serving_web(env, *DEMO, "web", "--max-sessions", "1") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(websocket_url(url)) as tab:
                await drawn(tab, HOST)
                [monitor] = sessions_of(proc)
                monitor.suspend()  # SIGSTOP
            closed = time.monotonic()
            wait_until(lambda: not monitor.is_running() or monitor.status() == psutil.STATUS_ZOMBIE, STOP_WAIT + 20)
            assert STOP_WAIT - 1 < time.monotonic() - closed < STOP_WAIT + 10
            assert select.select([proc.stderr], [], [], 5)[0]
            assert proc.stderr.readline() == (f"gputui web: a session's monitor did not leave within {STOP_WAIT:g} s "
                                              f"of its tab closing; process {monitor.pid} was killed\n")
            async with client.ws_connect(websocket_url(url)) as tab:  # the place is free again
                assert b"H100" in await drawn(tab, HOST)


async def test_a_replay_and_the_many_host_view_go_to_the_browser_too(env, tmp_path):
    recording = tmp_path / "run.rec"
    recorded = gputui(env, *DEMO, "record", str(recording), "--duration", "3s", timeout=60)
    assert recorded.returncode == 0, recorded.stderr
    with serving_web(env, "replay", str(recording), "--web") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(websocket_url(url)) as websocket:
                assert HOST in await drawn(websocket, b"/3  x1")  # the replay's header: sample N of 3, speed x1
                (monitor,) = sessions_of(proc)
                assert monitor.cmdline()[3:7] == ["replay", str(recording), "--web", "--listen"]
                assert monitor.cmdline()[-1] == "--web-session"
    with serving(env, "--demo", "leaky", "serve", "--listen", "127.0.0.1:0") as (_, exporter):
        with serving_web(env, "--hosts", exporter, "web") as (proc, url):
            async with aiohttp.ClientSession() as client:
                async with client.ws_connect(websocket_url(url)) as websocket:
                    screen = await drawn(websocket, b"demo:leaky")  # the host's line: the exporter's demo
                    assert b"1 host" in screen and b"A100-SXM4-40GB" in screen


async def test_a_wrong_password_gets_no_websocket_and_starts_no_process(env, tmp_path):
    users = users_file(tmp_path)
    with serving_web(env, *DEMO, "web", "--basic-auth-file", str(users)) as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.get(url) as answer:
                assert answer.status == 401
                assert answer.headers["WWW-Authenticate"].startswith('Basic realm="gputui"')
            for auth in ({}, basic(password="correct horse!"), basic(user="bob")):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(websocket_url(url), headers=auth)
                assert refused.value.status == 401
                async with client.get(url + "static/js/textual.js", headers=auth) as answer:
                    assert answer.status == 401
            time.sleep(0.5)
            assert sessions_of(proc) == []
            async with client.ws_connect(websocket_url(url), headers=basic()) as websocket:
                assert HOST in await drawn(websocket, HOST)
                assert len(sessions_of(proc)) == 1


async def test_a_websocket_from_another_sites_page_is_refused(env):
    with serving_web(env, *DEMO, "web") as (proc, url):
        async with aiohttp.ClientSession() as client:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(websocket_url(url), origin="https://evil.example")
            assert refused.value.status == 403
            assert sessions_of(proc) == []
            own = url.rstrip("/")
            async with client.ws_connect(websocket_url(url), origin=own) as websocket:
                assert HOST in await drawn(websocket, HOST)


async def test_the_session_limit_holds_and_says_so(env):
    with serving_web(env, *DEMO, "web", "--max-sessions", "1", "--session-timeout", "45m") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(websocket_url(url)) as first:
                await drawn(first, HOST)
                async with client.get(url) as answer:
                    assert answer.status == 503
                    busy = await answer.text()
                assert "Every session is taken" in busy and "1 browser session at once" in busy
                assert "after 45 min without a key" in busy
                async with client.ws_connect(websocket_url(url)) as second:  # a page loaded before the limit
                    said = await closed_after(second)
                assert b"every session is taken (1 at once)" in said
                assert len(sessions_of(proc)) == 1
            wait_until(lambda: not sessions_of(proc))
            async with client.get(url) as answer:
                assert answer.status == 200


async def test_an_idle_session_is_closed_saying_why_and_a_busy_one_is_not(env):
    with serving_web(env, *DEMO, "web", "--session-timeout", "8s") as (proc, url):
        async with aiohttp.ClientSession() as client:
            started = time.monotonic()
            async with client.ws_connect(websocket_url(url)) as idle, client.ws_connect(websocket_url(url)) as busy:
                pressing = asyncio.ensure_future(press_every_second(busy, "g", 12))  # a key a second, from the start
                said = await closed_after(idle, 60)
                waited = time.monotonic() - started
                assert await pressing  # every key went through: the busy tab stayed open
                assert HOST in await drawn(busy, HOST)
                assert len(sessions_of(proc)) == 1
        assert HOST in said  # it was drawing, then idle
        assert b"this session was closed after 8 s without a key, a click or a resize" in said
        assert 8.0 <= waited < 40
        wait_until(lambda: not sessions_of(proc))


async def press_every_second(websocket: aiohttp.ClientWebSocketResponse, key: str, times: int) -> bool:
    for _ in range(times):
        await websocket.send_str(json.dumps(["stdin", key]))
        await asyncio.sleep(1.0)
    return not websocket.closed


async def test_what_a_browser_sends_is_bounded_and_nothing_odd_ends_a_session(env):
    with serving_web(env, *DEMO, "web") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(url.replace("http", "ws", 1) + "ws?width=99999999&height=x") as websocket:
                await drawn(websocket, HOST)
                for odd in ("not json", "{}", "[]", '["stdin", 5]', '["resize", {"width": 1e300, "height": -5}]',
                            '["resize", "big"]', '["ping", {}]', json.dumps(["unknown", "x"])):
                    await websocket.send_str(odd)
                await websocket.send_bytes(b"\x00" * 100)
                await websocket.send_str(json.dumps(["ping", "still there?"]))
                assert (await next_text(websocket)) == ["pong", "still there?"]
                assert len(sessions_of(proc)) == 1
                await websocket.send_str(json.dumps(["stdin", "x" * (1 << 17)]))  # over the limit: closed for it
                await closed_after(websocket)
                assert websocket.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
            wait_until(lambda: not sessions_of(proc))
            async with client.ws_connect(websocket_url(url)) as again:  # the server answers as before
                assert HOST in await drawn(again, HOST)


def test_sizes_from_the_browser_are_kept_within_bounds():
    assert _within("120", WIDTH, 80) == 120
    assert _within("99999999", WIDTH, 80) == WIDTH.stop - 1 == 500
    assert _within(-5, HEIGHT, 24) == HEIGHT.start
    assert [_within(v, WIDTH, 80) for v in ("x", None, 1e300, True, [1])] == [80] * 5


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed here (it makes the test's certificate)")
    where = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(where / "key.pem"),
                    "-out", str(where / "cert.pem")], check=True, capture_output=True, timeout=60)
    return where / "cert.pem", where / "key.pem"


async def test_tls_serves_the_page_and_the_websocket(env, certificate):
    cert, key = certificate
    trusted = ssl.create_default_context(cafile=str(cert))
    with serving_web(env, *DEMO, "web", "--tls-cert", str(cert), "--tls-key", str(key)) as (_, url):
        assert url.startswith("https://127.0.0.1:")
        async with aiohttp.ClientSession() as client:
            async with client.get(url, ssl=trusted) as answer:
                assert answer.status == 200
            async with client.ws_connect(url.replace("https", "wss", 1) + "ws", ssl=trusted) as websocket:
                assert HOST in await drawn(websocket, HOST)
            with pytest.raises(aiohttp.ClientError):
                await client.get(url.replace("https", "http", 1))  # no plain HTTP on it


async def test_sigterm_closes_every_tab_and_ends_every_session(env):
    with serving_web(env, *DEMO, "web") as (proc, url):
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(websocket_url(url)) as websocket:
                await drawn(websocket, HOST)
                monitor, = sessions_of(proc)
                proc.terminate()
                await closed_after(websocket)
                assert proc.wait(timeout=30) == 143
    wait_until(lambda: not monitor.is_running() or monitor.status() == "zombie", 10)
