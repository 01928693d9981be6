"""The plain modes end to end: ``python -m gputui`` in subprocesses, with the simulator, the missing
driver of this machine, a real probe socket, pipes and a pseudo-terminal."""

import json
import os
import pty
import pwd
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, gputui, no_traceback
from plain_data import errors

from gputui.options import SCENARIOS
from gputui.plain.schema import SCHEMA


@pytest.fixture
def env(tmp_path):
    """A clean environment: no colour settings, a private probe directory nobody else uses."""
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir(mode=0o700)
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "GPUTUI_PROBE")}
    clean.update(GPUTUI_PROBE_DIR=str(probe_dir), COLUMNS="120", PYTHONPATH=str(ROOT))
    return clean


def snapshot_json(env, *args):
    result = gputui(env, *args, "--json")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return doc["snapshot"]


# ------------------------------------------------------------------------------------ no driver here

@pytest.mark.parametrize("args", [["--once"], ["--json"], ["--watch", "1"], []])
def test_without_nvml_a_clear_message_and_exit_2(env, args):
    result = gputui(env, *args)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("gputui: cannot read the GPUs: the NVIDIA driver's NVML library")
    assert "gputui --demo" in message and message.count("\n") == 0  # one paragraph


@pytest.mark.parametrize("args", [
    ["--watch", "-1"], ["--watch", "soon"], ["--demo", "nosuch"], ["--pid", "abc"], ["--pid", "0"],
    ["--once", "--json"], ["--frobnicate"], ["probe"], ["probe", "x"],
])
def test_bad_arguments_exit_2_with_the_error_and_where_to_read_more(env, args):
    result = gputui(env, *args)
    no_traceback(result)
    assert result.returncode == 2
    error, hint = result.stderr.splitlines()  # no usage above them (tests/unit/test_cli_errors.py)
    command = "gputui probe" if args[0] == "probe" else "gputui"
    assert error.startswith(f"{command}: error: ") and hint == f"see '{command} --help'"


# ------------------------------------------------------------------------------------ every scenario

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_demo_once_every_scenario(env, scenario):
    result = gputui(env, "--demo", scenario, "--once")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"simulated: {scenario}" in lines[0] or f"simulated: {scenario}" in lines[1]
    assert any(line.startswith("[0] ") for line in lines)
    assert "\x1b[" not in result.stdout  # a pipe is not a terminal
    assert max(len(line) for line in lines) <= 120


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_demo_json_every_scenario_is_valid(env, scenario):
    result = gputui(env, "--demo", scenario, "--json")
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    doc = json.loads(result.stdout)
    assert errors(doc, SCHEMA) == []
    assert doc["snapshot"]["source"] == f"sim:{scenario}" and doc["snapshot"]["devices"]


def test_demo_ascii_is_pure_ascii(env):
    for scenario in SCENARIOS:
        result = gputui(env, "--demo", scenario, "--once", "--ascii")
        assert result.returncode == 0
        result.stdout.encode("ascii")


def test_faults_scenario_shows_the_lost_gpu_and_troubled_processes(env):
    out = gputui(env, "--demo", "faults", "--once").stdout
    assert "LOST" in out and "n/a" in out
    snap = snapshot_json(env, "--demo", "faults")
    assert any(d["lost"] for d in snap["devices"])
    states = {p["state"] for p in snap["processes"]}
    assert {"gone", "denied", "zombie"} <= states, states


def test_training_node_carries_a_probe_report(env):
    snap = snapshot_json(env, "--demo", "training-node")
    assert snap["probes"], "the training-node scenario has a probed rank"
    out = gputui(env, "--demo", "training-node", "--once").stdout
    assert "probe torch" in out


# ------------------------------------------------------------------------------------ filters

def test_only_keeps_those_gpus(env):
    snap = snapshot_json(env, "--demo", "training-node", "--only", "1,3")
    assert [d["index"] for d in snap["devices"]] == [1, 3]
    assert {p["device_index"] for p in snap["processes"]} <= {1, 3}
    out = gputui(env, "--demo", "training-node", "--once", "--only", "1,3").stdout
    assert [line[:4] for line in out.splitlines() if line.startswith("[")] == ["[1] ", "[3] "]


def test_only_by_uuid_prefix(env):
    uuid = snapshot_json(env, "--demo", "workstation")["devices"][1]["uuid"]
    snap = snapshot_json(env, "--demo", "workstation", "--only", uuid[:12])
    assert [d["index"] for d in snap["devices"]] == [1]


def test_only_unknown_gpu_is_a_user_error(env):
    result = gputui(env, "--demo", "workstation", "--once", "--only", "7")
    no_traceback(result)
    assert result.returncode == 2 and result.stderr.startswith("gputui: --only 7: no such GPU")


def test_pid_and_user_filters(env):
    everything = snapshot_json(env, "--demo", "workstation")
    first = next(p for p in everything["processes"] if p["user"])
    by_pid = snapshot_json(env, "--demo", "workstation", "--pid", str(first["pid"]))
    assert {p["pid"] for p in by_pid["processes"]} == {first["pid"]}
    by_user = snapshot_json(env, "--demo", "workstation", "--user", first["user"])
    assert by_user["processes"] and {p["user"] for p in by_user["processes"]} == {first["user"]}
    others = [p for p in everything["processes"] if p["user"] != first["user"]]
    assert others, "the workstation scenario has several users"
    out = gputui(env, "--demo", "workstation", "--once", "--pid", str(first["pid"])).stdout
    rows = [line.split()[0] for line in out.splitlines() if re.match(r"^ *\d+ ", line)]
    assert set(rows) == {str(first["pid"])}


# ------------------------------------------------------------------------------------ colour, pipes

def run_in_terminal(env, *args, timeout=60):
    """Run gputui with its stdout on a pseudo-terminal; return what it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gputui", *args], stdout=slave,
                            stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, out.decode("utf-8", "replace")


def test_colour_on_a_terminal_unless_no_color(env):
    rc, out = run_in_terminal(env, "--demo", "faults", "--once")
    assert rc == 0 and "\x1b[" in out
    rc, out = run_in_terminal({**env, "NO_COLOR": "1"}, "--demo", "faults", "--once")
    assert rc == 0 and "\x1b[" not in out and "LOST" in out
    rc, out = run_in_terminal(env, "--demo", "faults", "--once", "--no-color")
    assert rc == 0 and "\x1b[" not in out


def test_json_into_a_pipe_closed_early_is_quiet(env, tmp_path):
    err = tmp_path / "err"
    cmd = (f"{sys.executable} -m gputui --demo training-node --demo-processes 1000 --json 2>{err} "
           "| head -c 10")
    result = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout == '{"schema":'
    assert err.read_text() == ""


def test_watch_json_is_ndjson_and_a_closed_pipe_ends_it(env, tmp_path):
    err = tmp_path / "err"
    cmd = f"{sys.executable} -m gputui --demo leaky --watch 0.2 --json 2>{err} | head -n 3"
    result = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 3
    times = [d["snapshot"]["taken_at"] for d in docs]
    assert times == sorted(times) and times[0] < times[2]
    # no traceback when head closes the pipe; what stderr carries is the leaky demo's alerts (README's Alerts)
    said = err.read_text().splitlines()
    assert said and all(line.startswith("gputui: alert: ") for line in said), said
    # Each document says what gputui cost (the first too: --watch samples once ahead for CPU %).
    costs = [d["snapshot"]["monitor"] for d in docs]
    assert all(c["cpu_percent"] >= 0 and c["sample_ms"] >= c["nvml_ms"] > 0 for c in costs)


def test_watch_text_into_a_log_until_ctrl_c(env):
    # A shell starts background jobs with SIGINT ignored, and a child inherits that (CI may be one):
    # put Ctrl-C back as a terminal would have it, or the child never sees the signal.
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "--demo", "workstation", "--watch", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    deadline = time.monotonic() + 60
    while sum(line.startswith("-- 2") for line in seen) < 2 and time.monotonic() < deadline:
        seen.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "\x1b[" not in "".join(seen) + out
    assert sum(line.startswith("-- 2") for line in seen) == 2


# ------------------------------------------------------------------------------------ probes

def test_probes_lists_a_real_probe_and_probe_prints_it(env, probed_process):
    pid = probed_process.pid
    listing = gputui(env, "probes")
    no_traceback(listing)
    assert listing.returncode == 0
    assert listing.stdout.splitlines()[1].split()[:6] == [str(pid), "-", "2.13.0+cpu", "n/a", "n/a", "7"]
    single = gputui(env, "probe", str(pid), "--json")
    assert single.returncode == 0
    doc = json.loads(single.stdout)
    assert doc["schema"] == "gputui.probe-report" and doc["report"]["pid"] == pid
    assert errors(doc, SCHEMA) == []
    text = gputui(env, "probe", str(pid))
    assert text.returncode == 0 and text.stdout.startswith(f"process {pid}  ")


def test_without_nvml_a_probed_cpu_job_is_still_shown(env, probed_process):
    pid = probed_process.pid
    result = gputui(env, "--once")
    no_traceback(result)
    assert result.returncode == 0
    assert "Probed processes not listed by NVML" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"{pid} "))
    # /proc knows whose it is and what it holds: said beside the probe's own figures.
    me = pwd.getpwuid(os.getuid()).pw_name
    assert row.startswith(f"{pid} {me}  CPU ") and "  RSS " in row and row.endswith("cpu_job.py")
    assert "! cannot read the GPUs" in result.stdout
    snap = snapshot_json(env)
    assert [r["pid"] for r in snap["probes"]] == [pid] and snap["devices"] == []
    assert [(p["pid"], p["user"]) for p in snap["probed"]] == [(pid, me)]
    assert snap["probed"][0]["host_memory"] > 1 << 20


def test_probes_when_none_running(env):
    result = gputui(env, "probes")
    assert result.returncode == 0 and result.stdout.startswith("No probed processes found.")
    doc = json.loads(gputui(env, "probes", "--json").stdout)
    assert doc["probes"] == [] and doc["unreachable"] == []


def test_probe_of_an_unknown_pid_exits_2(env):
    result = gputui(env, "probe", "4194300")
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.startswith("gputui: process 4194300: no such process")


def test_probe_of_a_process_without_a_probe_exits_2(env):
    result = gputui(env, "probe", str(os.getpid()))
    assert result.returncode == 2 and "no probe is running in this process" in result.stderr


def test_demo_probes_and_probe(env):
    listing = gputui(env, "--demo", "training-node", "probes")
    assert listing.returncode == 0, listing.stderr
    job, row = listing.stdout.splitlines()[1:3]
    assert job.startswith("train.py (torchrun)  1 rank of 8")  # the probed rank under its job
    pid = row.split()[0]
    single = gputui(env, "--demo", "training-node", "probe", pid, "--json")
    assert single.returncode == 0 and json.loads(single.stdout)["report"]["pid"] == int(pid)
    missing = gputui(env, "--demo", "training-node", "probe", "3")
    assert missing.returncode == 2 and "no probe in process 3" in missing.stderr


def test_demo_probes_json_judges_each_probe_as_the_snapshot_document_does(env):
    # `gputui probes --json` carries the same judgement of the leaking job as `--json` for the same sample.
    listing = gputui(env, "--demo", "leaky", "probes", "--json")
    snapshot = gputui(env, "--demo", "leaky", "--json")
    assert listing.returncode == 0 and snapshot.returncode == 0, listing.stderr + snapshot.stderr
    listed, judged = json.loads(listing.stdout), json.loads(snapshot.stdout)["judgements"]
    assert errors(listed, SCHEMA) == []
    mine = {p["pid"]: p for p in listed["judgements"]["processes"]}
    assert sorted(mine) == [r["pid"] for r in listed["probes"]] == [51200]  # the probed processes only
    theirs = next(p for p in judged["processes"] if p["pid"] == 51200)
    leak = mine[51200]["leak"]
    assert (leak["state"], leak["category"]) == ("leak", "activations") == (
        theirs["leak"]["state"], theirs["leak"]["category"])
    kinds = [a["kind"] for a in mine[51200]["advice"]]
    assert kinds == ["oom-soon", "keep-graph", "other-processes"] == [a["kind"] for a in theirs["advice"]]
    assert [k["name"] for k in mine[51200]["keepers"]] == [k["name"] for k in theirs["keepers"]] != []
    assert [s["where"] for s in mine[51200]["sites"]] == [s["where"] for s in theirs["sites"]] != []
    jobs = {j["job"]["key"]: j for j in listed["judgements"]["jobs"]}
    assert sorted(jobs) == [j["key"] for j in listed["jobs"]] == ["launcher 51010"]
    theirs_job = next(j for j in judged["jobs"] if j["job"]["key"] == "launcher 51010")
    assert [s["pid"] for s in jobs["launcher 51010"]["slots"]] == [s["pid"] for s in theirs_job["slots"]] == [51200]
    assert listed["judgements"]["waste"] is None


def test_demo_probes_text_says_the_verdict_as_probe_pid_does(env):
    listing = gputui(env, "--demo", "leaky", "probes")
    single = gputui(env, "--demo", "leaky", "probe", "51200")
    assert listing.returncode == 0 and single.returncode == 0, listing.stderr + single.stderr
    row = listing.stdout.splitlines().index(next(line for line in listing.stdout.splitlines()
                                                  if line.startswith("51200 ")))
    verdict = listing.stdout.splitlines()[row + 1].strip()
    assert verdict.startswith("leak: allocated grows 48.0 MiB per step over the last 64 steps")
    assert verdict in [line.strip() for line in single.stdout.splitlines()]


def test_a_probe_that_cannot_serve_says_so_once_and_probes_says_why(env, tmp_path):
    # Someone left the probe directory open to everyone: the probe refuses it, so no monitor could
    # ever reach the job. Its owner hears why on the job's stderr, and `gputui probes` says it too.
    pytest.importorskip("torch")  # the job's own; the minimum-versions run has none
    unsafe = tmp_path / "open"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    env = {**env, "GPUTUI_PROBE_DIR": str(unsafe)}
    job = subprocess.run([sys.executable, "-c", "import torch, gputui.probe as p; p.start(); print('trained')"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert job.returncode == 0 and job.stdout == "trained\n"
    said = [line for line in job.stderr.splitlines() if line.startswith("gputui:")]
    assert len(said) == 1 and "no monitor can reach it" in said[0]
    assert f"the probe directory {unsafe} is open to other users (mode 777)" in said[0]
    listing = gputui(env, "probes")
    assert listing.returncode == 0
    assert f"gputui: probes there are not read: the probe directory {unsafe} is open" in listing.stderr
