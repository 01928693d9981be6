"""What one `gputui attach` and `gputui detach` cost a running job (issue 33, item 7).

The job is tests/attach_job.py (a seeded CPU AdamW MLP, ~0.5 ms steps, one torch thread, no
gputui on its path). Between its phases it waits in a loop of 1 ms sleeps and records the longest
gap in that loop: the pause it saw. Phases: never attached (twice: the second hold does nothing,
for the machine's own largest gap), attached through gdb, then after a detach. Printed: the pause
of an idle hold, of the attach (gdb's stop plus the probe's start on the main thread) and of the
detach; each phase's median step time and its ratio to the never-attached one; gputui's own wall
time for each command; the load. Run it a few times on a shared machine.

``--crafted N`` measures instead what a hostile job costs gputui itself (issue 44, item 3): the job
(tests/attach_hostile_target.py) maps a crafted ELF named like libpython, 65,535 section headers of
which N are dynamic symbol tables over one sparse 64 MiB; printed: the CPU seconds and peak RSS of
`gputui attach` on it, or what it had used when stopped at ``--limit`` seconds. The job runs on a
Python with no libpython of its own (Debian's /usr/bin/python3 is one), where the crafted file is
the only one named so. ``--home DIR``: the gputui to measure (another checkout, for a before-and-after).

    python bench/bench_attach.py [--steps 400] [--rounds 3]
    python bench/bench_attach.py --crafted 65534 [--limit 120] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "attach_job.py"
HOSTILE = ROOT / "tests" / "attach_hostile_target.py"


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


def crafted_cost(dynsym_sections: int, home: Path, limit: float) -> str:
    """`gputui attach` on a job that maps the crafted ELF: its CPU seconds and peak RSS, in words."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTUI_PROBE")}
        env.update(TMPDIR=tmp, GPUTUI_PROBE_DIR=tmp)
        job = subprocess.Popen([_static_python(), str(HOSTILE), "crafted", str(dynsym_sections)], env=env,
                               stdout=subprocess.PIPE, text=True)
        try:
            pid = job.stdout.readline().strip()
            started = time.perf_counter()
            attach = subprocess.Popen([sys.executable, "-m", "gputui", "attach", pid],
                                      env={**env, "PYTHONPATH": str(home)}, cwd=tmp,  # (not this checkout)
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while True:
                done, status, usage = os.wait4(attach.pid, os.WNOHANG)
                if done:
                    ended = f"exit status {os.waitstatus_to_exitcode(status)}"
                    break
                if time.perf_counter() - started > limit:
                    attach.send_signal(signal.SIGSTOP)  # (its figures as they are now)
                    with open(f"/proc/{attach.pid}/stat") as f:
                        ticks = f.read().rsplit(")", 1)[1].split()
                    cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
                    with open(f"/proc/{attach.pid}/status") as f:
                        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
                    attach.kill()
                    attach.wait()
                    return (f"{dynsym_sections} symbol tables: still running at {limit:.0f} s (stopped there), "
                            f"{cpu:.1f} CPU s, peak RSS {peak / 1024:.0f} MiB so far")
                time.sleep(0.05)
        finally:
            job.kill()
            job.wait()
    wall, cpu = time.perf_counter() - started, usage.ru_utime + usage.ru_stime
    return (f"{dynsym_sections} symbol tables: {ended} after {wall:.2f} s, {cpu:.2f} CPU s, "
            f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")


def _static_python() -> str:
    """A Python here that maps no libpython (else gputui finds the real one first), or SystemExit."""
    for python in ("/usr/bin/python3", sys.executable):
        maps = subprocess.run([python, "-c", "print(open('/proc/self/maps').read())"], capture_output=True,
                              text=True).stdout
        if maps and "libpython" not in maps:
            return python
    raise SystemExit("--crafted needs a Python without a shared libpython (Debian's /usr/bin/python3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--crafted", type=int, metavar="N", help="measure a job mapping a crafted ELF instead")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds before --crafted stops gputui")
    parser.add_argument("--home", type=Path, default=ROOT, help="the gputui checkout to run (--crafted)")
    args = parser.parse_args()
    if args.crafted is not None:
        print(crafted_cost(args.crafted, args.home.resolve(), args.limit))
        return
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
