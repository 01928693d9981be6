"""Hand-built snapshots and probe reports for the plain modes' tests, the golden-file check, and a
small JSON Schema validator (so the schema checks run without the jsonschema package)."""

import os
from pathlib import Path

from gputui.model import (
    AllocatorStats,
    Device,
    Driver,
    GpuProcess,
    Host,
    MemoryCategories,
    MigInstance,
    OomRecord,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
)
from gputui.plain.schema import SCHEMA

GiB, MiB = 1 << 30, 1 << 20
T = 1767603600.0  # 2026-01-05 09:00:00 UTC
GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPUTUI_REGEN_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with GPUTUI_REGEN_GOLDEN=1 and review it"
    assert actual == path.read_text(encoding="utf-8")


def training_report(pid: int = 4242) -> ProbeReport:
    return ProbeReport(
        pid=pid, taken_at=T, torch_version="2.13.0", command=("python", "train.py", "--lr", "3e-4"),
        devices=(ProbeDevice(
            "cuda:0", cuda_index=0, uuid="GPU-aaaa",
            allocator=AllocatorStats(allocated=8 * GiB, reserved=9 * GiB + 512 * MiB,
                                     inactive_split=300 * MiB, allocated_peak=12 * GiB,
                                     reserved_peak=14 * GiB, alloc_retries=2, ooms=1, segments=40,
                                     largest_free_block=GiB, expandable_segments=False),
            categories=MemoryCategories(parameters=GiB, gradients=GiB, optimizer_state=2 * GiB,
                                        activations=3 * GiB, other=1 * GiB)),),
        steps=(StepRecord(step=411, ended_at=T - 1.2, duration=0.2, allocated=5 * GiB),
               StepRecord(step=412, ended_at=T - 1, duration=0.21, allocated=5 * GiB,
                          reserved=9 * GiB + 512 * MiB, peak_forward=7 * GiB,
                          peak_backward=8 * GiB, peak_optimizer=8 * GiB + 512 * MiB)),
        last_oom=OomRecord(at=T - 600, device="cuda:0", requested=2 * GiB, free=GiB,
                           allocated=20 * GiB, message="CUDA out of memory. Tried to allocate 2.00 GiB",
                           where=("train.py:30 in main", "train.py:42 in forward")),
    )


def workstation() -> Snapshot:
    cpu_job = ProbeReport(pid=777, taken_at=T, torch_version="2.13.0+cpu", command=("python", "eval.py"),
                          devices=(ProbeDevice("cpu"),),
                          steps=(StepRecord(step=3, ended_at=T, duration=0.0048),))
    return Snapshot(
        taken_at=T,
        driver=Driver("550.54.15", "12.4", "12.550.54.15"),
        devices=(
            Device(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-aaaa", cuda_index=0,
                   memory_total=24 * GiB, memory_used=12 * GiB, gpu_util=87, memory_util=40,
                   temperature=71, temperature_slowdown=84, fan_speed=55, power_draw=402.3,
                   power_limit=450.0, clock_sm=2520, clock_sm_max=2820, clock_memory=10501,
                   performance_state=2, throttle_reasons=("sw_power_cap",), compute_mode="default"),
            Device(index=1, name="NVIDIA RTX A4000", uuid="GPU-bbbb", lost="GPU is lost"),
            Device(index=2, name="NVIDIA A100-SXM4-40GB", uuid="GPU-cccc", cuda_index=1,
                   memory_total=40 * GiB, memory_used=5 * GiB, mig_enabled=True, power_limit=400.0,
                   mig_instances=(MigInstance(index=0, uuid="MIG-1", gpu_instance_id=1,
                                              compute_instance_id=0, profile="3g.20gb",
                                              memory_total=20 * GiB, memory_used=4 * GiB),)),
        ),
        processes=(
            GpuProcess(pid=4242, device_index=0, gpu_memory=10 * GiB, sm_util=85, user="alice",
                       command=("python", "train.py", "--lr", "3e-4"), cpu_percent=101.5,
                       host_memory=3 * GiB, started_at=T - 3723),
            GpuProcess(pid=1001, device_index=0, gpu_memory=300 * MiB, kind="graphics", user="root",
                       command=("/usr/lib/xorg/Xorg", "vt1", "-displayfd", "3", "-auth",
                                "/run/user/1000/gdm/Xauthority", "-nolisten", "tcp"),
                       cpu_percent=0.3, host_memory=120 * MiB, started_at=T - 3 * 86400),
            GpuProcess(pid=5555, device_index=0, gpu_memory=900 * MiB, user="bob", state="denied",
                       note="access denied", name="python3"),
            GpuProcess(pid=7777, device_index=0, gpu_memory=200 * MiB, state="gone", note="exited"),
            GpuProcess(pid=6666, device_index=2, gpu_memory=4 * GiB, gpu_instance_id=1,
                       compute_instance_id=0, state="unmapped",
                       note="host pid not visible in this container"),
        ),
        host=Host(hostname="ws-01", cpu_count=32, cpu_percent=23.5, memory_total=128 * GiB,
                  memory_used=40 * GiB, swap_total=8 * GiB, swap_used=0, load_average=(3.2, 2.5, 1.1)),
        probes=(training_report(), cpu_job),
        source="sim:workstation",
        problems=("GPU 1: GPU is lost",),
    )


# ------------------------------------------------------------------------------------ validator
# A small draft 2020-12 validator for the keywords our schema uses, so the checks run on a clean
# machine without the jsonschema package.

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def errors(value, schema, path="$", root=SCHEMA):
    """Every way ``value`` breaks ``schema``, as 'path: why' strings."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return errors(value, root["$defs"][name], path, root)
    found = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[k](value) for k in kinds):
            return [f"{path}: {value!r} is not {kinds}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} not in {schema['enum']}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path}: {value} > {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        found += [f"{path}: missing {k}" for k in schema.get("required", ()) if k not in value]
        for key, item in value.items():
            if key in props:
                found += errors(item, props[key], f"{path}.{key}", root)
            elif schema.get("additionalProperties") is False:
                found.append(f"{path}: unexpected {key}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                found += errors(item, schema["items"], f"{path}[{i}]", root)
    if "anyOf" in schema:
        branches = [errors(value, s, path, root) for s in schema["anyOf"]]
        if all(branches):
            found += [problem for branch in branches for problem in branch]
    if "oneOf" in schema:
        branches = [errors(value, s, path, root) for s in schema["oneOf"]]
        passing = [b for b in branches if not b]
        if len(passing) != 1:
            found.append(f"{path}: matches {len(passing)} of oneOf")
            found += [problem for branch in branches for problem in branch]
    return found


# What the CLI's modes print of a hand-made snapshot or report: judged once by the sampling pipeline's
# judge (one sample: no memory trends yet), then rendered, as the modes do.

def judged(snapshot):
    from gputui.sample.judge import Judge

    return Judge()(snapshot).judgements


def once_text(snapshot, **kw):
    from gputui.plain.render import render

    return render(snapshot, judged(snapshot), **kw)


def judged_document(snapshot):
    from gputui.plain.document import snapshot_document

    return snapshot_document(snapshot, judged(snapshot))


def probe_text(report, snapshot=None, **kw):
    from gputui.plain.report import render_probe
    from gputui.sample.judge import judge_report

    return render_probe(report, snapshot, judge_report(report, snapshot), **kw)


def judged_probe_document(report, snapshot=None):
    from gputui.plain.document import probe_document
    from gputui.sample.judge import judge_report

    return probe_document(report, snapshot, judge_report(report, snapshot))
