"""gputui against a real NVIDIA driver and a real CUDA allocator: run this on a machine with a GPU.

What it checks, each part in a process of its own so that one crash is reported, not fatal:

- nvml: `nvidia-smi --query-gpu` beside `gputui --json` (names, UUIDs, totals exact; used/free within
  1 MiB; readings within their noise), and what each NVML call of a sample costs on this driver.
- job: a CUDA training loop (AdamW, a step-dependent tensor held so that every step ends at a different
  allocated figure) under the probe, polled flat out by three pollers and by this script. Every figure
  the probe published is compared with torch.cuda.memory_stats() taken by the job itself, in the same
  process, at the point the reading names (a step's end, or the next forward pass when a monitor asked
  for a fresher one); parameters, gradients and optimizer state with the storages counted in the job;
  each measured step's activations_peak with memory_allocated() before backward less before forward.
  While it runs: `nvidia-smi --query-compute-apps`, `gputui --json` and `--once`, and the live monitor
  headless on the real driver (an SVG screenshot). A twin run without the probe gives the phase peaks
  with reset_peak_memory_stats() at each boundary, and the probe's overhead.
- oom: a job that runs out of CUDA memory under the probe; what its report says about it.
- compile: torch.compile (inductor) on CUDA under the probe: recompiles, warnings, activations seen.
- leak: `total_loss += loss` on CUDA: how many steps until the probe's verdict, in which category.

    python bench/validate_gpu.py OUTDIR [--seconds 20]

Writes OUTDIR/results.json (every figure), OUTDIR/summary.txt (what to copy into docs/validation.md),
real-memory_stats.json and real-memory_snapshot.json (anonymised fixtures), monitor.svg, once.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MiB = 1 << 20

SMI_FIELDS = ("index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory,"
              "temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,clocks.mem,pstate,"
              "pcie.link.gen.current,pcie.link.width.current,fan.speed,driver_version")


def run(cmd: list[str], *, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def gputui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "gputui", *args], timeout=timeout)


def smi_gpus() -> list[dict]:
    out = run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"]).stdout
    names = SMI_FIELDS.split(",")
    return [dict(zip(names, (v.strip() for v in line.split(",")))) for line in out.strip().splitlines()]


def smi_apps() -> list[dict]:
    out = run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"])
    return [dict(zip(("pid", "gpu_uuid", "used_memory"), (v.strip() for v in line.split(","))))
            for line in out.stdout.strip().splitlines() if line.strip()]


def number(text: str):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# -- nvml --------------------------------------------------------------------------------------------


def compare_devices(smi: list[dict], snapshot: dict) -> list[dict]:
    """One row per device: each nvidia-smi field beside gputui's, and whether they agree."""
    rows = []
    for gpu, dev in zip(smi, snapshot["devices"]):
        def pair(field, ours, tolerance, scale=1.0, gpu=gpu):
            theirs = number(gpu[field])
            value = None if ours is None else ours / scale
            ok = (theirs is None and value is None) or (
                theirs is not None and value is not None and abs(theirs - value) <= tolerance)
            return {"field": field, "nvidia_smi": gpu[field], "gputui": value, "ok": ok}

        checks = [
            {"field": "uuid", "nvidia_smi": gpu["uuid"], "gputui": dev["uuid"], "ok": gpu["uuid"] == dev["uuid"]},
            {"field": "name", "nvidia_smi": gpu["name"], "gputui": dev["name"], "ok": gpu["name"] == dev["name"]},
            pair("memory.total", dev["memory_total"], 0, MiB),
            pair("memory.used", dev["memory_used"], 1, MiB),
            pair("memory.free", dev["memory_free"], 1, MiB),
            pair("utilization.gpu", dev["gpu_util"], 10),
            pair("utilization.memory", dev["memory_util"], 10),
            pair("temperature.gpu", dev["temperature"], 2),
            pair("power.draw", dev["power_draw"], 30),
            pair("power.limit", dev["power_limit"], 0.5),
            pair("clocks.sm", dev["clock_sm"], 200),
            pair("clocks.max.sm", dev["clock_sm_max"], 0),
            pair("clocks.mem", dev["clock_memory"], 0),
            pair("pcie.link.gen.current", dev["pcie_generation"], 0),
            pair("pcie.link.width.current", dev["pcie_width"], 0),
            pair("fan.speed", dev["fan_speed"], 5),
            {"field": "pstate", "nvidia_smi": gpu["pstate"], "gputui": dev["performance_state"],
             "ok": gpu["pstate"] == f"P{dev['performance_state']}"},
        ]
        rows.append({"index": dev["index"], "checks": checks, "memory_reserved": dev.get("memory_reserved")})
    return rows


def part_nvml() -> dict:
    """nvidia-smi beside gputui --json, and the cost of each NVML call on this driver."""
    result: dict = {}
    smi = smi_gpus()
    done = gputui("--json")
    result["json_rc"], result["json_stderr"] = done.returncode, done.stderr[-2000:]
    if done.returncode == 0:
        document = json.loads(done.stdout)
        result["devices"] = compare_devices(smi, document["snapshot"])
        result["driver"] = document["snapshot"]["driver"]
        result["monitor"] = document["snapshot"]["monitor"]
        result["problems"] = document["snapshot"]["problems"]
    result["smi"] = smi

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    calls = {
        "GetMemoryInfo": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle),
        "GetMemoryInfo_v2": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2),
        "GetUtilizationRates": lambda: pynvml.nvmlDeviceGetUtilizationRates(handle),
        "GetTemperature": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "GetPowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
        "GetClockInfo(SM)": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "GetComputeRunningProcesses": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "GetGraphicsRunningProcesses": lambda: pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "GetProcessUtilization": lambda: pynvml.nvmlDeviceGetProcessUtilization(handle, 0),
        "GetPcieThroughput(TX)": lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        "GetFanSpeed": lambda: pynvml.nvmlDeviceGetFanSpeed(handle),
        "GetCurrentClocksEventReasons": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "GetEncoderUtilization": lambda: pynvml.nvmlDeviceGetEncoderUtilization(handle),
    }
    costs = {}
    for name, call in calls.items():
        times, error = [], None
        for _ in range(5 if "Pcie" in name else 30):
            started = time.perf_counter()
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - NVMLError, or a function this pynvml lacks
                error = f"{type(exc).__name__}: {exc}"
            times.append(time.perf_counter() - started)
        times.sort()
        costs[name] = {"median_ms": round(times[len(times) // 2] * 1e3, 3), "error": error}
    result["call_ms"] = costs
    pynvml.nvmlShutdown()

    from gputui.collect import open_collector

    collector = open_collector()
    samples = []
    for _ in range(12):
        started, cpu = time.perf_counter(), time.process_time()
        snapshot = collector.sample()
        samples.append({"wall_ms": round((time.perf_counter() - started) * 1e3, 2),
                        "cpu_ms": round((time.process_time() - cpu) * 1e3, 2),
                        "nvml_ms": None if snapshot.monitor is None else snapshot.monitor.nvml_ms})
        time.sleep(0.5)
    result["samples"] = samples
    return result


# -- the CUDA training job (runs in its own process) ------------------------------------------------


def build_job(seed: int = 0):
    import torch
    from torch import nn

    class WithLoss(nn.Module):
        """A small transformer block and its loss inside one module: everything autograd saves is
        saved inside a forward pass the probe watches."""

        def __init__(self, width: int = 1024, classes: int = 64):
            super().__init__()
            self.embed = nn.Linear(256, width)
            self.norm = nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, 8, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            self.bn = nn.BatchNorm1d(width)
            self.head = nn.Linear(width, classes)
            self.frozen = nn.Linear(width, width)
            self.frozen.requires_grad_(False)

        def forward(self, x, y):
            h = self.norm(self.embed(x))
            h = h + self.attn(h, h, h, need_weights=False)[0]
            h = h + self.mlp(h)
            h = self.frozen(h)
            h = self.bn(h.mean(dim=1))
            return nn.functional.cross_entropy(self.head(h), y)

    torch.manual_seed(seed)
    model = WithLoss().cuda()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    return model, optimizer


def batch(size: int):
    """Random inputs and labels for the job's model, on the GPU."""
    import torch

    return torch.randn(size, 16, 256, device="cuda"), torch.randint(0, 64, (size,), device="cuda")


def train_step(forward, optimizer, x, y) -> None:
    """One step as a training loop takes it (``forward`` is the model, or its compiled wrapper)."""
    optimizer.zero_grad()
    forward(x, y).backward()
    optimizer.step()


def held(model, optimizer) -> dict:
    """Bytes of parameters (frozen ones too), gradients, optimizer state and buffers, by storage."""
    import torch

    seen: set = set()

    def size(tensors) -> int:
        total = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.is_cuda and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
        return total

    return {
        "parameters": size(model.parameters()),
        "gradients": size(p.grad for p in model.parameters() if p.grad is not None),
        "optimizer_state": size(v for s in optimizer.state.values() for v in s.values()),
        "buffers": size(model.buffers()),
    }


STAT_KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current",
             "inactive_split_bytes.all.current")


def stats_tuple(torch) -> tuple:
    stats = torch.cuda.memory_stats()
    return tuple(int(stats.get(k, 0)) for k in STAT_KEYS)


def part_job(seconds: float, probed: bool, out: Path) -> int:
    """The training loop; with the probe, it serves until stdin closes after writing its truth."""
    import torch

    model, optimizer = build_job()
    if probed:
        import gputui.probe

        gputui.probe.start()
    print("ready", os.getpid(), flush=True)
    at_end: dict[int, tuple] = {}  # step -> memory_stats at the end of optimizer.step()
    at_forward: dict[int, tuple] = {}  # step -> memory_stats just before the next forward pass
    acts: dict[int, int] = {}  # step -> allocated before backward less before forward
    phases: dict[int, dict] = {}  # the twin's per-phase peaks (reset at each boundary)
    times = []
    step, deadline = 0, time.monotonic() + seconds
    jitter = None
    while time.monotonic() < deadline or step < 30:
        batch = 32 + 8 * (step % 5)
        x = torch.randn(batch, 16, 256, device="cuda")
        y = torch.randint(0, 64, (batch,), device="cuda")
        optimizer.zero_grad()
        torch.cuda.synchronize()
        started = time.perf_counter()
        at_forward[step] = stats_tuple(torch)
        before_forward = torch.cuda.memory_allocated()
        if not probed and step < 3:
            torch.cuda.reset_peak_memory_stats()
        loss = model(x, y)
        if not probed and step < 3:
            forward_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        acts[step + 1] = torch.cuda.memory_allocated() - before_forward
        loss.backward()
        if not probed and step < 3:
            backward_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        # A tensor of a size that depends on the step, held past the step's end: every step ends at an
        # allocated figure of its own, so a reading compared with the wrong step shows.
        jitter = None
        jitter = torch.empty(((step + 1) % 7 + 1) * 65536, device="cuda")
        if not probed and step < 3:
            torch.cuda.reset_peak_memory_stats()
        optimizer.step()
        if not probed and step < 3:
            phases[step + 1] = {"start": before_forward, "forward": forward_peak, "backward": backward_peak,
                                "optimizer": torch.cuda.max_memory_allocated()}
        step += 1
        at_end[step] = stats_tuple(torch)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    del jitter
    truth = {"steps": step, "held": held(model, optimizer), "at_end": at_end, "at_forward": at_forward,
             "activations": acts, "phases": phases, "step_ms_median": sorted(times)[len(times) // 2] * 1e3,
             "memory_stats": torch.cuda.memory_stats()}
    if probed:
        from gputui.model.codec import to_jsonable
        from gputui.probe import runtime

        truth["report"] = to_jsonable(runtime.current().report())
        truth["fixtures"] = fixtures(torch, model, optimizer)
    out.write_text(json.dumps(truth))
    print("truth", flush=True)
    if probed:
        sys.stdin.read()  # serve until the validator has taken its last report
    return 0


def anonymise(frame: dict) -> dict:
    return {**frame, "filename": Path(frame.get("filename", "")).name}


def fixtures(torch, model, optimizer) -> dict:
    """A real memory_snapshot() (segments trimmed) and one recorded with history, paths anonymised."""
    def trim(snapshot, history: bool):
        segments = []
        for segment in snapshot[:8]:
            blocks = [{**b, "frames": [anonymise(f) for f in b.get("frames", [])[:6]]} if history else b
                      for b in segment["blocks"][:24]]
            frames = [anonymise(f) for f in segment.get("frames", [])[:6]]
            segments.append({**segment, "blocks": blocks, "frames": frames})
        return segments

    plain = torch.cuda.memory_snapshot()
    result = {"memory_snapshot": trim(plain, False)}
    try:
        # as the probe's site recording records it (gputui/probe/sites.py): Python frames only
        torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python",
                                                 max_entries=500)
        for _ in range(2):
            train_step(model, optimizer, *batch(16))
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        traces = [[{**e, "frames": [anonymise(f) for f in e.get("frames", [])[:6]]} for e in dev[-40:]]
                  for dev in snap.get("device_traces", [])]
        result["snapshot_with_history"] = {"segments": trim(snap["segments"], True), "device_traces": traces}
    except Exception as exc:  # noqa: BLE001
        result["history_error"] = repr(exc)
    return result


# -- the job part, orchestrated ---------------------------------------------------------------------


def part_job_checks(seconds: float, work: Path, out: Path) -> dict:
    from gputui.link import client
    from gputui.model import ProbeReport
    from gputui.model.codec import from_jsonable

    result: dict = {}
    twin_file = work / "twin.json"
    twin = run([sys.executable, __file__, "--part", "job-run", "--seconds", str(min(seconds, 8)),
                "--unprobed", "--truth", str(twin_file)], timeout=300)
    result["twin_rc"] = twin.returncode
    twin_truth = json.loads(twin_file.read_text()) if twin_file.exists() else {}
    if twin.returncode:
        result["twin_stderr"] = twin.stderr[-3000:]

    truth_file = work / "truth.json"
    job = subprocess.Popen([sys.executable, __file__, "--part", "job-run", "--seconds", str(seconds),
                            "--truth", str(truth_file)], cwd=ROOT, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = job.stdout.readline().split()
    pid = int(line[1])
    pollers = [subprocess.Popen([sys.executable, "tests/probe_stress_job.py", "poll", str(pid), "--seconds",
                                 str(seconds - 2), *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True)
               for extra in ([], [], ["--incremental"])]
    seen: dict[tuple, dict] = {}  # (read_at_step, allocated) -> a report's figures
    steps_seen: dict[int, dict] = {}
    deadline = time.monotonic() + seconds - 2
    during = False
    while time.monotonic() < deadline:
        try:
            report = client.fetch_report(pid, timeout=5.0)
        except client.ProbeUnavailable as exc:
            result.setdefault("fetch_errors", []).append(str(exc))
            time.sleep(0.1)
            continue
        for device in report.devices:
            if device.allocator is not None:
                a = device.allocator
                seen[(report.read_at_step, a.allocated)] = {
                    "step": report.read_at_step, "figures": (a.allocated, a.reserved, a.active, a.inactive_split),
                    "categories": None if device.categories is None else {
                        k: getattr(device.categories, k) for k in
                        ("parameters", "gradients", "optimizer_state", "buffers", "activations", "other")}}
        for record in report.steps:
            if record.allocated is not None:
                steps_seen[record.step] = {"allocated": record.allocated, "reserved": record.reserved,
                                           "activations_peak": record.activations_peak,
                                           "peak_forward": record.peak_forward,
                                           "peak_backward": record.peak_backward,
                                           "peak_optimizer": record.peak_optimizer,
                                           "allocated_at_start": record.allocated_at_start}
        if not during and time.monotonic() > deadline - seconds / 2:
            during = True
            result["during"] = while_running(pid, out)
        time.sleep(0.02)
    result["pollers"] = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in pollers]
    while job.stdout.readline().strip() != "truth":
        if job.poll() is not None:
            break
    final = None
    try:
        final = client.fetch_report(pid, timeout=5.0)
    except client.ProbeUnavailable as exc:
        result["final_error"] = str(exc)
    stdout, stderr = job.communicate("", timeout=60)
    result["job_rc"], result["job_stderr"] = job.returncode, stderr[-3000:]
    if not truth_file.exists():
        return result
    truth = json.loads(truth_file.read_text())
    fixture = truth.pop("fixtures", {})
    result["steps"], result["step_ms_probed"] = truth["steps"], truth["step_ms_median"]
    result["step_ms_unprobed"] = twin_truth.get("step_ms_median")

    # Every published reading against memory_stats at the point it names.
    at_end = {int(k): tuple(v) for k, v in truth["at_end"].items()}
    at_forward = {int(k): tuple(v) for k, v in truth["at_forward"].items()}
    matched = {"step_end": 0, "next_forward": 0, "neither": []}
    for item in seen.values():
        figures = tuple(item["figures"])
        step = item["step"]
        if at_end.get(step) == figures:
            matched["step_end"] += 1
        elif at_forward.get(step) == figures:
            matched["next_forward"] += 1
        else:
            matched["neither"].append({"step": step, "probe": figures, "step_end": at_end.get(step),
                                       "next_forward": at_forward.get(step)})
    matched["neither_count"] = len(matched["neither"])
    matched["neither"] = matched["neither"][:10]
    result["readings"] = matched

    # Step records: allocated at the step's end, and activations_peak against the job's own figure.
    records = {"allocated_equal": 0, "allocated_differ": [], "activations": []}
    for step, record in sorted(steps_seen.items()):
        expected = at_end.get(step, (None,))[0]
        if record["allocated"] == expected:
            records["allocated_equal"] += 1
        else:
            records["allocated_differ"].append((step, record["allocated"], expected))
        if record["activations_peak"] is not None:
            real = truth["activations"].get(str(step))
            records["activations"].append((step, record["activations_peak"], real))
    records["allocated_differ_count"] = len(records["allocated_differ"])
    records["allocated_differ"] = records["allocated_differ"][:10]
    records["activations"] = records["activations"][:20]
    records["first_steps"] = {s: steps_seen.get(s) for s in (1, 2, 3)}
    records["twin_phases"] = twin_truth.get("phases")
    result["records"] = records

    # The breakdown against the storages counted in the job, from the last report.
    if final is not None:
        device = next(d for d in final.devices if d.allocator is not None)
        c = device.categories
        result["breakdown"] = {
            "probe": {k: getattr(c, k) for k in ("parameters", "gradients", "optimizer_state", "buffers",
                                                  "activations", "other")},
            "truth": truth["held"], "read_at_step": final.read_at_step,
            "allocated": device.allocator.allocated, "problems": list(final.problems),
            "limits": list(final.limits)}
    in_process = from_jsonable(ProbeReport, truth["report"])
    result["in_process_problems"] = list(in_process.problems)

    (out / "real-memory_stats.json").write_text(json.dumps(truth["memory_stats"], indent=1, sort_keys=True))
    if fixture:
        (out / "real-memory_snapshot.json").write_text(json.dumps(fixture, indent=1))
    return result


def while_running(pid: int, out: Path) -> dict:
    """What nvidia-smi and gputui say about the running job, and the live monitor on this driver."""
    result: dict = {"apps": smi_apps()}
    done = gputui("--json")
    if done.returncode == 0:
        snapshot = json.loads(done.stdout)["snapshot"]
        result["processes"] = [{k: p.get(k) for k in ("pid", "local_pid", "gpu_memory", "device_index", "kind", "name")}
                               for p in snapshot["processes"]]
        probes = [r for r in snapshot["probes"] if r["pid"] == pid]
        if probes:
            result["probe_allocator"] = [d["allocator"] for d in probes[0]["devices"]]
    else:
        result["json_error"] = done.stderr[-2000:]
    once = gputui("--once")
    (out / "once.txt").write_text(once.stdout + once.stderr)
    result["once_rc"] = once.returncode
    shot = run([sys.executable, __file__, "--part", "tui", "--svg", str(out / "monitor.svg")], timeout=120)
    result["tui_rc"], result["tui_output"] = shot.returncode, (shot.stdout + shot.stderr)[-3000:]
    return result


def part_tui(svg: Path) -> int:
    """The live monitor on the real driver, headless at 120x40, for a few refreshes."""
    import asyncio

    from gputui.collect import open_collector
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.sources.sampler import Sampler
    from gputui.ui.startup.monitor_options import MonitorOptions

    async def main():
        app = GpuTuiApp(Sampler(open_collector()), MonitorOptions(interval=1.0))
        async with app.run_test(size=(120, 40)) as pilot:
            while app.samples < 3:
                await pilot.pause(0.1)
            await pilot.pause(0.3)
            svg.write_text(app.export_screenshot())
            await pilot.press("enter")
            await pilot.pause(1.5)
            svg.with_name("detail.svg").write_text(app.export_screenshot())
            await pilot.press("escape")
            # Its own CPU over a steady stretch at a 1 s refresh (headless: no terminal to write to).
            cpu, wall, samples = time.process_time(), time.monotonic(), app.samples
            await pilot.pause(12.0)
            share = (time.process_time() - cpu) / (time.monotonic() - wall) * 100
        print("samples", app.samples, "cpu_percent", round(share, 2), "refreshes", app.samples - samples)

    asyncio.run(main())
    return 0


# -- oom, compile, leak (each in its own process) ---------------------------------------------------


def part_oom() -> int:
    import torch

    import gputui.probe
    from gputui.model.codec import to_jsonable

    model, optimizer = build_job()
    probe = gputui.probe.start()
    torch.cuda.set_per_process_memory_fraction(0.02)
    caught = None
    for size in (32, 4096, 65536):
        try:
            train_step(model, optimizer, *batch(size))
        except torch.OutOfMemoryError as exc:
            caught = str(exc).splitlines()[0]
            break
    report = probe.report()
    print(json.dumps({"caught": caught, "last_oom": to_jsonable(report.last_oom),
                      "num_ooms": torch.cuda.memory_stats().get("num_ooms"),
                      "problems": list(report.problems)}))
    return 0


def part_compile() -> int:
    """torch.compile (inductor) on CUDA under the probe, started first as `gputui run` starts it; the
    caller counts recompiles (TORCH_LOGS=recompiles) and warnings on stderr."""
    import torch

    import gputui.probe

    probe = gputui.probe.start()
    model, optimizer = build_job()
    compiled = torch.compile(model)
    for _ in range(30):
        train_step(compiled, optimizer, *batch(32))
    report = probe.report()
    categories = [d.categories for d in report.devices if d.categories is not None]
    print(json.dumps({"activations": categories[0].activations if categories else None,
                      "parameters": categories[0].parameters if categories else None,
                      "truth": held(model, optimizer),
                      "steps": len(report.steps), "problems": list(report.problems),
                      "limits": list(report.limits)}))
    return 0


def part_leak(steps: int) -> int:
    """An evaluation inside the training loop without torch.no_grad(), its outputs kept: each keeps
    its autograd graph and the activations saved in it. How soon the probe calls it, and what."""
    import torch

    import gputui.probe
    from gputui.analysis.leaks import leak_verdict

    probe = gputui.probe.start()
    model, optimizer = build_job()
    kept = []
    first, category, allocated, states = None, None, [], []
    for step in range(1, steps + 1):
        if step > 200 and len(kept) > 100:
            del kept[:50]  # room on the device; the leak goes on
        x, y = batch(32)
        train_step(model, optimizer, x, y)
        allocated.append(torch.cuda.memory_allocated())
        kept.append(model(x[:4], y[:4]))  # the leak: no torch.no_grad(), the graph kept
        if step % 5 == 0 and first is None:
            report = probe.report()
            verdict = leak_verdict(report)
            seen = (verdict.state, verdict.category, verdict.reason)
            if not states or states[-1][1:] != seen:  # how the verdict got there, step by step
                states.append((step, *seen, len(report.steps)))
            if verdict.state == "leak":
                first, category = step, verdict.category
    report = probe.report()
    verdict = leak_verdict(report)
    half = len(allocated) // 2
    per_step = (allocated[-1] - allocated[half]) / (len(allocated) - 1 - half)
    recorded = {r.step: r.allocated for r in report.steps if r.allocated is not None}
    same = sum(1 for s, a in recorded.items() if allocated[s - 1] == a)
    kept_figures = [(r.step, r.activations_kept) for r in report.steps if r.activations_kept is not None][-5:]
    print(json.dumps({"sites": [(s.where, s.live_bytes[-3:]) for s in report.sites[:5]],
                      "recorded_steps": list(report.recorded_steps), "recording": report.recording,
                      "keepers": [(k.name, k.what, k.per_step, list(k.where)) for k in report.keepers[:3]],
                      "recording_cost": report.recording_cost, "first_leak_step": first, "states": states,
                      "category": category, "state": verdict.state,
                      "reason": verdict.reason, "verdict_per_step": verdict.allocated_per_step,
                      "growth_per_step": per_step, "activations_kept": kept_figures,
                      "step_figures_equal": same, "step_figures": len(recorded),
                      "problems": list(report.problems)}))
    return 0


def part_run() -> int:
    """`gputui run -- python examples/train.py` on CUDA, read with `gputui probes` and `gputui probe`."""
    job = subprocess.Popen([sys.executable, "-m", "gputui", "run", "--", sys.executable, "examples/train.py",
                            "--steps", "200000", "--every", "1000000"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result: dict = {}
    try:
        probes: list = []
        for _ in range(60):
            time.sleep(0.5)
            listed = gputui("probes", "--json")
            probes = json.loads(listed.stdout).get("probes", []) if listed.returncode == 0 else []
            if probes and probes[0].get("steps"):
                break
        result["probes"] = [(p["pid"], p["command"]) for p in probes]
        if probes:
            one = gputui("probe", str(probes[0]["pid"]), "--json")
            document = json.loads(one.stdout)
            result["devices"] = document["report"]["devices"]
            result["breakdowns"] = document.get("breakdowns")
            result["problems"] = document["report"]["problems"]
            # examples/train.py: Linear(256, 512), Linear(512, 512), Linear(512, 10), fp32, Adam
            params = (256 * 512 + 512) + (512 * 512 + 512) + (512 * 10 + 10)
            result["expected"] = {"parameters": 4 * params, "gradients": 4 * params, "optimizer_state": 8 * params}
            text = gputui("probe", str(probes[0]["pid"]))
            result["text"] = text.stdout[-4000:]
    finally:
        job.terminate()
        _, err = job.communicate(timeout=30)
        result["rc"], result["stderr"] = job.returncode, err[-2000:]
    print(json.dumps(result))
    return 0


def part_overhead(rounds: int) -> int:
    """The probe's cost to a CUDA job: blocks of steps without it, with it, and with it polled flat out
    by three pollers, interleaved in one process; median ms per step of each."""
    import torch

    import gputui.probe

    model, optimizer = build_job()
    x, y = batch(48)

    def block(steps: int = 100) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            train_step(model, optimizer, x, y)
        torch.cuda.synchronize()
        return (time.perf_counter() - started) / steps * 1e3

    block(50)
    times: dict[str, list] = {"off": [], "on": [], "polled flat out": []}
    for _ in range(rounds):
        times["off"].append(block())
        gputui.probe.start()
        block(20)
        times["on"].append(block())
        pollers = [subprocess.Popen([sys.executable, "tests/probe_stress_job.py", "poll", str(os.getpid()),
                                     "--seconds", "30"], cwd=ROOT, stdout=subprocess.DEVNULL)
                   for _ in range(3)]
        time.sleep(1.0)
        times["polled flat out"].append(block())
        for poller in pollers:
            poller.kill()
            poller.wait()
        gputui.probe.stop()
    median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(json.dumps({"ms_per_step": times, "median": median,
                      "on_vs_off": median["on"] / median["off"] - 1,
                      "flat_out_vs_off": median["polled flat out"] / median["off"] - 1}))
    return 0


# -- main -------------------------------------------------------------------------------------------


def one_part(name: str, *args: str, timeout: float = 300) -> dict:
    started = time.monotonic()
    env = {"TORCH_LOGS": "recompiles"} if name == "compile" else None
    try:
        done = run([sys.executable, __file__, "--part", name, *args], timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "seconds": timeout}
    result: dict = {"rc": done.returncode, "seconds": round(time.monotonic() - started, 1)}
    try:
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        result["stdout"] = done.stdout[-2000:]
    if done.returncode or "Traceback" in done.stderr or name == "compile":
        result["stderr"] = done.stderr[-3000:]
        result["recompiles"] = done.stderr.count("Recompiling")
        result["warnings"] = done.stderr.count("Warning")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--truth", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--unprobed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--svg", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", default=("nvml", "job", "run", "oom", "leak", "compile"))
    args = parser.parse_args(argv)
    if args.part == "job-run":
        return part_job(args.seconds, not args.unprobed, args.truth)
    if args.part == "tui":
        return part_tui(args.svg)
    if args.part == "oom":
        return part_oom()
    if args.part == "compile":
        return part_compile()
    if args.part == "leak":
        return part_leak(300)
    if args.part == "overhead":
        return part_overhead(7)
    if args.part == "run":
        return part_run()
    if args.part == "nvml":
        print(json.dumps(part_nvml(), default=str))
        return 0

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "gputui-validate"
    work.mkdir(exist_ok=True)
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "smi": smi_gpus()}
    try:
        import torch

        results["torch"] = torch.__version__
    except ImportError:
        pass
    for name in args.only:
        print(f"== {name}", flush=True)
        if name == "job":
            try:
                results["job"] = part_job_checks(args.seconds, work, out)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other parts
                import traceback

                results["job"] = {"error": traceback.format_exc()[-3000:], "exc": repr(exc)}
        else:
            results[name] = one_part(name, timeout=400)
        print(json.dumps(results[name], default=str)[:6000], flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
