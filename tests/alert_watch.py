"""A job that keeps its losses (examples/loops.py total_loss) under `gputui run`, watched by
`gputui --watch 1 --alert-command`: the one run that tests/integration/test_alerts_real.py times on the CPU and
bench/validate_gpu_jobs.py on CUDA."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class AlertRun:
    """What the watch saw: when the job's probe could be found and the first alert came (seconds after
    the job started; None: not within the time given), the first alert document, the watch's stderr."""

    probe_found: float | None = None
    alerted: float | None = None
    first: dict | None = None
    watch_stderr: str = ""
    job_stderr: str = ""


def stop(child: subprocess.Popen, group: bool = False) -> None:
    """Ctrl-C, then SIGKILL after 20 s; ``group``: to the child's whole process group (a job started in
    a session of its own), so that the leaking job under `gputui run` never outlives its caller, whatever
    stops it (a loaded machine once kept it alive for 15 minutes, growing to 23 GB)."""
    def send(signum: int) -> None:
        try:
            os.killpg(child.pid, signum) if group else child.send_signal(signum)
        except ProcessLookupError:
            pass

    if child.poll() is None or group:
        send(signal.SIGINT)
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        send(signal.SIGKILL)
        child.wait(timeout=10)


def watch_a_leaking_job(env: dict, folder: Path, within: float, device: str = "cpu") -> AlertRun:
    """Start the job in ``env`` (its GPUTUI_PROBE_DIR must exist), then the watch once the job's probe
    can be found (without a driver the watch finds processes through their probes); wait up to
    ``within`` seconds from the job's start for the receiver to be sent an alert. Both are stopped."""
    got = folder / "got.ndjson"
    receiver = folder / "receiver.sh"
    receiver.write_text(f"#!/bin/sh\n{{ cat; echo; }} >> {got}\n")
    receiver.chmod(0o755)
    run = AlertRun()
    began = time.monotonic()
    job = subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable,
                            str(ROOT / "examples" / "loops.py"), "total_loss", "--steps", "100000000",
                            "--device", device], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    watch = None
    try:
        while not any(Path(env["GPUTUI_PROBE_DIR"]).iterdir()) and time.monotonic() - began < within:
            time.sleep(0.2)
        run.probe_found = time.monotonic() - began
        watch = subprocess.Popen([sys.executable, "-m", "gputui", "--watch", "1", "--alert-command", str(receiver)],
                                 env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while not got.exists() and time.monotonic() - began < within:
            time.sleep(0.2)
        if got.exists():
            run.alerted = time.monotonic() - began
            time.sleep(0.5)  # (the receiver's whole document)
            run.first = json.loads(got.read_text().splitlines()[0])["events"][0]
    finally:
        if watch is not None:
            stop(watch)
            run.watch_stderr = watch.stderr.read()[-2000:]
        stop(job, group=True)
        run.job_stderr = job.stderr.read()[-2000:]
    return run
