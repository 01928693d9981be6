"""Alert delivery (gputui/alerts/delivery.py): a real command gets the JSON on stdin and the GPUTUI_ALERT_*
variables; a local HTTP server gets the json, slack and ntfy bodies; a hanging or failing receiver is
bounded and reported and never holds up the caller; grouping, the rate limit and the bounded queue."""

import json
import os
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from alert_receivers import received, recording_receiver

from gputui.alerts import delivery
from gputui.alerts.delivery import Channel, Delivery, command_channel
from gputui.alerts.webhook import webhook_channel
from gputui.model.alert import Alert, AlertEvent
from gputui.untrusted import MARK_ROOM

LEAK = Alert("leak", "pid 51200@1.0", "warning", "process 51200 leaks activations",
             "leak: 48.0 MiB a step, kept at train.py:131 in main", pid=51200)
LOST = Alert("gpu_lost", "gpu GPU-1", "critical", "GPU 1 is lost", "GPU is lost", gpu="GPU-1")


def started(alert, at=100.0):
    return AlertEvent("started", alert, at)


class Reports:
    def __init__(self):
        self.lines = queue.Queue()

    def __call__(self, text):
        self.lines.put(text)

    def next(self, timeout=10.0):
        return self.lines.get(timeout=timeout)


def test_a_command_gets_the_alerts_as_json_on_stdin_and_the_first_in_its_environment(tmp_path):
    out = tmp_path / "got"
    script = tmp_path / "receiver.sh"
    script.write_text(f'#!/bin/sh\ncat > {out}.json\nenv | grep ^GPUTUI_ALERT_ | sort > {out}.env\n')
    script.chmod(0o755)
    channel = Channel("command", command_channel(str(script)), Reports())
    channel.put([started(LEAK), started(LOST)])
    channel.close(wait=10)
    document = json.loads((tmp_path / "got.json").read_text())
    assert [(e["change"], e["alert"]["kind"], e["alert"]["title"]) for e in document["events"]] == [
        ("started", "leak", "process 51200 leaks activations"), ("started", "gpu_lost", "GPU 1 is lost")]
    assert document["events"][0]["alert"]["detail"] == "leak: 48.0 MiB a step, kept at train.py:131 in main"
    assert (tmp_path / "got.env").read_text().splitlines() == [
        "GPUTUI_ALERT_CHANGE=started", "GPUTUI_ALERT_COUNT=2", "GPUTUI_ALERT_KEY=pid 51200@1.0",
        "GPUTUI_ALERT_KIND=leak", "GPUTUI_ALERT_SEVERITY=warning",
        "GPUTUI_ALERT_TITLE=process 51200 leaks activations"]


def test_a_hanging_command_is_killed_at_its_timeout_and_reported_without_holding_up_the_caller():
    reports = Reports()
    channel = Channel("command", command_channel("sleep 30", timeout=0.5), reports)
    began = time.monotonic()
    channel.put([started(LEAK)])
    assert time.monotonic() - began < 0.1  # the sampler's call returns at once
    assert reports.next() == "command: alert command still running after 0.5 s; killed"
    assert time.monotonic() - began < 5
    channel.close(wait=5)


def test_a_failing_command_is_reported_with_what_it_said():
    reports = Reports()
    channel = Channel("command", command_channel("echo 'no such channel' >&2; exit 3"), reports)
    channel.put([started(LEAK)])
    assert reports.next() == "command: alert command exited 3: no such channel"
    channel.close(wait=5)


class Receiver(BaseHTTPRequestHandler):
    got: "queue.Queue" = queue.Queue()
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.got.put((dict(self.headers), body))
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    Receiver.got, Receiver.status = queue.Queue(), 200
    httpd = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def post(server, form):
    channel = Channel("webhook", webhook_channel(f"http://127.0.0.1:{server.server_port}/hook", form), Reports())
    channel.put([started(LEAK)])
    headers, body = Receiver.got.get(timeout=10)
    channel.close(wait=5)
    return headers, body


def test_a_webhook_gets_the_json_document(server):
    headers, body = post(server, "json")
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["events"][0]["alert"]["pid"] == 51200


def test_a_slack_webhook_gets_one_line_per_alert(server):
    _, body = post(server, "slack")
    assert json.loads(body) == {
        "text": "[warning] process 51200 leaks activations: leak: 48.0 MiB a step, kept at train.py:131 in main"}


def test_an_ntfy_webhook_gets_the_text_with_a_title_and_a_priority(server):
    headers, body = post(server, "ntfy")
    assert headers["Priority"] == "high"
    assert headers["Title"].endswith(": process 51200 leaks activations")
    assert body.decode() == ("[warning] process 51200 leaks activations: "
                             "leak: 48.0 MiB a step, kept at train.py:131 in main")


def test_a_failing_or_unreachable_webhook_is_reported(server):
    Receiver.status = 500
    reports = Reports()
    channel = Channel("webhook", webhook_channel(f"http://127.0.0.1:{server.server_port}/hook"), reports)
    channel.put([started(LEAK)])
    assert reports.next() == "webhook: alert webhook answered 500 Internal Server Error"
    channel.close(wait=5)
    gone = Channel("webhook", webhook_channel("http://127.0.0.1:9/hook", timeout=2), reports)
    gone.put([started(LEAK)])
    assert reports.next().startswith("webhook: alert webhook unreachable: ")
    gone.close(wait=5)


class Recording:
    def __init__(self, hold=None):
        self.deliveries = queue.Queue()
        self.hold = hold

    def __call__(self, d: Delivery):
        if self.hold is not None:
            self.hold.wait(10)
        self.deliveries.put(d)


def test_over_the_rate_limit_alerts_wait_and_go_together_in_the_next_delivery():
    now = [1000.0]
    sent = Recording()
    channel = Channel("test", sent, Reports(), per_minute=1, clock=lambda: now[0])
    channel.put([started(LEAK)])
    first = sent.deliveries.get(timeout=5)
    now[0] = 1059.7  # 0.3 s of the minute left: the next two wait for it, and go as one
    channel.put([started(LOST)])
    channel.put([AlertEvent("ended", LEAK, 160.0)])
    with pytest.raises(queue.Empty):
        sent.deliveries.get(timeout=0.1)
    now[0] = 1060.5
    second = sent.deliveries.get(timeout=5)
    assert [e.alert.kind for e in first.events] == ["leak"]
    assert [(e.change, e.alert.kind) for e in second.events] == [("started", "gpu_lost"), ("ended", "leak")]
    channel.close(wait=5)


def test_a_slow_receiver_keeps_the_newest_alerts_and_says_how_many_were_dropped(monkeypatch):
    monkeypatch.setattr(delivery, "QUEUE", 3)
    hold = threading.Event()
    sent = Recording(hold)
    channel = Channel("test", sent, Reports(), per_minute=100)
    channel.put([started(LEAK)])  # taken at once; the receiver holds it
    time.sleep(0.2)
    channel.put([AlertEvent("started", LOST, float(t)) for t in range(5)])
    hold.set()
    sent.deliveries.get(timeout=5)
    later = sent.deliveries.get(timeout=5)
    assert [e.at for e in later.events] == [2.0, 3.0, 4.0]
    assert later.dropped == 2
    assert later.text().endswith("(2 older alerts dropped: the receiver was too slow)")
    channel.close(wait=5)


def test_closing_kills_a_command_still_running_so_none_outlives_the_monitor(tmp_path):
    pid_file = tmp_path / "pid"
    channel = Channel("command", command_channel(f"sleep 30 & echo $! > {pid_file}; wait", timeout=60), Reports())
    channel.put([started(LEAK)])
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    sleeper = int(pid_file.read_text())
    channel.close(wait=0.2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{sleeper}") and \
            open(f"/proc/{sleeper}/stat").read().split()[2] != "Z":
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{sleeper}") or open(f"/proc/{sleeper}/stat").read().split()[2] == "Z"


# Linux refuses to start a program with any one argument or environment string over 128 KiB
# (MAX_ARG_STRLEN): a title quoting a 128 KiB argv[0] once made every --alert-command run fail.
HUGE = "x" * 131_100
RAW_KEY = f"job torchelastic \x1b]0;owned\x07\nrun-{HUGE} pid 7"


def until(check, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_huge_title_and_key_are_cut_in_the_environment_and_whole_on_stdin(tmp_path):
    straggler = Alert("straggler", RAW_KEY, "warning", f"rank 1 of {HUGE} (torchelastic) lags the others",
                      "step time 0.3 against 0.05", pid=7, job=f"torchelastic {HUGE}")
    free = Alert("gpu_free", "gpu GPU-2", "info", "GPU 2 is free", "80.0 GiB free, no process on it", gpu="GPU-2")
    reports = Reports()
    channel = Channel("command", command_channel(str(recording_receiver(tmp_path))), reports)
    channel.put([started(straggler), started(free)])  # one sample's: one delivery, the huge alert first
    until(lambda: (tmp_path / "got" / "0" / "COUNT").exists() or not reports.lines.empty())
    channel.put([started(LOST)])  # a later sample's
    channel.close(wait=10)
    assert list(reports.lines.queue) == []
    got = received(tmp_path)
    assert len(got) == 2
    variables, document = got[0]
    assert len(variables["TITLE"]) <= delivery.ENV_VALUE
    assert variables["TITLE"].startswith("rank 1 of xxxx")
    assert variables["TITLE"].endswith(f"...(cut {len(straggler.title) - (delivery.ENV_VALUE - MARK_ROOM)} characters)")
    assert len(variables["KEY"]) <= delivery.ENV_VALUE
    assert variables["KEY"].startswith("job torchelastic \\x1b]0;owned\\x07\\nrun-xxxx")  # made visible
    assert variables["COUNT"] == "2"
    assert [(e["alert"]["kind"], e["alert"]["title"], e["alert"]["key"]) for e in document["events"]] == [
        ("straggler", straggler.title, RAW_KEY), ("gpu_free", "GPU 2 is free", "gpu GPU-2")]  # whole, as it came
    assert got[1][0]["TITLE"] == "GPU 1 is lost"


def test_the_alert_key_is_made_visible_in_the_environment(tmp_path):
    alert = Alert("straggler", "job torchelastic \x1b]2;title\x07\nrm -rf ~ pid 7", "warning",
                  "rank 1 of train.py (torchelastic) lags the others", pid=7)
    channel = Channel("command", command_channel(str(recording_receiver(tmp_path))), Reports())
    channel.put([started(alert)])
    channel.close(wait=10)
    [(variables, document)] = received(tmp_path)
    assert variables["KEY"] == "job torchelastic \\x1b]2;title\\x07\\nrm -rf ~ pid 7"
    assert document["events"][0]["alert"]["key"] == "job torchelastic \x1b]2;title\x07\nrm -rf ~ pid 7"
