"""Leak verdicts as users see them: real jobs on the real clock, polled once a second by `gputui probe PID --json`.

Each job runs in a fresh process under the probe as users start it (GPUTUI_PROBE=1, the default budget),
``--runs`` times, on an idle machine and with every core kept busy by other processes (``--load``). A poller
asks `gputui probe PID --json` once a second, as someone watching would, and keeps the verdict of each
look. Per job and load it prints:

- polls: looks at the job, in all runs;
- flips: looks after a leak's first call that did not call it a leak (a leaking job), summed over runs;
- false alarms: looks that called a clean job a leak (the warm-up plateau: once it has been flat for
  the verdict's take-back, leak's FLAT_STEPS), summed over runs;
- first call: the most steps any run took to its first call (the step of the earliest evidence the first
  look that called it judged a leak on: its report's steps, judged up to each step);
- keeper: runs whose last look named the line that keeps the leak (examples/leak_corpus.py marks it);
- measured/1000: measured steps per 1,000 steps, the median over runs (from the last look's report).

    python bench/bench_verdicts.py [--runs 5] [--load idle busy] [--save DIR] [JOB ...]

Goal (issue 45), on a busy machine: 0 flips and 0 false alarms in every run, the slow leak called within
300 steps and its keeping line named in every run, the fast leaks called within 100 steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
POLL_EVERY = 1.0
LINGER = 2.5  # seconds a job waits after its last step: the poller's last look


@dataclass(frozen=True)
class Job:
    """One job of the bench: what runs, and what its verdict must be."""

    name: str
    leaks: bool
    steps: int
    step_time: float = 0.0  # seconds each step lasts at least (sleeping): a slower model
    keeps: int | None = None  # the line of examples/leak_corpus.py that keeps the leak
    flat_from: int | None = None  # a warm-up plateau: the step from which it is flat
    ranks: int = 1


def jobs() -> list[Job]:
    """The leak corpus, a slow step-shaped leak, a warm-up plateau, a clean variable-length loop (longer
    than the corpus runs it) and a two-rank ZeRO-3 job."""
    import leak_corpus

    found = []
    for name, pattern in leak_corpus.PATTERNS.items():
        keeps = leak_corpus.marked_line(name, "keeps") if pattern.leaks else None
        found.append(Job(name, pattern.leaks, 300, keeps=keeps))
    found.append(Job("slow_leak", True, 1500, keeps=leak_corpus.marked_line("slow_leak", "keeps")))
    found.append(Job("warmup_plateau", False, 500, step_time=0.05, flat_from=100))
    found.append(Job("variable_length_long", False, 1000))
    found.append(Job("zero3", False, 400, ranks=2))
    return found


@dataclass
class Look:
    """One poll: the verdict and what it rested on."""

    at: float
    step: int | None  # the report's latest step
    state: str | None
    reason: str | None
    first_called: int | None = None  # (a leak) the earliest step its report's evidence called it at
    keeper: str | None = None
    measured: int = 0
    steps_seen: int = 0


@dataclass
class Run:
    job: Job
    load: str
    looks: dict[int, list[Look]] = field(default_factory=dict)  # by pid: one list per rank


def command(job: Job, linger: float = LINGER) -> list[str]:
    if job.name == "zero3":
        return [sys.executable, str(ROOT / "bench" / "zero3_job.py"), str(free_port()), str(job.steps),
                str(linger), str(job.step_time)]
    name = "variable_length" if job.name == "variable_length_long" else job.name
    return [sys.executable, str(ROOT / "examples" / "leak_corpus.py"), name, "--steps", str(job.steps),
            "--threads", "1", "--linger", str(linger), "--step-time", str(job.step_time)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probed_pids(root: int) -> list[int]:
    """The job's processes that serve a probe and train (the ranks of a spawned job, else the job)."""
    import psutil

    try:
        family = [root] + [p.pid for p in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    listed = subprocess.run(["gputui", "probes", "--json"], capture_output=True, text=True)
    try:
        document = json.loads(listed.stdout)
    except ValueError:
        return []
    reports = document.get("probes") or document.get("reports") or []
    return [r["pid"] for r in reports if r.get("pid") in family and r.get("steps")]


def look(pid: int, job: Job) -> Look | None:
    """`gputui probe PID --json` once, as someone watching would."""
    out = subprocess.run(["gputui", "probe", str(pid), "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    document = json.loads(out.stdout)
    report, judgement = document["report"], document.get("judgement") or {}
    leak = judgement.get("leak") or {}
    steps = report.get("steps") or []
    keepers = judgement.get("keepers") or report.get("keepers") or []
    found = Look(at=time.time(), step=steps[-1]["step"] if steps else None, state=leak.get("state"),
                 reason=leak.get("reason"), keeper=((keepers[0].get("where") or [None])[0] if keepers else None),
                 measured=sum(1 for s in steps if s.get("categories") is not None), steps_seen=len(steps))
    if found.state == "leak":
        found.first_called = first_call(report)
    return found


def first_call(document: dict) -> int | None:
    """The first step at which the evidence of this report, judged up to it, is a leak."""
    from gputui.analysis.leaks import leak_verdict
    from gputui.model import ProbeReport
    from gputui.model.codec import from_jsonable

    report = from_jsonable(ProbeReport, document)
    for last in range(1, len(report.steps) + 1):
        if leak_verdict(dataclasses.replace(report, steps=report.steps[:last])).state == "leak":
            return report.steps[last - 1].step
    return None


def one_run(job: Job, load: str, save: Path | None, index: int) -> Run:
    env = {**os.environ, "GPUTUI_PROBE": "1"}
    proc = subprocess.Popen(command(job), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=ROOT)
    run = Run(job, load)
    pids: list[int] = []
    try:
        while proc.poll() is None:
            started = time.monotonic()
            if len(pids) < job.ranks:
                pids = probed_pids(proc.pid)
            for pid in pids:
                seen = look(pid, job)
                if seen is not None:
                    run.looks.setdefault(pid, []).append(seen)
            time.sleep(max(0.0, POLL_EVERY - (time.monotonic() - started)))
    finally:
        proc.kill()
        proc.wait()
    if save is not None:
        out = save / f"{job.name}-{load}-{index}.json"
        out.write_text(json.dumps({pid: [dataclasses.asdict(x) for x in looks] for pid, looks in run.looks.items()}))
    return run


@dataclass
class Figures:
    polls: int = 0
    flips: int = 0
    false_alarms: int = 0
    first_calls: list[int | None] = field(default_factory=list)
    keeper_named: int = 0
    measured_per_1000: list[float] = field(default_factory=list)
    runs: int = 0


def judge(run: Run, figures: Figures) -> None:
    """Add one run's looks to the figures of its job and load."""
    import leak_corpus

    job = run.job
    figures.runs += 1
    for looks in run.looks.values():
        looks = [x for x in looks if x.step is not None]
        figures.polls += len(looks)
        if not looks:
            continue
        last = looks[-1]
        if last.step:
            figures.measured_per_1000.append(1000.0 * last.measured / last.step)
        if job.leaks:
            called = [i for i, x in enumerate(looks) if x.state == "leak"]
            figures.first_calls.append(looks[called[0]].first_called if called else None)
            if called:
                figures.flips += sum(1 for x in looks[called[0]:] if x.state != "leak")
            wanted = f"{leak_corpus.__file__}:{job.keeps} "
            if last.keeper is not None and last.keeper.startswith(wanted):
                figures.keeper_named += 1
        else:
            take_back = job.flat_from + flat_steps() if job.flat_from is not None else 0
            figures.false_alarms += sum(1 for x in looks if x.state == "leak" and x.step >= take_back)


def flat_steps() -> int:
    from gputui.analysis.leaks import FLAT_STEPS

    return FLAT_STEPS


class Load:
    """Every core kept busy by processes of their own (spinning Python), while it is on."""

    def __init__(self, on: bool):
        self.on = on
        self.procs: list[subprocess.Popen] = []

    def __enter__(self):
        if self.on:
            self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(os.cpu_count() or 1)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="*", help="job names (default: all)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--load", nargs="+", choices=("idle", "busy"), default=["idle", "busy"])
    parser.add_argument("--save", type=Path, help="write each run's looks here (JSON)")
    args = parser.parse_args()
    chosen = [j for j in jobs() if not args.jobs or j.name in args.jobs]
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} CPUs, {args.runs} runs per job and load, a look every {POLL_EVERY:g} s")
    header = (f"{'job':22} {'load':5} {'polls':>5} {'flips':>5} {'false':>5} {'first call':>10} "
              f"{'keeper':>7} {'meas/1000':>9}")
    print(header)
    for load in args.load:
        for job in chosen:
            figures = Figures()
            for index in range(args.runs):
                with Load(load == "busy"):
                    judge(one_run(job, load, args.save, index), figures)
            calls = [c for c in figures.first_calls]
            first = ("-" if not job.leaks else "never" if any(c is None for c in calls) or not calls
                     else str(max(calls)))
            keeper = f"{figures.keeper_named}/{figures.runs}" if job.leaks and job.keeps else "-"
            measured = statistics.median(figures.measured_per_1000) if figures.measured_per_1000 else 0.0
            print(f"{job.name:22} {load:5} {figures.polls:>5} {figures.flips:>5} {figures.false_alarms:>5} "
                  f"{first:>10} {keeper:>7} {measured:>9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
