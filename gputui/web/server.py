"""The browser view's web server (aiohttp): the page, Textual's web client, and a websocket per tab, each
relayed to a monitor process of its own by textual-serve's AppService.

With a users file, every request asks for basic auth first (the exporter's users and checks: serve/auth.py),
the websocket's handshake too, so a wrong password never starts a process. A websocket from a page of
another site is refused (a logged-in browser would send the password along). At most ``limit`` sessions run
at once; a newcomer past them gets a page (or, on a websocket, a line) that says so. A session the browser
sends nothing (no key, no click, no resize) for ``idle`` seconds is closed, saying why. What the browser
sends is bounded: a message's size, the terminal's size.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shlex
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from urllib.parse import urlsplit

import psutil
from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError
from textual_serve.app_service import AppService
from textual_serve.server import Server as TextualServe

from gputui import units
from gputui.serve.auth import Check, Users
from gputui.serve.server import BUSY, FIRST_BYTE_TIMEOUT, KEPT_PLACES, MAX_CONNECTIONS, REQUEST_TIMEOUT, Places
from gputui.web import page

# The client, its stylesheet and its font, as textual-serve ships them.
STATIC = resources.files("textual_serve") / "static"
HEARTBEAT = 15.0  # seconds between websocket pings: a tab gone without a word (a laptop shut) is noticed
MESSAGE_LIMIT = 1 << 16  # bytes: a key, a click, a resize, a paste
# The terminal a browser may ask for, in cells: a 4K screen at a small font is about 400 x 120; the monitor's
# screen is drawn at that size, so a crafted size must not make it draw millions of cells.
WIDTH, HEIGHT = range(10, 501), range(5, 201)
STOP_WAIT = 10.0  # seconds a session's monitor is given to leave once its tab is gone
# Threads that wait for a password check (each check waits at most serve/auth.py's CHECK_WAIT for a turn):
# guessers hold them, the event loop never. A check asked while all are taken is 503 at once: no queue of
# guesses builds up (a remembered password is answered on the loop, never here).
CHECKERS = 8
# What a request may be, as aiohttp's parser reads it (bigger: 400 or 431 at once, and the connection closed):
# a browser's request line and each header fit in 8 kB (cookies of other apps on this host included), and it
# sends some twenty headers. Held by each connection until its request is whole, so kept small.
LINE_LIMIT = FIELD_LIMIT = 8190
HEADERS_LIMIT = 32
BODY_LINGER = 1.0  # seconds a body nobody asked for is read and dropped after the answer, before the close
TAB_VARIABLE = "GPUTUI_WEB_TAB"  # in a tab's monitor's environment: which tab it is (monitor_of)
LEAVE_WAIT = 2.0  # seconds a new tab waits for a monitor whose tab has closed to be gone ("every session is taken")


class Sessions:
    """The browser sessions running (their websockets), at most ``limit``, and at most ``limit`` monitor
    processes alive: textual-serve's stop returns once a monitor's output has closed, before its process has
    gone, so a tab opened at that moment would make one more."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[web.WebSocketResponse] = set()

    @property
    def full(self) -> bool:
        return len(self.open) >= self.limit

    async def room(self) -> bool:
        """Whether a tab may start its monitor now, having waited up to LEAVE_WAIT for monitors leaving. True
        is answered with no wait after the last look, so the caller takes its place before another can."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEAVE_WAIT
        while not self.full:
            if monitors_alive() < self.limit:
                return True
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        return False

    async def close_all(self) -> None:
        """The server stops: every tab is told, and its monitor leaves."""
        for websocket in list(self.open):
            await websocket.close(code=1001, message=b"gputui web stopped")


def make_app(command: Sequence[str], title: str, *, users: Users | None = None, limit: int = 4,
             idle: float = 1800.0) -> web.Application:
    """The browser view: each tab runs ``command`` (gputui's, with --web-session) as a process of its own,
    behind ``users``' passwords where given."""
    sessions = Sessions(limit)
    # textual-serve's own server, for what it does with a session's file deliveries (the command palette's
    # screenshot, which the web driver hands to the browser): its download manager and its /download answer.
    deliveries = TextualServe(shlex.join(command))
    checks = ThreadPoolExecutor(CHECKERS, thread_name_prefix="gputui-web-auth")
    checking = 0  # checks handed to those threads and not answered yet
    idle_words = units.span(idle)

    @web.middleware
    async def ask_who(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        nonlocal checking
        if users is not None:
            header = request.headers.get("Authorization")
            if users.remembered(header):
                check = Check.ALLOWED
            elif checking >= CHECKERS:
                check = Check.BUSY
            else:
                checking += 1
                try:
                    check = await asyncio.get_running_loop().run_in_executor(checks, users.check, header)
                finally:
                    checking -= 1
            if check is Check.BUSY:
                return _text(503, "gputui: too many passwords being checked; try again\n", {"Retry-After": "1"})
            if check is not Check.ALLOWED:
                return _text(401, "gputui: user name and password, please\n",
                             {"WWW-Authenticate": 'Basic realm="gputui", charset="UTF-8"'})
        return await handler(request)

    async def tab(request: web.Request) -> web.Response:
        if sessions.full:
            return web.Response(status=503, text=page.busy(title, limit, idle_words), content_type="text/html",
                                headers={**page.SECURITY, "Retry-After": "30"})
        size = _number(request.query.get("fontsize"), page.FONT_SIZE)
        return web.Response(text=page.page(title, size), content_type="text/html", headers=page.SECURITY)

    async def session(request: web.Request) -> web.StreamResponse:
        if not _same_site(request):
            return _text(403, "gputui: this websocket is for gputui's own page\n")
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT, max_msg_size=MESSAGE_LIMIT)
        await websocket.prepare(request)
        if not await sessions.room():
            await _say(websocket, f"gputui web: every session is taken ({limit} at once); try again when one "
                                  "closes.")
            await websocket.close()
            return websocket
        sessions.open.add(websocket)
        try:
            await Session(websocket, command, deliveries).run(
                _within(request.query.get("width"), WIDTH, 80), _within(request.query.get("height"), HEIGHT, 24),
                idle, idle_words)
        finally:
            sessions.open.discard(websocket)
        return websocket

    async def stopping(app: web.Application) -> None:
        await sessions.close_all()

    async def stopped(app: web.Application) -> None:
        checks.shutdown(wait=False)

    app = web.Application(middlewares=[ask_who])
    app.add_routes([
        web.get("/", tab),
        web.get("/ws", session),
        web.get("/download/{key}", deliveries.handle_download),
        web.static("/static", str(STATIC)),
    ])
    app.on_shutdown.append(stopping)
    app.on_cleanup.append(stopped)
    app["sessions"] = sessions  # for tests and the benchmark: the sessions running
    return app


def serve(app: web.Application, listening: socket.socket, tls: ssl.SSLContext | None,
          ready: Callable[[], None]) -> int:
    """Serve ``app`` on the socket ``listening`` (``ready`` once it answers) until SIGINT or SIGTERM; every
    session is closed before the return (128 + the signal's number, as the signal's default would say)."""
    return asyncio.run(_serve(app, listening, tls, ready))


class NotTheClientsMistakes(logging.Filter):
    """aiohttp logs every request it refuses as malformed (400: a line or header too long, too many
    headers) with its traceback: anyone could fill the server's log with them, eleven lines a request. Those
    are answered and forgotten; an error of the server's own is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HttpProcessingError))


def _request_logger() -> logging.Logger:
    """The logger gputui web's requests are logged through: aiohttp's own, less the clients' mistakes."""
    logger = logging.getLogger("gputui.web.requests")
    if not logger.filters:
        logger.addFilter(NotTheClientsMistakes())
    return logger


async def _serve(app: web.Application, listening: socket.socket, tls: ssl.SSLContext | None,
                 ready: Callable[[], None]) -> int:
    # keepalive_timeout: aiohttp's keep-alive timer starts with the connection (or the last answer on it) and
    # bytes trickling in do not restart it, so serve's REQUEST_TIMEOUT there is a deadline for the whole request.
    runner = web.AppRunner(app, handle_signals=False, access_log=None,  # Ctrl-C is ours; no log per request
                           logger=_request_logger(),
                           keepalive_timeout=REQUEST_TIMEOUT, max_line_size=LINE_LIMIT, max_field_size=FIELD_LIMIT,
                           max_headers=HEADERS_LIMIT, lingering_time=BODY_LINGER, shutdown_timeout=STOP_WAIT)
    await runner.setup()
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[int] = loop.create_future()

    def stop_on(signum: int) -> None:
        if not stop.done():
            stop.set_result(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_on, signum)
    assert runner.server is not None  # set up above
    door = Door(runner.server, tls)
    accepting = asyncio.create_task(door.accept(listening))
    try:
        ready()
        return 128 + await stop
    finally:
        accepting.cancel()
        await runner.cleanup()  # the sessions' tabs told, their monitors gone


class Door:
    """Where connections come in, in front of aiohttp: at most serve's MAX_CONNECTIONS (Places, as the exporter
    keeps them), a newcomer taking the place of the oldest connection that has sent nothing yet, and a connection
    silent for FIRST_BYTE_TIMEOUT dropped. Past the open-file limit aiohttp's own accept would fail and stall."""

    def __init__(self, server: web.Server, tls: ssl.SSLContext | None) -> None:
        self.server = server
        self.tls = tls
        self.places = Places(MAX_CONNECTIONS, KEPT_PLACES)
        self._coming: set[asyncio.Task[None]] = set()  # TLS handshakes under way (held: tasks are weakly kept)

    async def accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        listening.setblocking(False)
        while True:
            try:
                connection, _ = await loop.sock_accept(listening)
            except OSError:  # out of files or memory: what is held ends within seconds; the kernel queues meanwhile
                await asyncio.sleep(0.1)
                continue
            if self.places.take(connection) is None:
                self._turn_away(connection)
                continue
            self.places.mark(connection, True)  # nothing come yet: a newcomer may push it out
            task = asyncio.create_task(self._serve(connection))
            self._coming.add(task)
            task.add_done_callback(self._coming.discard)

    async def _serve(self, connection: socket.socket) -> None:
        """``connection`` handed to aiohttp (after TLS's handshake, within REQUEST_TIMEOUT)."""
        loop = asyncio.get_running_loop()
        handshake = REQUEST_TIMEOUT if self.tls else None
        try:
            await loop.connect_accepted_socket(lambda: Placed(self.server(), self.places, connection), connection,
                                               ssl=self.tls, ssl_handshake_timeout=handshake)
        except (OSError, asyncio.TimeoutError):  # TLS's handshake failed or never came: its client's trouble
            self.places.give_back(connection)
            connection.close()

    def _turn_away(self, connection: socket.socket) -> None:
        """Every place is serving a request or a session: 503 (in the clear only) and close, without waiting."""
        if self.tls is None:
            try:
                connection.setblocking(False)
                connection.send(BUSY)
            except OSError:
                pass
        connection.close()


# Bytes read from a connection at a time. asyncio reads up to 256 KiB a call into a new bytes object: twenty
# giant requests had the server allocate tens of such buffers at once, and the allocator kept that peak (the
# server grew 48 MB and stayed there). Read into one small buffer instead, its bytes passed on as read: a key,
# a click or a request's headers fit, a longer message arrives in pieces, as over a slow network.
READ_SIZE = 16 * 1024
_read_buffer = memoryview(bytearray(READ_SIZE))  # one for all connections: each read is passed on before the next


class Placed(asyncio.BufferedProtocol):
    """aiohttp's protocol for one connection, in one of the Door's places: dropped when no byte comes within
    FIRST_BYTE_TIMEOUT, no longer to be pushed out once one has (its request, its session's websocket, is served),
    its place given back when it ends. Reads READ_SIZE bytes at most at a time."""

    def __init__(self, handler: asyncio.Protocol, places: Places, connection: socket.socket) -> None:
        self.handler = handler
        self.places = places
        self.connection = connection
        self.silence: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.silence = asyncio.get_running_loop().call_later(FIRST_BYTE_TIMEOUT, transport.close)
        self.handler.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.silence is not None:
            self.silence.cancel()
            self.silence = None
            self.places.mark(self.connection, False)
        self.handler.data_received(bytes(_read_buffer[:nbytes]))

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.silence is not None:
            self.silence.cancel()
        self.places.give_back(self.connection)
        self.handler.connection_lost(exc)


class Session:
    """One tab: its monitor process (textual-serve's AppService), what the browser sends relayed to it, and
    the reason it was closed, said in the tab's terminal once the monitor has left it."""

    def __init__(self, websocket: web.WebSocketResponse, command: Sequence[str], deliveries: TextualServe) -> None:
        self.websocket = websocket
        self.reason: str | None = None
        # Which of the server's children is this tab's monitor: textual-serve keeps its process to itself.
        self.tab = secrets.token_hex(8)
        # exec: the monitor is the shell's process itself, so it is the server's child (and dies with it).
        self.service = AppService(f"exec env {TAB_VARIABLE}={self.tab} " + shlex.join(command),
                                  write_bytes=websocket.send_bytes, write_str=websocket.send_str, close=self.close,
                                  download_manager=deliveries.download_manager)

    async def run(self, width: int, height: int, idle: float, idle_words: str) -> None:
        try:
            await self.service.start(width, height)
        except OSError as exc:  # no process to be had (out of memory, of pids)
            self.reason = f"gputui web: the monitor could not start: {exc.strerror or exc}"
            await self.close()
            return
        try:
            if not await self.relay(idle):
                self.reason = (f"gputui web: this session was closed after {idle_words} without a key, a click or "
                               "a resize.")
        finally:
            await self.stop()
            await self.close()

    async def stop(self) -> None:
        """Ask the monitor to quit, and kill it if it is still there STOP_WAIT later: hung or stopped, it would
        hold a session's place for the server's life. (textual-serve's stop returns at once when the tab has
        gone first, the monitor's quit not yet seen to.)"""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_WAIT
        try:
            await asyncio.wait_for(self.service.stop(), STOP_WAIT)
        except asyncio.TimeoutError:
            pass
        monitor = monitor_of(self.tab)
        while monitor is not None and _alive(monitor) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        if monitor is not None and _alive(monitor):
            try:
                monitor.kill()
            except psutil.Error:  # gone meanwhile
                return
            print(f"gputui web: a session's monitor did not leave within {STOP_WAIT:g} s of its tab closing; "
                  f"process {monitor.pid} was killed", file=sys.stderr, flush=True)

    async def relay(self, idle: float) -> bool:
        """Hand what the browser sends to the monitor until the tab goes (True), or until it has sent nothing
        for ``idle`` seconds (False)."""
        websocket, service = self.websocket, self.service
        while True:
            try:
                message = await websocket.receive(timeout=idle)
            except asyncio.TimeoutError:
                return False
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return True
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *values = json.loads(message.data)
            except (ValueError, TypeError):
                continue  # not the client's: nothing to relay
            value = values[0] if values else None
            if kind == "stdin" and isinstance(value, str):
                await service.send_bytes(value.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(value, dict):
                await service.set_terminal_size(_within(value.get("width"), WIDTH, 80),
                                                _within(value.get("height"), HEIGHT, 24))
            elif kind == "ping" and isinstance(value, str):
                await websocket.send_json(["pong", value[:32]])
            elif kind == "focus":
                await service.focus()
            elif kind == "blur":
                await service.blur()

    async def close(self) -> None:
        """The monitor has left (or never came): the reason, where there is one, then the websocket's end."""
        if self.websocket.closed:
            return
        if self.reason is not None:
            await _say(self.websocket, self.reason)
            self.reason = None
        await self.websocket.close()


# Out of the alternate screen the monitor drew on (Textual's web driver leaves it as it was), onto a clear one:
# a session's last picture is not left standing as if it were live.
CLEAR = "\x1b[?1049l\x1b[2J\x1b[H"


def monitors_alive() -> int:
    """This server's monitor processes still running (its only child processes: one a tab), those whose tab
    has just closed included."""
    return sum(map(_alive, psutil.Process().children()))


def monitor_of(tab: str) -> psutil.Process | None:
    """The server's child that is tab ``tab``'s monitor (its TAB_VARIABLE says so), or None once it has gone."""
    for child in psutil.Process().children():
        try:
            if child.environ().get(TAB_VARIABLE) == tab:
                return child
        except psutil.Error:  # gone meanwhile
            pass
    return None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _say(websocket: web.WebSocketResponse, line: str) -> None:
    """A line alone in the tab's terminal, in bold."""
    try:
        await websocket.send_bytes(f"{CLEAR}\x1b[1m{line}\x1b[0m\r\n".encode())
    except ConnectionError:
        pass  # the tab is gone already


def _same_site(request: web.Request) -> bool:
    """Whether a websocket comes from a page of this server (its Origin names the host the browser asked),
    or from a program that sends no Origin (browsers always send one)."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc.lower() == request.host.lower()


def _number(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _within(value: object, allowed: range, default: int) -> int:
    """A size the browser sent (text or a number), kept within ``allowed``; ``default`` where it is none."""
    number = _number(value, default) if isinstance(value, str) else value
    if not isinstance(number, int) or isinstance(number, bool):
        return default
    return min(max(number, allowed.start), allowed.stop - 1)


def _text(status: int, body: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=body, headers=headers)

