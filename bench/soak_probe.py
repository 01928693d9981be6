"""Soak: several probed CPU training jobs at once, each polled once a second and flat out, for minutes.

Each job (tests/probe_stress_job.py) trains for the whole run while three pollers ask its probe for
reports: one once a second, like the live monitor, and two as fast as they can (one of them asking for
incremental reports). Prints, per job: exit code, steps, whether the last report's step count and
parameter bytes match what the job holds, answers per poller, anything a poller found wrong, and the
job's resident memory after start-up and at the end (the probe must not grow it).

    python bench/soak_probe.py [--minutes 10] [--jobs set_to_none,accumulation,replace,dataloader,compile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "probe_stress_job.py"
sys.path.insert(0, str(ROOT))

from gputui.link import client  # noqa: E402


def resident_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--jobs", default="set_to_none,accumulation,replace,dataloader,compile")
    args = parser.parse_args()
    seconds = args.minutes * 60
    directory = tempfile.mkdtemp(prefix="gputui-soak-")
    env = {**os.environ, "GPUTUI_PROBE_DIR": directory}
    jobs = {}
    for scenario in args.jobs.split(","):
        job = subprocess.Popen([sys.executable, str(JOB), "train", scenario, "--seconds", str(seconds)],
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        ready = job.stdout.readline().split()
        if ready[:1] != ["ready"]:
            print(f"{scenario}: did not start: {job.stderr.read()[-2000:]}")
            return 1
        pid = int(ready[1])
        pollers = [
            subprocess.Popen([sys.executable, str(JOB), "poll", str(pid), "--seconds", str(seconds + 5),
                              *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for extra in (["--interval", "1"], [], ["--incremental"])
        ]
        jobs[scenario] = (job, pid, pollers, resident_mib(pid))
    print(f"{len(jobs)} jobs x 3 pollers (1 Hz, flat out, flat out incremental) for {args.minutes:g} min",
          flush=True)
    started = time.monotonic()
    failed = False
    for scenario, (job, pid, pollers, rss_start) in jobs.items():
        line = job.stdout.readline()
        truth = json.loads(line) if line.strip() else None
        rss_end = resident_mib(pid)
        try:
            last = client.fetch_report(pid, timeout=10, environ=env) if truth else None
        except client.ProbeUnavailable as exc:
            last = None
            print(f"{scenario}: last report: {exc}")
        polled = [json.loads(p.communicate(timeout=120)[0] or "null") for p in pollers]
        job.stdin.close()
        code = job.wait(timeout=120)
        ok = (code == 0 and truth is not None and last is not None
              and last.steps[-1].step == truth["steps"]
              and last.devices[0].categories.parameters == truth["parameters"]
              and all(p and not p["wrong"] for p in polled))
        failed |= not ok
        answers = "/".join(str(p["answers"]) if p else "-" for p in polled)
        print(f"{scenario:13} exit {code}  steps {truth['steps'] if truth else '-':>7}  "
              f"report {'matches' if ok else 'DIFFERS'}  answers {answers}  "
              f"rss {rss_start or 0:.0f}->{rss_end or 0:.0f} MiB")
        for p in polled:
            if p and p["wrong"]:
                print("   wrong:", p["wrong"])
        if code != 0:
            print("   stderr:", job.stderr.read()[-1500:])
    print(f"done in {time.monotonic() - started:.0f} s: "
          f"{'all jobs finished with true reports' if not failed else 'FAILURES'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
