"""The JSON Schema (draft 2020-12) of the documents ``--json``, ``probe --json`` and ``probes --json`` print.

Kept as Python rather than a .json file so it ships inside the package with no packaging setup;
``python -m gputui.plain.schema`` prints it. Field meanings and units: docs/json-schema.md.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_ID = "https://gputui.invalid/schema/v1"  # an identifier, not a URL to fetch


def _nullable(kind: str | list[str], description: str, **more: Any) -> dict[str, Any]:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return {"type": [*kinds, "null"], "description": description, **more}


def _exact(kind: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **more}


def _obj(properties: dict[str, Any], description: str) -> dict[str, Any]:
    """An object with exactly these properties, every one present (null when not known)."""
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


def _list(items: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": items}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _strings(description: str) -> dict[str, Any]:
    return _list({"type": "string"}, description)


BYTES = {"minimum": 0}
PERCENT = {"minimum": 0}
PID = {"minimum": 1}

DEFS: dict[str, Any] = {
    "Driver": _obj({
        "driver_version": _nullable("string", "NVIDIA driver version, e.g. \"550.54.15\""),
        "cuda_driver_version": _nullable("string", "highest CUDA version the driver supports, e.g. \"12.4\""),
        "nvml_version": _nullable("string", "NVML library version"),
    }, "Versions of the NVIDIA software stack"),
    "MigInstance": _obj({
        "index": _exact("integer", "MIG device index within its parent GPU", minimum=0),
        "uuid": _nullable("string", "MIG device UUID (\"MIG-...\")"),
        "gpu_instance_id": _nullable("integer", "GPU instance id"),
        "compute_instance_id": _nullable("integer", "compute instance id"),
        "profile": _nullable("string", "MIG profile, e.g. \"1g.10gb\""),
        "memory_total": _nullable("integer", "memory of the instance (bytes)", **BYTES),
        "memory_used": _nullable("integer", "memory in use (bytes)", **BYTES),
        "cuda_index": _nullable("integer", "CUDA device index under the current CUDA_VISIBLE_DEVICES; null if hidden"),
    }, "One MIG device carved out of a physical GPU"),
    "Device": _obj({
        "index": _exact("integer", "NVML index (nvidia-smi order)", minimum=0),
        "name": _nullable("string", "product name"),
        "uuid": _nullable("string", "GPU UUID (\"GPU-...\")"),
        "pci_bus_id": _nullable("string", "PCI bus id, e.g. \"00000000:17:00.0\""),
        "cuda_index": _nullable("integer", "CUDA device index under the current CUDA_VISIBLE_DEVICES; null if hidden"),
        "lost": _nullable("string", "why the GPU stopped answering; null when healthy"),
        "memory_total": _nullable("integer", "total memory (bytes)", **BYTES),
        "memory_used": _nullable("integer", "used memory (bytes)", **BYTES),
        "memory_free": _nullable("integer", "free memory (bytes)", **BYTES),
        "memory_reserved": _nullable("integer", "driver/firmware reservation (bytes; memory info v2 only)", **BYTES),
        "gpu_util": _nullable("integer", "percent of time a kernel was running (percent)", **PERCENT),
        "memory_util": _nullable("integer", "percent of time memory was read or written (percent)", **PERCENT),
        "encoder_util": _nullable("integer", "video encoder utilisation (percent)", **PERCENT),
        "decoder_util": _nullable("integer", "video decoder utilisation (percent)", **PERCENT),
        "temperature": _nullable("integer", "GPU temperature (degrees C)"),
        "temperature_slowdown": _nullable("integer", "temperature at which the GPU slows down (degrees C)"),
        "fan_speed": _nullable("integer", "fan speed (percent of maximum)", **PERCENT),
        "power_draw": _nullable("number", "power draw (watts)", minimum=0),
        "power_limit": _nullable("number", "enforced power limit (watts)", minimum=0),
        "clock_sm": _nullable("integer", "SM clock (MHz)", minimum=0),
        "clock_sm_max": _nullable("integer", "maximum SM clock (MHz)", minimum=0),
        "clock_memory": _nullable("integer", "memory clock (MHz)", minimum=0),
        "clock_memory_max": _nullable("integer", "maximum memory clock (MHz)", minimum=0),
        "performance_state": _nullable("integer", "performance state P0 (fastest) to P15", minimum=0, maximum=15),
        "pcie_generation": _nullable("integer", "current PCIe link generation"),
        "pcie_generation_max": _nullable("integer", "maximum PCIe link generation"),
        "pcie_width": _nullable("integer", "current PCIe link width (lanes)"),
        "pcie_width_max": _nullable("integer", "maximum PCIe link width (lanes)"),
        "pcie_rx": _nullable("integer", "PCIe receive throughput (bytes/s)", **BYTES),
        "pcie_tx": _nullable("integer", "PCIe transmit throughput (bytes/s)", **BYTES),
        "pcie_read_at": _nullable("number", "when pcie_rx and pcie_tx were read (seconds since the epoch); "
                                            "they are read every few seconds, not every sample"),
        "throttle_reasons": {
            "type": ["array", "null"],
            "description": "why the clocks are held down; [] = full speed; null = not reported",
            "items": {"enum": ["hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal",
                               "sw_power_cap", "sync_boost", "app_clocks", "display_clocks", "idle"]},
        },
        "ecc_corrected": _nullable("integer", "corrected ECC errors since the driver loaded (count)", minimum=0),
        "ecc_uncorrected": _nullable("integer", "uncorrected ECC errors since the driver loaded (count)", minimum=0),
        "mig_enabled": _nullable("boolean", "MIG mode is on"),
        "mig_instances": _list(_ref("MigInstance"), "MIG devices of this GPU"),
        "compute_mode": {
            "enum": ["default", "exclusive_thread", "prohibited", "exclusive_process", None],
            "description": "compute mode",
        },
    }, "One physical GPU"),
    "GpuProcess": _obj({
        "pid": _exact("integer", "PID as NVML reports it (host PID namespace)", **PID),
        "device_index": _exact("integer", "NVML index of the GPU", minimum=0),
        "local_pid": _nullable("integer", "the same process's PID in gputui's PID namespace; null if unmapped", **PID),
        "kind": {"enum": ["compute", "graphics", "compute+graphics"], "description": "context type"},
        "gpu_instance_id": _nullable("integer", "MIG GPU instance; null outside MIG"),
        "compute_instance_id": _nullable("integer", "MIG compute instance; null outside MIG"),
        "gpu_memory": _nullable("integer", "GPU memory NVML charges to the process on this GPU (bytes)", **BYTES),
        "sm_util": _nullable("integer", "SM utilisation of this process (percent)", **PERCENT),
        "memory_util": _nullable("integer", "memory utilisation of this process (percent)", **PERCENT),
        "state": {"enum": ["ok", "gone", "denied", "zombie", "unmapped"],
                  "description": "whether the host process could be read"},
        "name": _nullable("string", "process name"),
        "command": _strings("command line (argv); [] when unknown"),
        "user": _nullable("string", "owner's user name"),
        "ppid": _nullable("integer", "parent PID (gputui's namespace)"),
        "cpu_percent": _nullable("number", "CPU use since the previous sample (percent of one core)", minimum=0),
        "host_memory": _nullable("integer", "resident host memory, RSS (bytes)", **BYTES),
        "started_at": _nullable("number", "start time (seconds since the epoch)"),
        "note": _nullable("string", "why something is missing, for people"),
    }, "One process holding a context on one GPU (a process on two GPUs appears twice)"),
    "HostProcess": _obj({
        "pid": _exact("integer", "PID", **PID),
        "ppid": _nullable("integer", "parent PID"),
        "name": _nullable("string", "process name"),
        "command": _strings("command line (argv)"),
        "user": _nullable("string", "owner's user name"),
        "cpu_percent": _nullable(
            "number", "probed processes: CPU use since the previous sample (percent of one core)", minimum=0),
        "host_memory": _nullable("integer", "probed processes: resident host memory, RSS (bytes)", **BYTES),
        "started_at": _nullable("number", "probed processes: start time (seconds since the epoch)"),
    }, "A process holding no GPU: an ancestor of a GPU process, or a probed process NVML does not list"),
    "Host": _obj({
        "hostname": _exact("string", "host name"),
        "cpu_count": _nullable("integer", "logical CPUs", minimum=1),
        "cpu_percent": _nullable("number", "CPU use of all cores since the previous sample (percent)", minimum=0),
        "memory_total": _nullable("integer", "physical memory (bytes)", **BYTES),
        "memory_used": _nullable("integer", "memory in use (bytes)", **BYTES),
        "swap_total": _nullable("integer", "swap (bytes)", **BYTES),
        "swap_used": _nullable("integer", "swap in use (bytes)", **BYTES),
        "load_average": {
            "type": ["array", "null"], "description": "1, 5 and 15 minute load averages",
            "items": {"type": "number"}, "minItems": 3, "maxItems": 3,
        },
    }, "The machine the GPUs are in"),
    "MonitorCost": _obj({
        "cpu_percent": _nullable("number", "gputui's own CPU use since its previous sample (percent of one core)",
                                 minimum=0),
        "nvml_ms": _nullable("number", "time spent in NVML calls for this snapshot (milliseconds)", minimum=0),
        "sample_ms": _nullable("number", "time to take this snapshot (milliseconds)", minimum=0),
    }, "What taking the snapshot cost gputui itself"),
    "MemoryCategories": _obj({
        "parameters": _nullable("integer", "model parameters (bytes)", **BYTES),
        "gradients": _nullable("integer", "parameter gradients (bytes)", **BYTES),
        "optimizer_state": _nullable("integer", "optimizer state such as Adam's moments (bytes)", **BYTES),
        "activations": _nullable("integer", "tensors saved for backward: held now, or the peak of "
                                 "step activations_step where that is set (bytes)", **BYTES),
        "other": _nullable("integer", "every other live tensor (bytes)", **BYTES),
        "buffers": _nullable("integer", "the models' buffers, e.g. BatchNorm statistics (bytes)", **BYTES),
        "activations_step": _nullable("integer", "set when activations is the peak of this measured "
                                      "step, read between steps (after backward freed the graph); "
                                      "0: the latest forward pass's peak, before any optimizer step",
                                      minimum=0),
    }, "Live tensor bytes by purpose, deduplicated by storage"),
    "AllocatorStats": _obj({
        "allocated": _exact("integer", "bytes in live tensors (bytes)", **BYTES),
        "reserved": _exact("integer", "bytes the caching allocator holds from CUDA (bytes)", **BYTES),
        "active": _nullable("integer", "bytes in active blocks (bytes)", **BYTES),
        "inactive_split": _nullable("integer", "free bytes stuck inside split blocks: fragmentation (bytes)", **BYTES),
        "requested": _nullable("integer", "bytes the program asked for before rounding (bytes)", **BYTES),
        "allocated_peak": _nullable("integer", "peak of allocated (bytes)", **BYTES),
        "reserved_peak": _nullable("integer", "peak of reserved (bytes)", **BYTES),
        "active_peak": _nullable("integer", "peak of active (bytes)", **BYTES),
        "inactive_split_peak": _nullable("integer", "peak of inactive_split (bytes)", **BYTES),
        "requested_peak": _nullable("integer", "peak of requested (bytes)", **BYTES),
        "alloc_retries": _nullable("integer", "cache flushes forced by a failed cudaMalloc (count)", minimum=0),
        "ooms": _nullable("integer", "out-of-memory errors (count)", minimum=0),
        "segments": _nullable("integer", "cudaMalloc segments held (count)", minimum=0),
        "largest_free_block": _nullable("integer", "biggest block reusable without a new cudaMalloc (bytes)", **BYTES),
        "settings": _nullable("string", "PYTORCH_CUDA_ALLOC_CONF as the allocator sees it"),
        "expandable_segments": _nullable("boolean", "expandable segments are on"),
    }, "torch.cuda caching-allocator counters for one device"),
    "ProbeDevice": _obj({
        "device": _exact("string", "\"cuda:N\" or \"cpu\""),
        "cuda_index": _nullable("integer", "CUDA index inside the probed process"),
        "uuid": _nullable("string", "GPU UUID, matching Device.uuid"),
        "allocator": {"anyOf": [_ref("AllocatorStats"), {"type": "null"}],
                      "description": "allocator counters; null for a CPU device"},
        "categories": {"anyOf": [_ref("MemoryCategories"), {"type": "null"}],
                       "description": "where the live tensor bytes went"},
    }, "One device a probed process uses"),
    "StepRecord": _obj({
        "step": _exact("integer", "step number", minimum=0),
        "ended_at": _exact("number", "end of the step (seconds since the epoch)"),
        "duration": _nullable("number", "step time (seconds)", minimum=0),
        "device": _nullable("string", "device the figures are for"),
        "allocated": _nullable("integer", "allocated at the end of the step (bytes)", **BYTES),
        "reserved": _nullable("integer", "reserved at the end of the step (bytes)", **BYTES),
        "inactive_split": _nullable("integer", "fragmentation at the end of the step (bytes)", **BYTES),
        "alloc_retries": _nullable("integer", "allocator retries so far (count)", minimum=0),
        "peak_forward": _nullable("integer", "peak allocated during forward (bytes)", **BYTES),
        "peak_backward": _nullable("integer", "peak allocated during backward (bytes)", **BYTES),
        "peak_optimizer": _nullable("integer", "peak allocated during optimizer.step() (bytes)", **BYTES),
        "categories": {"anyOf": [_ref("MemoryCategories"), {"type": "null"}],
                       "description": "categories at the end of the step"},
        "host_memory": _nullable("integer", "resident memory of the process at the end of the step "
                                 "(bytes; CPU-only jobs)", **BYTES),
        "host_allocated": _nullable("integer", "bytes the C allocator had handed out at the end of "
                                    "the step (glibc; CPU-only jobs)", **BYTES),
        "activations_kept": _nullable("integer", "bytes saved for backward during the step and still "
                                      "held at its end: a graph kept past its step (measured steps)",
                                      **BYTES),
        "activations_peak": _nullable("integer", "the most bytes saved for backward held at once "
                                      "during the step (measured steps)", **BYTES),
        "allocated_at_start": _nullable("integer", "memory at the start of the step's first forward "
                                        "pass, on the same terms as allocated (measured steps)", **BYTES),
    }, "One training step, bounded by optimizer.step() calls"),
    "OomRecord": _obj({
        "at": _exact("number", "when (seconds since the epoch)"),
        "device": _nullable("string", "device that ran out"),
        "requested": _nullable("integer", "size of the failed allocation (bytes)", **BYTES),
        "free": _nullable("integer", "free device memory at the time (bytes)", **BYTES),
        "allocated": _nullable("integer", "allocated at the time (bytes)", **BYTES),
        "reserved": _nullable("integer", "reserved at the time (bytes)", **BYTES),
        "message": _exact("string", "the error message"),
        "where": _strings("Python frames, \"file.py:123 in function\", innermost last"),
    }, "The last out-of-memory error"),
    "AllocationSite": _obj({
        "where": _exact("string", "innermost user frame, \"train.py:42 in train_step\""),
        "live_bytes": _list({"type": "integer", "minimum": 0},
                            "live bytes at the end of each recorded step (bytes)"),
        "stack": _strings("a few frames, innermost last"),
    }, "Live bytes allocated from one place in the code"),
    "LeakKeeper": _obj({
        "name": _exact("string", "the name in the user's code, \"total_loss\", \"self.history\""),
        "scope": {"enum": ["local", "attribute", "global"], "description": "where the name lives"},
        "what": _exact("string", "what it is: \"a list\", \"a tensor whose autograd graph\", \"a tensor\""),
        "size": _exact("integer", "items, graph nodes or elements at the second look", minimum=0),
        "per_step": _exact("number", "growth of that size per step"),
        "where": _strings("the lines that add to it, \"train.py:57 in train\""),
    }, "A name in the user's code that held more at each step while a leak was recorded"),
    "ProbeReport": _obj({
        "pid": _exact("integer", "PID of the probed process (as it sees itself)", **PID),
        "taken_at": _exact("number", "when the report was made (seconds since the epoch)"),
        "torch_version": _nullable("string", "torch.__version__"),
        "started_at": _nullable("number", "when the probe started in the process (seconds since the epoch)"),
        "limits": _strings("what the probe cannot see in this job, in words"),
        "command": _strings("command line (argv)"),
        "devices": _list(_ref("ProbeDevice"), "devices the process uses"),
        "read_at": _nullable("number", "when the devices' figures were read (seconds since the epoch); "
                                       "null before the first reading"),
        "read_at_step": _nullable("integer", "training steps counted when the devices' figures were read",
                                  minimum=0),
        "steps": _list(_ref("StepRecord"), "recent training steps, oldest first"),
        "last_oom": {"anyOf": [_ref("OomRecord"), {"type": "null"}],
                     "description": "the last out-of-memory error; null if none"},
        "recording": _exact("boolean", "allocation-site recording is on"),
        "recorded_steps": _list({"type": "integer"}, "step numbers the sites' columns belong to"),
        "sites": _list(_ref("AllocationSite"), "largest allocation sites by live bytes"),
        "keepers": _list(_ref("LeakKeeper"), "what kept growing while sites were recorded, fastest first"),
        "recording_cost": _nullable("number", "overhead per step while recording (seconds)", minimum=0),
        "probe_cpu_seconds": _nullable("number", "CPU the probe itself has used (seconds)", minimum=0),
        "problems": _strings("exceptions the probe contained, for people"),
    }, "What a probe inside a PyTorch process reports"),
    "BreakdownItem": _obj({
        "key": {"enum": ["parameters", "gradients", "optimizer_state", "buffers", "activations", "other",
                         "untracked", "cache", "fragmentation", "context"],
                "description": "the part: a tensor category, bytes allocated but not categorised, the "
                               "allocator's reusable cache, its fragmentation, or the CUDA context"},
        "label": _exact("string", "the part in words, as the monitor shows it"),
        "size": _exact("integer", "bytes", **BYTES),
    }, "One part of a probed process's memory on one device"),
    "Breakdown": _obj({
        "pid": _exact("integer", "PID of the probed process (as it sees itself)", **PID),
        "device": _exact("string", "the probe's name for the device: \"cuda:0\", \"cpu\""),
        "uuid": _nullable("string", "the device's UUID, to join with Device.uuid"),
        "items": _list(_ref("BreakdownItem"), "the parts, in the order every view lists them"),
        "total": _exact("integer", "NVML's per-process figure when the parts add up to it, else the "
                                   "parts' sum (bytes)", **BYTES),
        "nvml": _nullable("integer", "NVML's per-process memory on the device (bytes)", **BYTES),
        "basis": _exact("string", "what the total is, in words"),
        "note": _exact("string", "why the parts do not quite add up; empty when they do"),
    }, "Where a probed process's memory on one device goes: the live monitor's bar"),
    "Snapshot": _obj({
        "taken_at": _exact("number", "when the snapshot was taken (seconds since the epoch)"),
        "driver": _ref("Driver"),
        "devices": _list(_ref("Device"), "GPUs, in NVML index order"),
        "processes": _list(_ref("GpuProcess"), "GPU processes, one entry per process and GPU"),
        "parents": _list(_ref("HostProcess"), "ancestors of GPU processes that hold no GPU"),
        "host": _ref("Host"),
        "probes": _list(_ref("ProbeReport"), "reports of probed processes"),
        "probed": _list(_ref("HostProcess"), "probed processes NVML does not list, as /proc sees them"),
        "source": _exact("string", "\"nvml\" or \"sim:<scenario>\" for simulated GPUs"),
        "problems": _strings("non-fatal trouble worth telling the user about"),
        "monitor": {"anyOf": [_ref("MonitorCost"), {"type": "null"}],
                    "description": "what the snapshot cost gputui; null where not measured"},
    }, "Everything gputui knows at one instant"),
}


def _envelope(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "schema": {"const": kind, "description": "what this document is"},
            "version": {"const": 1, "description": "schema version; bumped when a field changes meaning"},
            "gputui": {"type": "string", "description": "gputui version that wrote it"},
            **body,
        },
        "required": ["schema", "version", "gputui", *body],
        "additionalProperties": False,
    }


BREAKDOWNS = _list(_ref("Breakdown"), "each probed process's memory on each device, explained")

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "gputui JSON output",
    "oneOf": [
        _envelope("gputui.snapshot", {"snapshot": _ref("Snapshot"), "breakdowns": BREAKDOWNS}),
        _envelope("gputui.probe-report", {"report": _ref("ProbeReport"), "breakdowns": BREAKDOWNS}),
        _envelope("gputui.probes", {
            "probes": _list(_ref("ProbeReport"), "reports of the reachable probes"),
            "unreachable": _list(_obj({
                "pid": _exact("integer", "PID of the probed process", **PID),
                "reason": _exact("string", "why its probe did not answer"),
            }, "A probe that did not answer"), "probes found but not answering"),
        }),
    ],
    "$defs": DEFS,
}


if __name__ == "__main__":
    print(json.dumps(SCHEMA, indent=2))
