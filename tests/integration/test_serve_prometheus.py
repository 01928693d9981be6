"""A real Prometheus scrapes ``gputui serve --demo training-node``: what its HTTP API answers equals what
``/snapshot`` (the ``gputui --json`` document) said of the same sample.

The demo moves every second, so the two are matched by the sample's time: Prometheus stores
``gputui_snapshot_timestamp_seconds`` with the other series of each scrape (a scrape is committed
whole), and the test keeps every document ``/snapshot`` served, by its ``taken_at``, and compares the
latest scrape whose sample it also read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse

import pytest
from serve_helpers import fetch, free_port, serve_env, serving

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
pytestmark = pytest.mark.skipif(
    not os.access(PROMETHEUS, os.X_OK),
    reason="no prometheus binary (Debian: apt-get install prometheus); this test scrapes gputui serve with it")
PID = "48231"  # the training-node demo's probed rank


@pytest.fixture
def env(tmp_path):
    return serve_env(tmp_path)


class Documents:
    """Every document /snapshot serves, by its snapshot's time, polled in a thread."""

    def __init__(self, url: str) -> None:
        self.url, self.found, self.done = url, {}, threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(0.2):
            document = json.loads(fetch(self.url + "/snapshot")[2])
            self.found[document["snapshot"]["taken_at"]] = document

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def query(api: str, promql: str, at: float) -> list[dict]:
    status, _, body = fetch(f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"}))
    answer = json.loads(body)
    assert status == 200 and answer["status"] == "success", answer
    return answer["data"]["result"]


def test_prometheus_stores_what_the_json_document_says(env, tmp_path):
    with serving(env, "--demo", "training-node", "serve", "--listen", "127.0.0.1:0", "--interval", "1") as (_, url):
        documents = Documents(url)
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: gputui\n    static_configs: [{{targets: ['{url.removeprefix('http://')}']}}]\n")
        log = open(tmp_path / "prometheus.log", "w")
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stdout=log, stderr=log)
        api = f"http://127.0.0.1:{port}"
        try:
            deadline, stamp = time.monotonic() + 90, []
            while not stamp:  # Prometheus starts, then scrapes every second
                running = time.monotonic() < deadline and prometheus.poll() is None
                assert running, (tmp_path / "prometheus.log").read_text()
                time.sleep(0.5)
                try:
                    stamp = query(api, "gputui_snapshot_timestamp_seconds", time.time())
                except OSError:
                    pass  # not listening yet
            time.sleep(2.5)  # a few more scrapes, and /snapshot polled around them
            # The latest scrape whose sample the poller also read (on a loaded machine it may miss a
            # sample), then one query at that scrape's instant: its series, all from one sample.
            scrapes = query(api, 'gputui_snapshot_timestamp_seconds{job="gputui"}[60s]', time.time())[0]["values"]
            seen = [at for at, taken_at in scrapes if float(taken_at) in documents.found]
            assert seen, f"no scraped sample was also read from /snapshot: {scrapes}, {sorted(documents.found)}"
            wanted = ("gputui_snapshot_timestamp_seconds", "gputui_device_memory_used_bytes",
                      "gputui_process_memory_bytes", "gputui_probe_memory_bytes")
            found = query(api, '{__name__=~"%s", job="gputui"}' % "|".join(wanted), seen[-1])
            assert query(api, 'up{job="gputui"}', time.time())[0]["value"][1] == "1"
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=30)
            log.close()
            documents.stop()

    def one(name: str, **labels: str) -> float:
        values = [float(r["value"][1]) for r in found
                  if r["metric"]["__name__"] == name and labels.items() <= r["metric"].items()]
        assert len(values) == 1, (name, labels, found)
        return values[0]

    taken_at = one("gputui_snapshot_timestamp_seconds")
    assert taken_at in documents.found, f"no /snapshot document of {taken_at}: {sorted(documents.found)}"
    document = documents.found[taken_at]
    snapshot = document["snapshot"]
    device = snapshot["devices"][0]
    assert one("gputui_device_memory_used_bytes", index="0", uuid=device["uuid"]) == device["memory_used"]
    rank = next(p for p in snapshot["processes"] if p["pid"] == int(PID))
    assert one("gputui_process_memory_bytes", pid=PID, index=str(rank["device_index"])) == rank["gpu_memory"]
    breakdown = next(b for b in document["breakdowns"] if b["pid"] == int(PID))
    assert len(breakdown["items"]) >= 8  # parameters ... context: the whole account
    for item in breakdown["items"]:
        assert one("gputui_probe_memory_bytes", pid=PID, device=breakdown["device"], category=item["key"]) == \
            item["size"], item["key"]
