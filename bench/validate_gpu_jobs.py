"""What gputui learned since its last GPU session, checked on a real NVIDIA driver and CUDA jobs.

The third of the GPU validators (bench/validate_gpu.py: the monitor's data path and the probe;
bench/validate_gpu_commands.py: serve, record, the OOM report, torchrun, estimate). Each part is one
subprocess or a few, so a crash is a finding, not the end:

- attach: `gputui attach` on a running CUDA job that never imported gputui (tests/attach_job.py with
  ATTACH_DEVICE=cuda), its bytes against the job's own count, `gputui --json`'s row for it (GPU memory
  against nvidia-smi, OWNER), `gputui detach`, attach again, and the job's final loss beside an
  unattached twin's.
- alerts: a CUDA job keeping its losses under `gputui run`, `gputui --watch 1 --alert-command` beside
  it: the seconds to the leak alert, and what it said.
- frameworks: bench/frameworks.py --device cuda (the Trainer, PEFT, accelerate, Lightning's closure,
  torch.compile, checkpointing; DDP, FSDP1, FSDP2 and DeepSpeed ZeRO with two ranks on cuda:0 over gloo).

    python bench/validate_gpu_jobs.py OUTDIR [--only attach alerts frameworks]

Writes OUTDIR/jobs.json (every figure, written again after each part) and OUTDIR/frameworks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))  # (the jobs live with their tests)
from validate_gpu import smi_apps  # noqa: E402 - beside this script

PARTS = ("attach", "alerts", "frameworks")


def environment(probe_dir: Path, **extra: str) -> dict:
    return {**os.environ, "GPUTUI_PROBE_DIR": str(probe_dir), "OMP_NUM_THREADS": "1", **extra}


def gputui(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputui", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def said(job: subprocess.Popen) -> dict:
    """The job's next JSON line (it prints one at each hold and at its end)."""
    line = job.stdout.readline()
    if not line:
        raise RuntimeError(f"the job said nothing; its stderr ends: {job.stderr.read()[-2000:]}")
    return json.loads(line)


def fetch(client, pid: int, env: dict, seconds: float = 10):
    """The probe's report, asked again for up to ``seconds`` while no probe answers yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return client.fetch_report(pid, timeout=5, environ=env)
        except client.ProbeUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def part_attach(work: Path, device: str) -> dict:
    from gputui.link import client

    env = environment(work / "probes", ATTACH_DEVICE=device, ATTACH_JOB="plain")
    (work / "probes").mkdir(mode=0o700)
    holds = work / "holds"
    holds.mkdir()
    (holds / "1").touch()
    (holds / "2").touch()
    job_file, counts = str(ROOT / "tests" / "attach_job.py"), ["200", "100", "100"]
    twin = subprocess.Popen([sys.executable, job_file, str(work / "none"), *counts], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = subprocess.Popen([sys.executable, job_file, str(holds), *counts], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result: dict = {"pid": job.pid}
    try:
        result["hold1"] = said(job)
        started = time.monotonic()
        out = gputui(env, "attach", str(job.pid))
        result["attach"] = {"rc": out.returncode, "seconds": round(time.monotonic() - started, 2),
                            "stdout": out.stdout[-1500:], "stderr": out.stderr[-1500:]}
        (holds / "1").unlink()
        truth = result["hold2"] = said(job)
        listed = gputui(env, "probes", "--json")
        result["probes"] = listed.stdout[-1500:] + listed.stderr[-500:]
        report = fetch(client, job.pid, env)
        device = report.devices[0] if report.devices else None
        probe = None if device is None else {
            "device": device.device, "parameters": device.categories.parameters,
            "gradients": device.categories.gradients, "optimizer_state": device.categories.optimizer_state,
            "allocated": device.allocator and device.allocator.allocated,
            "reserved": device.allocator and device.allocator.reserved, "steps": [s.step for s in report.steps][-3:]}
        result["probe"] = probe
        result["exact"] = probe is not None and all(probe[k] == truth[k] for k in
                                                    ("parameters", "gradients", "optimizer_state"))
        listed = gputui(env, "--json")
        rows = [p for p in json.loads(listed.stdout)["snapshot"]["processes"] if p["pid"] == job.pid] \
            if listed.returncode == 0 else []
        result["json_row"] = rows[0] if rows else {"rc": listed.returncode, "stderr": listed.stderr[-1500:]}
        result["smi"] = [a for a in smi_apps() if a["pid"] == str(job.pid)] if shutil.which("nvidia-smi") else None
        result["cgroup"] = Path(f"/proc/{job.pid}/cgroup").read_text()[-600:]
        out = gputui(env, "detach", str(job.pid))
        result["detach"] = {"rc": out.returncode, "stdout": out.stdout[-800:], "stderr": out.stderr[-800:],
                            "socket_left": client.find_socket(job.pid, env) is not None}
        out = gputui(env, "attach", str(job.pid))
        result["attach_again"] = {"rc": out.returncode, "stdout": out.stdout[-800:], "stderr": out.stderr[-800:]}
        (holds / "2").unlink()
        result["end"] = said(job)
        result["twin_end"] = said(twin)  # (its holds never existed: it only prints its end)
        result["job_rc"], result["twin_rc"] = job.wait(timeout=120), twin.wait(timeout=120)
        result["loss_equal_to_twin"] = result["end"]["loss"] == result["twin_end"]["loss"]
    except Exception:  # noqa: BLE001 - the finding, beside what was seen up to it
        result["error"] = traceback.format_exc()[-2000:]
    finally:
        for child in (job, twin):
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
        result["job_stderr"] = job.stderr.read()[-1500:]
    return result


def part_alerts(work: Path, device: str, within: float = 90) -> dict:
    from alert_watch import watch_a_leaking_job

    env = environment(work / "probes")
    (work / "probes").mkdir(mode=0o700)
    run = watch_a_leaking_job(env, work, within, device)
    return {"probe_found_s": run.probe_found, "alert_s": run.alerted, "first_event": run.first,
            "watch_stderr": run.watch_stderr, "job_stderr": run.job_stderr}


def part_frameworks(out: Path, device: str, timeout: float, jobs: list[str]) -> dict:
    """bench/frameworks.py's jobs on ``device``, each run once under the probe (its cost not timed)."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "frameworks.py"), "--device", device,
                               "--repeats", "0", *jobs], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return {"rc": "timeout", "stderr": (exc.stderr or b"")[-3000:].decode(errors="replace")
                if isinstance(exc.stderr, bytes) else str(exc.stderr)[-3000:]}
    (out / "frameworks.md").write_text(done.stdout)
    return {"rc": done.returncode, "seconds": round(time.monotonic() - started, 1), "table": done.stdout,
            "stderr": done.stderr[-3000:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", choices=PARTS, default=PARTS)
    parser.add_argument("--frameworks-timeout", type=float, default=240)
    parser.add_argument("--jobs", nargs="*", default=[], help="bench/frameworks.py's jobs (default: all)")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script on a machine without a GPU")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for name in args.only:
        print(f"== {name}", flush=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"gputui-{name}-") as work:
            try:
                if name == "frameworks":
                    results[name] = part_frameworks(args.out, args.device, args.frameworks_timeout, args.jobs)
                else:
                    results[name] = (part_attach if name == "attach" else part_alerts)(Path(work), args.device)
            except Exception:  # noqa: BLE001 - a finding: report it and go on with the other parts
                results[name] = {"error": traceback.format_exc()[-3000:]}
        results[name]["part_seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(results[name], default=str)[:8000], flush=True)
        (args.out / "jobs.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
