"""Feed the simulated libnvidia-ml: write a scenario's NVML answers to a state file, again and again.

    python -m gputui.collect.sim.feed training-node --state /tmp/sim.state --processes 64 --spawn
    LD_LIBRARY_PATH=DIR GPUTUI_SIM_STATE=/tmp/sim.state nvitop     # DIR from native.build(DIR)

``--spawn`` starts a cheap real process (``sleep``) for each simulated GPU process and lists its
pid instead, so monitors that look processes up on the host (all of them) find one. The children
die with the feeder.
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path

from gputui.collect.sim import native
from gputui.collect.sim.library import Nvml
from gputui.collect.sim.machine import SimulatedMachine
from gputui.collect.sim.scenarios import DEMO_START, SCENARIOS, VANISHED

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM when the feeder goes, however it goes."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class StandIns:
    """Real processes standing in for simulated ones: simulated pid -> child process."""

    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen] = {}

    def update(self, machine: SimulatedMachine, listed: set[int]) -> dict[int, int]:
        """Start a child for each newly listed pid, end those no longer listed; the pid map."""
        for pid in sorted(listed - self.children.keys()):
            program = machine.program(pid)
            if program is None or program.access == VANISHED:
                continue  # NVML lists it, the host has no such process: keep it that way
            self.children[pid] = subprocess.Popen(
                ["sleep", "infinity"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        for pid in sorted(self.children.keys() - listed):
            self.children.pop(pid).terminate()
        return {pid: child.pid for pid, child in self.children.items()}

    def close(self) -> None:
        for child in self.children.values():
            child.terminate()
        for child in self.children.values():
            child.wait()
        self.children.clear()


def listed_pids(machine: SimulatedMachine) -> set[int]:
    """Every pid NVML lists now, on any GPU."""
    return {use.pid for gpu in machine.state().gpus for use in gpu.compute + gpu.graphics}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gputui.collect.sim.feed", description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--state", type=Path, required=True, help="the state file to write")
    parser.add_argument("--processes", type=int, help="pad or trim the scenario's GPU processes to this many")
    parser.add_argument("--spawn", action="store_true", help="real stand-in processes for the simulated ones")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between writes (default 0.5)")
    parser.add_argument("--once", action="store_true", help="write the state once and exit")
    parser.add_argument("--start", type=float, help="scenario second to begin at (default: where --demo begins)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.once and args.spawn:
        parser.error("--spawn needs the feeder to keep running: its processes die with it")
    if not args.interval > 0:
        parser.error("--interval must be a positive number of seconds")
    if args.processes is not None and args.processes < 0:
        parser.error("--processes must be 0 or more")
    if not args.state.parent.is_dir():
        parser.error(f"no such directory for the state file: {args.state.parent}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = DEMO_START.get(args.scenario, 0.0) if args.start is None else args.start
    machine = SimulatedMachine(args.scenario, seed=args.seed, processes=args.processes, start=start)
    nv = Nvml(machine)
    stand_ins = StandIns() if args.spawn else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    announced = False
    try:
        while True:
            began = time.monotonic()
            pids = stand_ins.update(machine, listed_pids(machine)) if stand_ins else {}
            text = native.state_text(nv, pids=pids, stamp_us=time.time_ns() // 1000)
            native.write_state(args.state, text)
            if not announced:
                count = len(native.state_pids(args.state))
                print(f"state written to {args.state}: {len(machine.plan.gpus)} GPUs, {count} processes", flush=True)
                announced = True
            if args.once:
                return 0
            time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
    except KeyboardInterrupt:
        return 0
    finally:
        if stand_ins:
            stand_ins.close()


if __name__ == "__main__":
    sys.exit(main())
