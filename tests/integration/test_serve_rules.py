"""The Prometheus alerting rules (docs/grafana/gputui-rules.yml): they ask only for what ``gputui serve``
exports, promtool's unit tests of them pass, and end to end a real Prometheus scraping
``gputui --demo leaky serve`` fires the leak alert, which a real Alertmanager delivers to a webhook."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from exported_metrics import LABEL, METRIC, TARGET_LABELS, exported
from serve_helpers import fetch, free_port, serve_env, serving

RULES_DIR = Path(__file__).resolve().parents[2] / "docs" / "grafana"
RULES = RULES_DIR / "gputui-rules.yml"
RULE_TESTS = RULES_DIR / "gputui-rules.test.yml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
SEVERITIES = {"info", "warning", "critical"}
# Label lists of on(...), ignoring(...), by(...), without(...), group_left(...), group_right(...)
GROUPING = re.compile(r"\b(?:on|ignoring|by|without|group_left|group_right)\s*\(([^)]*)\)")
LEAKY_PID = "51200"  # the leaky demo's probed process


def has(binary: str) -> bool:
    return os.access(binary, os.X_OK)


@pytest.fixture(scope="module")
def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_every_rule_has_a_severity_a_for_and_says_what_it_is_about(rules):
    assert {rule["alert"] for rule in rules} >= {
        "GpuTrainingLeak", "GpuTrainingOomSoon", "GpuTrainingOutOfMemory", "GpuLost", "GpuEccUncorrectedErrors",
        "GpuMemoryHeldWhileIdle", "GpuBecameFree", "GpuJobStraggler", "GpuJobImbalance"}
    for rule in rules:
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert "$labels.instance" in rule["annotations"]["summary"], rule["alert"]


def test_every_metric_and_label_the_rules_ask_for_is_exported(rules):
    names = exported()
    every_label = set().union(*names.values()) | TARGET_LABELS
    asked = [(m.group(1), m.group(2) or "") for rule in rules for m in METRIC.finditer(rule["expr"])]
    assert len(asked) >= 15  # the parse found the expressions
    for name, selector in asked:
        assert name in names, f"the rules ask for {name}, which gputui serve does not export"
        assert set(LABEL.findall(selector)) <= names[name] | TARGET_LABELS, (name, selector)
    for rule in rules:
        for labels in GROUPING.findall(rule["expr"]):
            named = {label.strip() for label in labels.split(",") if label.strip()}
            assert named <= every_label, (rule["alert"], named - every_label)


def test_promtool_tests_every_rule(rules):
    """Each rule has a case in the unit tests (where it fires, beside series that must not)."""
    tested = {case["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert tested == {rule["alert"] for rule in rules}


@pytest.mark.skipif(not has(PROMTOOL), reason="no promtool (Debian: apt-get install prometheus)")
def test_the_rules_pass_promtools_unit_tests():
    checked = subprocess.run([PROMTOOL, "check", "rules", RULES.name], cwd=RULES_DIR, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([PROMTOOL, "test", "rules", RULE_TESTS.name], cwd=RULES_DIR, capture_output=True,
                            text=True, timeout=120)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


# ------------------------------------------------------------------------------------------- end to end

class Webhook:
    """A local Alertmanager webhook receiver: keeps every alert it is sent."""

    def __init__(self) -> None:
        self.alerts: list[dict] = []
        received = self.alerts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.extend(json.loads(body)["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def running(command: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """``command`` in the background, its output in ``log``; terminated afterwards."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out)
        try:
            yield process
        finally:
            process.terminate()
            process.wait(timeout=30)


def wait_for(check, deadline: float, process: subprocess.Popen, log: Path):
    """Polls ``check`` until it answers something true, while ``process`` runs, until ``deadline``."""
    while True:
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "timed out; " + log.read_text()
        try:
            found = check()
        except OSError:
            found = None  # not listening yet
        if found:
            return found
        time.sleep(0.3)


def quick_rules(tmp_path: Path) -> Path:
    """The shipped rules with every ``for:`` at 0 s, so that a test sees them fire within seconds."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


@pytest.mark.skipif(not has(PROMETHEUS), reason="no prometheus binary (Debian: apt-get install prometheus)")
@pytest.mark.skipif(not has(ALERTMANAGER),
                    reason="no alertmanager binary (Debian: apt-get install prometheus-alertmanager)")
def test_the_leak_alert_reaches_a_webhook_through_prometheus_and_alertmanager(tmp_path):
    deadline = time.monotonic() + 60
    webhook = Webhook()
    am_port, prom_port = free_port(), free_port()
    (tmp_path / "alertmanager.yml").write_text(
        "route: {receiver: hook, group_by: [alertname], group_wait: 1s, group_interval: 1s, repeat_interval: 1h}\n"
        f"receivers: [{{name: hook, webhook_configs: [{{url: '{webhook.url}'}}]}}]\n")
    am_log, prom_log = tmp_path / "alertmanager.log", tmp_path / "prometheus.log"
    try:
        with serving(serve_env(tmp_path), "--demo", "leaky", "serve", "--listen", "127.0.0.1:0",
                     "--interval", "1") as (_, url), \
                running([ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
                         f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                         "--cluster.listen-address=", "--log.level=warn"], am_log) as alertmanager:
            # Prometheus's first notification must find Alertmanager listening: the next is a minute later.
            wait_for(lambda: fetch(f"http://127.0.0.1:{am_port}/-/ready")[0] == 200, deadline, alertmanager, am_log)
            (tmp_path / "prometheus.yml").write_text(
                "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                f"rule_files: ['{quick_rules(tmp_path)}']\n"
                f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n"
                f"scrape_configs: [{{job_name: gputui, static_configs: [{{targets: ['{url.removeprefix('http://')}']}}]}}]\n")
            with running([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                          "--log.level=warn"], prom_log) as prometheus:
                def leak() -> dict | None:
                    return next((a for a in webhook.alerts if a["labels"]["alertname"] == "GpuTrainingLeak"), None)
                alert = wait_for(leak, deadline, prometheus, prom_log)
    finally:
        webhook.close()
    assert alert["status"] == "firing"
    labels = alert["labels"]
    assert {k: labels[k] for k in ("pid", "device", "category", "state", "severity", "job")} == {
        "pid": LEAKY_PID, "device": "cuda:0", "category": "activations", "state": "leak", "severity": "warning",
        "job": "gputui"}
    assert labels["uuid"].startswith("GPU-")
    assert alert["annotations"]["summary"] == f"Process {LEAKY_PID} on {url.removeprefix('http://')} leaks GPU " \
                                              "memory on cuda:0"
    assert "what grows: activations." in alert["annotations"]["description"]
