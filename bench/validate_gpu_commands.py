"""gputui's commands beyond the monitor against a real NVIDIA driver and CUDA allocator (a GPU machine).

The companion of bench/validate_gpu.py (the monitor's data path and the probe); this one checks what
issues 15-18 added, each part in a process of its own so that one crash is a finding, not the end:

- serve: `gputui serve`'s /metrics and /snapshot beside nvidia-smi, with a probed CUDA job running.
- record: `gputui record` of that job for a few seconds, then `gputui replay --json --at`.
- oom-report: a CUDA job that dies of an uncaught OutOfMemoryError under `gputui run`: the report file
  and `gputui oom`, and the job's last line and exit code beside the same job without the probe.
- ended: the live monitor's sampler watching that job: once it has died, its row is kept as ended by
  an OOM, with the report file.
- ddp: a 2-rank DistributedDataParallel job (gloo, both ranks on cuda:0) under `gputui run -- torchrun`:
  one job, two probed ranks, each rank's NVML memory, the launcher unprobed.
- estimate: `gputui estimate`'s phase peaks (meta device) beside a real CUDA step of the same job
  (torch.cuda.max_memory_allocated() with reset_peak_memory_stats() at each phase boundary).

    python bench/validate_gpu_commands.py OUTDIR [--only serve record ...]

Writes OUTDIR/commands.json (every figure) and the texts the commands printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from validate_gpu import gputui, smi_apps, smi_gpus  # noqa: E402 - beside this script

MiB = 1 << 20
PARTS = ("serve", "record", "oom-report", "ended", "ddp", "estimate")


def start_job(*extra: str) -> subprocess.Popen:
    """examples/train.py on CUDA under `gputui run`, until killed."""
    return subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable, "examples/train.py",
                             "--steps", "10000000", "--every", "100000000", *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_probed(seconds: float = 60) -> list[dict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        listed = gputui("probes", "--json")
        probes = json.loads(listed.stdout).get("probes", []) if listed.returncode == 0 else []
        if probes and all(p.get("steps") for p in probes):
            return probes
        time.sleep(0.5)
    return []


def stop(job: subprocess.Popen) -> dict:
    job.terminate()
    try:
        _, err = job.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        job.kill()
        _, err = job.communicate()
    return {"rc": job.returncode, "stderr": err[-1500:]}


def fetch(url: str) -> tuple[str, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode(), (time.perf_counter() - started) * 1e3


def metric(text: str, name: str) -> list[tuple[dict, float]]:
    """The samples of one metric family in Prometheus' text format: (labels, value)."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        labels = {}
        if "{" in head:
            for pair in head[head.index("{") + 1:head.rindex("}")].split(","):
                if "=" in pair:
                    key, _, raw = pair.partition("=")
                    labels[key] = raw.strip('"')
        found.append((labels, float(value)))
    return found


def part_serve(out: Path) -> dict:
    job = start_job()
    port = 19403
    server = subprocess.Popen([sys.executable, "-m", "gputui", "serve", "--listen", f"127.0.0.1:{port}",
                               "--interval", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    result: dict = {}
    try:
        probes = wait_probed()
        result["probed"] = [p["pid"] for p in probes]
        time.sleep(5)  # two samples of the exporter with the probe's report in them
        text, result["scrape_ms"] = fetch(f"http://127.0.0.1:{port}/metrics")
        snapshot_text, result["snapshot_ms"] = fetch(f"http://127.0.0.1:{port}/snapshot")
        smi, apps = smi_gpus(), smi_apps()
        (out / "metrics.txt").write_text(text)
        document = json.loads(snapshot_text)
        result["smi_used_mib"] = [g.get("memory.used") for g in smi]
        result["smi_total_mib"] = [g.get("memory.total") for g in smi]
        result["metric_used_mib"] = [v / MiB for _, v in metric(text, "gputui_device_memory_used_bytes")]
        result["metric_total_mib"] = [v / MiB for _, v in metric(text, "gputui_device_memory_total_bytes")]
        result["smi_apps"] = apps
        result["metric_process_mib"] = {labels.get("pid"): v / MiB
                                        for labels, v in metric(text, "gputui_process_memory_bytes")}
        result["metric_probe"] = {labels.get("category"): v
                                  for labels, v in metric(text, "gputui_probe_memory_bytes")}
        result["snapshot_breakdowns"] = document.get("breakdowns")
        result["metric_families"] = len({line.split()[2] for line in text.splitlines()
                                         if line.startswith("# TYPE")})
        result["snapshot_time"] = document["snapshot"].get("timestamp")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        result["serve_rc"], result["serve_stderr"] = server.returncode, server.stderr.read()[-1000:]
        result["job"] = stop(job)
    return result


def part_record(out: Path) -> dict:
    job = start_job()
    result: dict = {}
    try:
        result["probed"] = [p["pid"] for p in wait_probed()]
        recording = out / "recording.gputui"
        done = gputui("record", str(recording), "--interval", "1", "--duration", "10s", timeout=60)
        result["record_rc"], result["record_stderr"] = done.returncode, done.stderr[-1000:]
        result["bytes"] = recording.stat().st_size if recording.exists() else None
        at = gputui("replay", str(recording), "--json", "--at", "5s")
        result["replay_rc"], result["replay_stderr"] = at.returncode, at.stderr[-1000:]
        if at.returncode == 0:
            document = json.loads(at.stdout)
            snapshot = document["snapshot"]
            result["replayed_devices"] = [(d["name"], d["memory_used"]) for d in snapshot["devices"]]
            result["replayed_processes"] = [(p["pid"], p.get("gpu_memory"), p.get("probe") is not None)
                                            for p in snapshot["processes"]]
            result["replayed_breakdowns"] = document.get("breakdowns")
        once = gputui("replay", str(recording), "--once", "--at", "5s")
        (out / "replay-once.txt").write_text(once.stdout + once.stderr)
    finally:
        result["job"] = stop(job)
    return result


OOM_JOB = '''
import torch
from torch import nn

torch.manual_seed(0)
torch.cuda.set_per_process_memory_fraction(0.03)  # about 2.4 GB of an 80 GB card: quick to fill
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
optimizer = torch.optim.AdamW(model.parameters())
x = torch.randn(512, 4096, device="cuda")
kept = []
for step in range(100000):
    optimizer.zero_grad()
    out = model(x)
    out.square().mean().backward()
    optimizer.step()
    kept.append(out.detach().clone())  # the leak that ends it
'''


def part_oom_report(out: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="gputui-oom-"))
    script = work / "oom_job.py"
    script.write_text(OOM_JOB)
    result: dict = {}
    env = {**os.environ, "GPUTUI_OOM_DIR": str(work / "reports"), "NO_COLOR": "1"}
    for probed in (False, True):
        command = [sys.executable, str(script)]
        if probed:
            command = [sys.executable, "-m", "gputui", "run", "--", *command]
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        lines = done.stderr.strip().splitlines()
        key = "probed" if probed else "plain"
        result[key] = {"rc": done.returncode, "seconds": round(time.monotonic() - started, 1),
                       "last_lines": lines[-3:], "error_line": next(
                           (line for line in reversed(lines) if line.startswith("torch.OutOfMemoryError")), None)}
    reports = sorted((work / "reports").glob("oom-*.json")) if (work / "reports").exists() else []
    result["reports"] = [(p.name, oct(p.stat().st_mode & 0o777), p.stat().st_size) for p in reports]
    shown = subprocess.run([sys.executable, "-m", "gputui", "oom"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
    (out / "oom.txt").write_text(shown.stdout + shown.stderr)
    as_json = subprocess.run([sys.executable, "-m", "gputui", "oom", "--json"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    result["oom_rc"], result["oom_json_rc"] = shown.returncode, as_json.returncode
    if as_json.returncode == 0:
        document = json.loads(as_json.stdout)
        report = document["report"]
        result["last_oom"] = report.get("last_oom")
        result["devices"] = report.get("devices")
        result["steps"] = [(s.get("step"), s.get("allocated")) for s in report.get("steps", [])][-3:]
        result["breakdowns"] = document.get("breakdowns")
        result["problems"] = report.get("problems")
    if reports:
        (out / "oom-report.json").write_text(reports[-1].read_text())
    return result


def part_ended(out: Path) -> dict:
    from gputui.collect import open_collector
    from gputui.ui.sources.sampler import Sampler

    work = Path(tempfile.mkdtemp(prefix="gputui-ended-"))
    script = work / "oom_job.py"
    script.write_text(OOM_JOB)
    os.environ["GPUTUI_OOM_DIR"] = str(work / "reports")  # the sampler looks where the job writes
    job = subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable, str(script)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(open_collector())
    seen, result = set(), {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            snapshot = sampler.sample()
            seen |= {r.pid for r in snapshot.probes}
            if snapshot.ended:
                ended = snapshot.ended[-1]
                oom = ended.report.last_oom
                result = {"pid": ended.pid, "probed_pids_seen": sorted(seen), "report_file": ended.report_file,
                          "devices": ended.devices, "gpu_memory": ended.gpu_memory, "user": ended.user,
                          "line": oom.line if oom else None, "phase": oom.phase if oom else None,
                          "step": oom.step if oom else None, "after_exit_s": None}
                break
            if job.poll() is not None and "exited_at" not in result:
                result["exited_at"] = time.monotonic()
            time.sleep(0.5)
        if "exited_at" in result and "pid" in result:
            result["after_exit_s"] = round(time.monotonic() - result.pop("exited_at"), 1)
    finally:
        sampler.close()
        result["job"] = stop(job) if job.poll() is None else {"rc": job.returncode, "stderr": job.stderr.read()[-600:]}
    return result


def part_ddp(out: Path) -> dict:
    stop_file = Path(tempfile.mkdtemp(prefix="gputui-ddp-")) / "stop"
    job = subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable, "-m",
                            "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                            str(ROOT / "tests" / "ddp_job.py"), str(stop_file), "cuda"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result: dict = {}
    try:
        deadline, probes = time.monotonic() + 90, []
        while time.monotonic() < deadline:
            probes = wait_probed(10)
            if len(probes) >= 2:
                break
        result["probes"] = [(p["pid"], p.get("placement")) for p in probes]
        time.sleep(3)
        done = gputui("--json")
        if done.returncode == 0:
            snapshot = json.loads(done.stdout)["snapshot"]
            result["jobs"] = snapshot.get("jobs")
            result["processes"] = [(p["pid"], p.get("gpu_memory"), p.get("probe") is not None,
                                    p.get("command", "")[:80]) for p in snapshot["processes"]]
        result["smi_apps"] = smi_apps()
        once = gputui("--once")
        (out / "ddp-once.txt").write_text(once.stdout + once.stderr)
        listed = gputui("probes")
        (out / "ddp-probes.txt").write_text(listed.stdout + listed.stderr)
    finally:
        stop_file.touch()
        try:
            _, err = job.communicate(timeout=60)
            result["rc"], result["stderr"] = job.returncode, err[-1500:]
        except subprocess.TimeoutExpired:
            result["job"] = stop(job)
    return result


def real_peaks(torch, job, precision: str) -> dict[str, int]:
    """Three real steps of the job on CUDA: each phase's peak allocated (the largest of the three)."""
    optimizer = job.optimizer
    real: dict[str, int] = {}

    def forward():
        if precision == "amp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return job.loss_of(job.forward())
        return job.loss_of(job.forward())

    for _ in range(3):
        optimizer.zero_grad()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        loss = forward()
        peaks = {"forward": torch.cuda.max_memory_allocated()}
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        del loss
        peaks["backward"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        optimizer.step()
        torch.cuda.synchronize()
        peaks["optimizer"] = torch.cuda.max_memory_allocated()
        real = {p: max(real.get(p, 0), v) for p, v in peaks.items()}
    real["steady"] = torch.cuda.memory_allocated()
    return real


def part_estimate() -> dict:
    """Each example job: the estimate on the meta device beside one real CUDA step's phase peaks."""
    import torch

    from gputui.estimate.job import build, load
    from gputui.estimate.step import Settings, measure, prepare

    cases = [(kind, "fp32") for kind in ("mlp", "cnn_batchnorm", "lstm", "gpt", "frozen")]
    cases += [("gpt", "bf16"), ("gpt", "amp")]
    rows = []
    for kind, precision in cases:
        spec = f"{ROOT / 'examples' / 'estimate_models.py'}:{kind}"
        estimated = measure(load(spec), Settings(precision=precision))
        peaks = {p.phase: p.total for p in estimated.phases}
        torch.manual_seed(0)
        torch.set_default_device("cuda")
        try:
            job = prepare(build(load(spec), None), Settings(precision=precision, real=True))
        finally:
            torch.set_default_device(None)
        real = real_peaks(torch, job, precision)
        # What the allocator holds that no tensor of the job is: cuBLAS/cuDNN workspaces, made at the
        # first matrix product and kept. The estimate counts tensors only, so it is taken off.
        workspace = real["steady"] - peaks["steady"]
        rows.append({"job": kind, "precision": precision, "estimate": peaks, "real": real,
                     "non_tensor": workspace,
                     "error_percent": {p: round(100 * (peaks[p] - (real[p] - workspace)) / (real[p] - workspace), 2)
                                       for p in ("forward", "backward", "optimizer")}})
        del job
        torch.cuda.empty_cache()
    gpu = gputui("estimate", f"{ROOT / 'examples' / 'estimate_gpt.py'}:build", "--gpu", "0", "--no-what-if",
                 "--json", timeout=240)
    device = json.loads(gpu.stdout)["estimate"] if gpu.returncode == 0 else gpu.stderr[-1000:]
    if isinstance(device, dict):
        device = {k: device.get(k) for k in ("device_name", "device_total", "device_usable", "largest_batch")}
    return {"rows": rows, "torch": torch.__version__, "with_gpu_flag": device}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", default=PARTS, choices=PARTS)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part:
        runs = {"serve": part_serve, "record": part_record, "oom-report": part_oom_report, "ended": part_ended,
                "ddp": part_ddp}
        result = part_estimate() if args.part == "estimate" else runs[args.part](args.out)
        print(json.dumps(result, default=str))
        return 0
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "smi": smi_gpus()}
    for name in args.only:
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            done = subprocess.run([sys.executable, __file__, str(args.out), "--part", name],
                                  capture_output=True, text=True, timeout=400)
            try:
                results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                results[name] = {"rc": done.returncode, "stdout": done.stdout[-2000:], "stderr": done.stderr[-3000:]}
        except subprocess.TimeoutExpired:
            results[name] = {"rc": "timeout"}
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(results[name], default=str)[:5000], flush=True)
        (args.out / "commands.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
