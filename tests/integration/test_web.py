"""``gputui web`` in a real browser: Debian's Chromium, driven by Playwright (its browser taken from the system:
nothing downloaded). The page shows the demo's GPUs and process table and asks nothing of another host; keys
change the screen (sort, tree); K in the page sends no signal to a real process the monitor lists; a wrong
password gets no websocket; the session limit holds, with a page that says so; docs/web.md's nginx block
serves it under a prefix.

Chromium runs without WebGL, so xterm.js draws the terminal's rows as text in the page (its DOM renderer):
what the tests read is what the browser shows, not what the server sent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT
from serve_helpers import free_port
from web_helpers import PASSWORD, USER, serve_env, serving_web, sessions_of, users_file, wait_until

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed: pip install playwright")

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason="Debian's chromium is not installed here: apt-get install -y chromium")

DEMO = ("--demo", "training-node")
# --no-sandbox: Chromium's sandbox refuses to start as root (CI runs as root); --disable-3d-apis: no WebGL, so
# xterm.js draws text the test can read.
ARGS = ["--no-sandbox", "--disable-3d-apis"]
FIRST_FRAME = 60.0  # seconds: a loaded 2-core machine starts a monitor in a few


@pytest.fixture(scope="module")
def browser():
    playwright = sync_api.sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()
    finally:
        playwright.stop()


@pytest.fixture
def env(tmp_path):
    return serve_env(tmp_path)


class Tab:
    """A browser tab on gputui web: what it shows, every request it made, what its console said."""

    def __init__(self, browser, url: str, credentials: tuple[str, str] | None = None) -> None:
        login = {"http_credentials": {"username": credentials[0], "password": credentials[1]}} if credentials else {}
        self.context = browser.new_context(viewport={"width": 1400, "height": 900}, **login)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.websockets: list[str] = []
        self.console: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("websocket", lambda websocket: self.websockets.append(websocket.url))
        self.page.on("console", lambda message: self.console.append(message.text))
        self.answer = self.page.goto(url)

    def text(self) -> str:
        """The terminal's rows as the page shows them."""
        rows = self.page.locator(".xterm-rows")
        return rows.inner_text() if rows.count() else ""

    def shows(self, *words: str, seconds: float = FIRST_FRAME) -> str:
        return wait_until(lambda: (lambda text: text if all(w in text for w in words) else "")(self.text()), seconds)

    def press(self, *keys: str) -> None:
        self.page.locator(".xterm-helper-textarea").focus()  # where a click on the terminal puts the keys
        for key in keys:
            self.page.keyboard.press(key)

    def close(self) -> None:
        self.context.close()


def sort_line(text: str) -> str:
    return re.search(r"PROCESSES\s+\d+\s+sort .*", text).group(0).strip()


def test_the_demo_shows_its_gpus_and_processes_and_keys_change_the_screen(env, browser):
    with serving_web(env, *DEMO, "web") as (proc, url):
        tab = Tab(browser, url)
        try:
            screen = tab.shows("dgx-sim-01", "PROCESSES", "train.py")
            assert screen.count("H100 80GB HBM3") == 8 and "48231" in screen and "sort GPU MEM" in sort_line(screen)
            tab.press("s")  # the next column
            assert tab.shows("sort TREND", seconds=30)
            tab.press("t")  # the process tree: the training processes under their shell
            tree = tab.shows("└─ -bash", seconds=30)
            assert "tree" in sort_line(tree) and "sshd" in tree
            assert len(sessions_of(proc)) == 1
        finally:
            tab.close()
    assert tab.requests and all(request.startswith(url) for request in tab.requests), tab.requests
    assert tab.websockets == [url.replace("http", "ws", 1) + f"ws?{tab.websockets[0].split('?')[1]}"]
    assert not [line for line in tab.console if "Content Security Policy" in line], tab.console


@pytest.fixture
def sleeper():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield child
    child.kill()
    child.wait()


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the simulated libnvidia-ml")
def test_k_in_the_page_sends_no_signal_to_a_real_process(env, browser, tmp_path, sleeper):
    """The monitor on a driver (the simulated libnvidia-ml, loaded as a real one is) that lists a real process:
    in a terminal, K then y would kill it; in the page, K says why not, and y and Enter do nothing."""
    from gputui.collect.sim import native
    from gputui.collect.sim.feed import listed_pids
    from gputui.collect.sim.library import Nvml
    from gputui.collect.sim.machine import SimulatedMachine

    machine = SimulatedMachine("training-node", processes=2, start=60.0)
    state = tmp_path / "state"
    native.write_state(state, native.state_text(Nvml(machine), pids={min(listed_pids(machine)): sleeper.pid}))
    env.update(LD_LIBRARY_PATH=str(native.build(tmp_path / "lib").parent), **{native.STATE_VARIABLE: str(state)})
    with serving_web(env, f"--pid={sleeper.pid}", "web") as (_, url):
        tab = Tab(browser, url)
        try:
            tab.shows(str(sleeper.pid), "PROCESSES  1")  # the only row: selected
            tab.press("K")
            said = tab.shows("is read-only: it sends no", seconds=30)
            tab.press("y", "Enter", "y")
            time.sleep(2.0)
            assert sleeper.poll() is None
            assert "Kill process" not in tab.text() and "Sent SIGKILL" not in tab.text()
        finally:
            tab.close()
    assert "(gputui web)" in said
    assert sleeper.poll() is None


def test_a_wrong_password_gets_no_websocket(env, browser, tmp_path):
    users = users_file(tmp_path)
    with serving_web(env, *DEMO, "web", "--basic-auth-file", str(users)) as (proc, url):
        wrong = Tab(browser, url, (USER, "not " + PASSWORD))
        try:
            assert wrong.answer.status == 401
            time.sleep(2.0)
            assert wrong.websockets == [] and wrong.text() == ""
            assert sessions_of(proc) == []
        finally:
            wrong.close()
        right = Tab(browser, url, (USER, PASSWORD))
        try:
            assert right.answer.status == 200
            assert "dgx-sim-01" in right.shows("dgx-sim-01", "PROCESSES")
            assert len(right.websockets) == 1 and len(sessions_of(proc)) == 1
        finally:
            right.close()


def test_the_session_limit_holds_and_the_page_says_so(env, browser):
    with serving_web(env, *DEMO, "web", "--max-sessions", "1") as (proc, url):
        first = Tab(browser, url)
        first.shows("dgx-sim-01", "PROCESSES")
        second = Tab(browser, url)
        try:
            assert second.answer.status == 503
            assert "Every session is taken" in second.page.locator("h1").inner_text()
            assert "1 browser session at once" in second.page.locator("body").inner_text()
            assert second.websockets == [] and len(sessions_of(proc)) == 1
            first.close()  # its tab closes: its session ends, and the place is free
            wait_until(lambda: not sessions_of(proc))
            second.answer = second.page.reload()
            assert second.answer.status == 200
            assert "dgx-sim-01" in second.shows("dgx-sim-01", "PROCESSES")
        finally:
            second.close()


def docs_nginx_block() -> str:
    """docs/web.md's nginx location block, as a reader copies it."""
    (block,) = re.findall(r"```nginx\n(.*?)```", (ROOT / "docs" / "web.md").read_text(), re.S)
    return block


@pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
                    reason="nginx is not installed here: apt-get install -y nginx-light")
def test_behind_nginx_as_docs_web_md_configures_it(env, browser, tmp_path):
    port = free_port()
    block = docs_nginx_block().replace("127.0.0.1:9404", f"127.0.0.1:{port}")
    proxy = free_port()
    (tmp_path / "nginx.conf").write_text(f"""
daemon off;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
events {{}}
http {{
    access_log off;
    client_body_temp_path {tmp_path}/body;
    proxy_temp_path {tmp_path}/proxy;
    fastcgi_temp_path {tmp_path}/fastcgi;
    uwsgi_temp_path {tmp_path}/uwsgi;
    scgi_temp_path {tmp_path}/scgi;
    server {{
        listen 127.0.0.1:{proxy};
        {block}
    }}
}}
""")
    nginx = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(tmp_path / "nginx.conf")],
                             stderr=subprocess.PIPE, text=True)
    try:
        with serving_web(env, *DEMO, "web", "--listen", f"127.0.0.1:{port}") as (proc, _):
            wait_until(lambda: Path(tmp_path / "nginx.pid").exists() or nginx.poll() is not None, 30)
            assert nginx.poll() is None, nginx.stderr.read()
            tab = Tab(browser, f"http://127.0.0.1:{proxy}/gpus")  # without its slash, as a reader types it
            try:
                assert tab.page.url == f"http://127.0.0.1:{proxy}/gpus/"
                assert "dgx-sim-01" in tab.shows("dgx-sim-01", "PROCESSES")
                assert len(sessions_of(proc)) == 1
            finally:
                tab.close()
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)
    assert tab.websockets[0].startswith(f"ws://127.0.0.1:{proxy}/gpus/ws?")
    assert all(request.startswith(f"http://127.0.0.1:{proxy}/gpus") for request in tab.requests), tab.requests
