"""The whole way through, on real processes: ``gputui --json`` and ``--once`` (no --demo) on the simulated
libnvidia-ml.so.1, whose GPU processes are real ones here (issue 44 items 6 and 7).

User 4242's rank runs in slurmd's v1 cgroup /slurm/uid_4242/job_J; user nobody's process says
SLURM_JOB_ID=J with a 131,000-byte job name and run id. The collector reads the real /proc, cgroups and
environments: the job stays 4242's, nobody's word is marked and cut, in the terminal and in JSON.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest
from cli_helpers import gputui, no_traceback
from real_cgroups import MEMORY, Cgroups, end, need_cgroups, spawn

from gputui.collect.sim import native
from gputui.collect.sim.feed import listed_pids
from gputui.collect.sim.library import Nvml
from gputui.collect.sim.machine import SimulatedMachine
from gputui.link.paths import DIR_ENV
from gputui.untrusted import TEXT_LIMIT

pytestmark = [pytest.mark.slow, need_cgroups,
              pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")]
HUGE = 131_000


@pytest.fixture
def cgroups():
    made = Cgroups()
    yield made
    made.close()


def test_json_and_once_keep_the_job_its_users_and_mark_the_claim(tmp_path, cgroups):
    job = str(random.randint(10_000, 99_999))
    step = cgroups.make(MEMORY, f"slurm/uid_4242/job_{job}/step_0")
    ranked = spawn(4242, {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0"})
    cgroups.move(ranked.pid, step)
    claimer = spawn(65534, {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "n" * HUGE,
                            "TORCHELASTIC_RUN_ID": "r" * HUGE})
    try:
        machine = SimulatedMachine("training-node", processes=2, start=60.0)
        first, second = sorted(listed_pids(machine))[:2]
        state = tmp_path / "state"
        native.write_state(state, native.state_text(Nvml(machine), pids={first: ranked.pid, second: claimer.pid}))
        probes = tmp_path / "probes"
        probes.mkdir(mode=0o700)
        env = {**os.environ, "LD_LIBRARY_PATH": str(native.build(tmp_path / "lib").parent),
               native.STATE_VARIABLE: str(state), DIR_ENV: str(probes), "COLUMNS": "160"}
        as_json, once = gputui(env, "--json"), gputui(env, "--once")
    finally:
        end([ranked, claimer])
    for done in (as_json, once):
        no_traceback(done)
        assert done.returncode == 0, done.stderr
    owners = {p["pid"]: p["owner"] for p in json.loads(as_json.stdout)["snapshot"]["processes"]}
    assert owners[ranked.pid]["slurm"] == {"job": job, "step": "0", "user": "4242", "name": None, "source": "cgroup"}
    assert owners[claimer.pid]["slurm"] == {"job": job, "step": "0", "user": None, "source": "environment",
                                            "name": "n" * TEXT_LIMIT + f"...(cut {HUGE - TEXT_LIMIT} characters)"}
    assert len(as_json.stdout) < 100_000
    rows = {line.split()[0]: line for line in once.stdout.splitlines() if line.split()[:1] in ([str(ranked.pid)],
                                                                                              [str(claimer.pid)])}
    assert f"slurm {job}.0 (env)" in rows[str(claimer.pid)] and "(env)" not in rows[str(ranked.pid)]
    assert "Owners: its Slurm job is its environment's word only" in once.stdout
