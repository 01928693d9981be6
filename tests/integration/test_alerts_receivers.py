"""Webhooks against receivers as they are out there (gputui/alerts/webhook.py): a real TLS server, with a
certificate the test makes with the `openssl` command, that refuses headers past 8 KiB as nginx does
(431), and one that trickles its answer a byte at a time, which no per-read timeout ever trips."""

import http.client
import queue
import shutil
import socket
import ssl
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gputui.alerts import webhook
from gputui.alerts.delivery import Channel
from gputui.alerts.webhook import webhook_channel
from gputui.model.alert import Alert, AlertEvent
from gputui.untrusted import MARK_ROOM

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

HEADERS_MOST = 8 * 1024  # nginx's default (large_client_header_buffers 4 8k): many servers allow less
NAME = "j" * 100_000  # a job name as long as a command line may make it
HUGE = Alert("imbalance", "job launcher 42", "warning", f"rank 1 of {NAME} (torchrun) holds 3.0x the others' memory",
             "30.0 GiB against 10.0 GiB", pid=42, job="launcher 42")
LOST = Alert("gpu_lost", "gpu GPU-1", "critical", "GPU 1 is lost", "GPU is lost", gpu="GPU-1")
TRICKLE = 0.5  # seconds between the trickling receiver's bytes: well under the webhook's per-read timeout


def started(alert):
    return AlertEvent("started", alert, 100.0)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


class Receiver(BaseHTTPRequestHandler):
    """Keeps what it is sent; refuses headers over HEADERS_MOST with 431; in the server's trickling mode,
    answers one byte every TRICKLE seconds, for a minute, and notes when the client hung up."""

    def do_POST(self):
        if sum(len(k) + len(v) + 4 for k, v in self.headers.items()) > HEADERS_MOST:
            self.send_error(431)
            return
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.got.put((dict(self.headers), body))
        if not self.server.trickling:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200
        try:
            for i in range(len(answer)):
                self.wfile.write(answer[i:i + 1])
                self.wfile.flush()
                time.sleep(TRICKLE)
        except OSError:
            self.server.hung_up.put(time.monotonic())

    def log_message(self, *args):
        pass


@contextmanager
def serving(certificate, monkeypatch, tls=True):
    """An https server on 127.0.0.1 with ``certificate``, which the webhook is told to trust as it is told
    any CA (SSL_CERT_FILE): it still verifies the server as it always does. ``tls=False``: plain http."""
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    httpd.daemon_threads = True
    httpd.got, httpd.hung_up, httpd.trickling = queue.Queue(), queue.Queue(), False
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd, f"{'https' if tls else 'http'}://127.0.0.1:{httpd.server_port}/hook"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server(certificate, monkeypatch):
    with serving(certificate, monkeypatch) as served:
        yield served


class Reports:
    def __init__(self):
        self.lines = queue.Queue()

    def __call__(self, text):
        self.lines.put(text)


def test_the_receiver_is_verified_tls_and_refuses_large_headers_as_servers_do(server, monkeypatch):
    httpd, url = server
    with monkeypatch.context() as without:
        without.delenv("SSL_CERT_FILE")
        untrusting = ssl.create_default_context()  # the system's CAs only
    with pytest.raises(ssl.SSLCertVerificationError), \
            socket.create_connection(("127.0.0.1", httpd.server_port)) as raw:
        untrusting.wrap_socket(raw, server_hostname="127.0.0.1")
    connection = http.client.HTTPSConnection("127.0.0.1", httpd.server_port, context=ssl.create_default_context())
    connection.request("POST", "/hook", body=b"{}", headers={"Title": "t" * HEADERS_MOST})
    assert connection.getresponse().status == 431
    connection.close()


def test_an_ntfy_title_quoting_a_huge_job_name_is_cut_to_fit_the_receivers_header_limit(server):
    httpd, url = server
    reports = Reports()
    channel = Channel("webhook", webhook_channel(url, "ntfy"), reports)
    channel.put([started(HUGE)])
    try:
        headers, body = httpd.got.get(timeout=10)
    except queue.Empty:
        pytest.fail(f"not delivered: {list(reports.lines.queue)}")
    channel.close(wait=5)
    assert list(reports.lines.queue) == []
    title = headers["Title"]
    assert len(title) <= webhook.HEADER_VALUE
    assert title.startswith(f"gputui on {socket.gethostname()}: rank 1 of jjjj")
    whole = len(f'gputui on {socket.gethostname()}: ') + len(HUGE.title)
    assert title.endswith(f"...(cut {whole - (webhook.HEADER_VALUE - MARK_ROOM)} characters)")
    assert body.decode().startswith(f"[warning] {HUGE.title}: 30.0 GiB")  # the whole text is in the body


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_a_trickling_webhook_is_cut_off_at_its_deadline_and_the_channel_goes_on(certificate, monkeypatch, tls):
    with serving(certificate, monkeypatch, tls) as (httpd, url):
        cut_off_and_on(httpd, url)


def cut_off_and_on(httpd, url):
    """A delivery to ``httpd`` trickling is reported at the webhook's deadline, its connection closed; the
    next delivery goes through. (Over plain http, the answer cut short looks complete to urllib.)"""
    httpd.trickling = True
    reports = Reports()
    channel = Channel("webhook", webhook_channel(url, "json", timeout=2.0), reports)
    began = time.monotonic()
    channel.put([started(LOST)])
    try:
        said = reports.lines.get(timeout=8)
    except queue.Empty:
        pytest.fail("a receiver trickling a byte every 0.5 s still held the channel after 8 s, unreported")
    took = time.monotonic() - began
    assert said == "webhook: alert webhook not done after 2 s; cut off"
    assert 2.0 <= took < 4.0
    assert httpd.hung_up.get(timeout=2 * TRICKLE + 2) - began < took + 2 * TRICKLE + 1  # its connection closed
    httpd.trickling = False
    httpd.got.get(timeout=5)  # (the first delivery's request)
    channel.put([started(HUGE)])
    headers, body = httpd.got.get(timeout=10)  # the next delivery goes through
    assert headers["Content-Type"] == "application/json" and NAME in body.decode()
    channel.close(wait=5)
    assert list(reports.lines.queue) == []
