"""What one `gputui attach` and `gputui detach` cost a running job (issue 33, item 7).

The job is tests/attach_job.py (a seeded CPU AdamW MLP, ~0.5 ms steps, one torch thread, no
gputui on its path). Between its phases it waits in a loop of 1 ms sleeps and records the longest
gap in that loop: the pause it saw. Phases: never attached (twice: the second hold does nothing,
for the machine's own largest gap), attached through gdb, then after a detach. Printed: the pause
of an idle hold, of the attach (gdb's stop plus the probe's start on the main thread) and of the
detach; each phase's median step time and its ratio to the never-attached one; gputui's own wall
time for each command; the load. Run it a few times on a shared machine.

    python bench/bench_attach.py [--steps 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "attach_job.py"


def gputui(env: dict, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gputui", *args], env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"gputui {' '.join(args)} failed: {done.stderr.strip()}")
    return 1000 * (time.perf_counter() - started)


def one_round(steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        holds, probes = Path(tmp) / "holds", Path(tmp) / "probes"
        holds.mkdir()
        probes.mkdir(mode=0o700)
        for phase in ("1", "2", "3"):
            (holds / phase).touch()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTUI_PROBE")}
        env.update(GPUTUI_PROBE_DIR=str(probes), OMP_NUM_THREADS="1")
        job = subprocess.Popen([sys.executable, str(JOB), str(holds), *[str(steps)] * 4], env=env,
                               stdout=subprocess.PIPE, text=True)
        lines = []
        try:
            lines.append(json.loads(job.stdout.readline()))  # never attached
            time.sleep(1.0)
            (holds / "1").unlink()
            lines.append(json.loads(job.stdout.readline()))  # never attached, idle hold's gap
            attach_ms = gputui(env, "attach", str(job.pid))
            time.sleep(0.5)
            (holds / "2").unlink()
            lines.append(json.loads(job.stdout.readline()))  # attached; the attach's gap
            detach_ms = gputui(env, "detach", str(job.pid))
            time.sleep(0.5)
            (holds / "3").unlink()
            lines.append(json.loads(job.stdout.readline()))  # after detach; the detach's gap
            job.wait(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
    never = min(lines[0]["step_ms"], lines[1]["step_ms"])
    return {"idle_gap": lines[1]["gap_ms"], "attach_gap": lines[2]["gap_ms"], "detach_gap": lines[3]["gap_ms"],
            "never": never, "attached": lines[2]["step_ms"], "detached": lines[3]["step_ms"],
            "attach_cmd": attach_ms, "detach_cmd": detach_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per phase")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; Python {sys.version.split()[0]}; "
          f"{args.rounds} rounds of {args.steps} steps a phase")
    rounds = [one_round(args.steps) for _ in range(args.rounds)]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    print(f"pause the job saw (longest gap in its 1 ms sleep loop, median of rounds): idle {med('idle_gap'):.1f} ms, "
          f"attach {med('attach_gap'):.1f} ms, detach {med('detach_gap'):.1f} ms")
    never = med("never")
    for key, words in (("never", "never attached"), ("attached", "attached"), ("detached", "after detach")):
        print(f"  step time {words:15s} {med(key):.3f} ms  x{med(key) / never:.3f}")
    print(f"gputui attach took {med('attach_cmd'):.0f} ms, gputui detach {med('detach_cmd'):.0f} ms (wall, "
          f"start-up of gputui's own Python included)")


if __name__ == "__main__":
    main()
