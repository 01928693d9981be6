"""The exporter's metrics: Prometheus metric families made from the last sample.

Every family is declared once, in FAMILIES (name, help, labels, kind); ``readings`` says what one
sample holds for them. Units are Prometheus's: bytes, seconds, watts, degrees Celsius, hertz, and
ratios from 0 to 1 where NVML says percent. A reading that is not known (a field the GPU does not
report, a lost GPU, a probe with no steps yet) has no sample, never a 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gputui import __version__
from gputui.analysis.breakdown import breakdowns
from gputui.analysis.phases import peaks
from gputui.model import THROTTLE_REASONS, Device, GpuProcess, Owner, ProbeReport, mig_name
from gputui.model.record import Record
from gputui.model.verdicts import LEAK_GROWING, LEAK_STATES, TREND_VERDICTS
from gputui.serve.sampling import Sample
from gputui.untrusted import visible

PREFIX = "gputui_"
DEVICE = ("index", "uuid", "name")
MIG = ("index", "uuid", "name", "parent_uuid")
# slurm_job is a job slurmd's cgroup holds the process in; claimed_slurm_job one its environment alone names
# (SLURM_JOB_ID), apart, so that a sum by slurm_job never adds a process's own word to another user's job.
PROCESS = ("pid", "user", "command", "index", "uuid", "namespace", "pod", "container", "slurm_job",
           "claimed_slurm_job")
# Distinct owners (namespace, pod, container, Slurm job) one sample labels at most: each is a new set of
# series to Prometheus. Processes of owners past it get empty owner labels, counted in
# owner_labels_left_out, rather than an exporter that grows a scraper's memory without end.
OWNER_LABEL_SETS = 200
NO_OWNER = ("", "", "", "", "")
PROBE = ("pid", "device", "uuid")
OWNER = ("kind", "owner")  # who holds GPUs (judgements.waste): pod, container, slurm, unit or user, and its name
# A training job's rank; not "job", which Prometheus gives each scrape target.
JOB_RANK = ("job_key", "job_name", "pid", "rank")
COMMAND_CHARS = 80  # a label is no place for a whole command line


@dataclass(frozen=True, eq=False, repr=False)
class Family(Record):
    """One metric family: its name without the prefix, what it means, its labels, its kind."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: str = "gauge"  # or "counter", exposed with "_total"

    @property
    def exposed(self) -> str:
        """The name its samples have in Prometheus."""
        return PREFIX + self.name + ("_total" if self.kind == "counter" else "")

    def make(self) -> GaugeMetricFamily | CounterMetricFamily:
        kind = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        return kind(PREFIX + self.name, self.help, labels=self.labels)


FAMILIES = (
    Family("info", "gputui's version, the host and its driver (always 1)",
           ("version", "hostname", "driver_version", "cuda_driver_version", "source")),
    Family("snapshot_timestamp_seconds", "When the sample served was taken (seconds since the epoch)"),
    Family("sample_duration_seconds", "Time taking the sample took: NVML, /proc and the host's figures"),
    Family("nvml_duration_seconds", "Time spent inside NVML calls for the sample"),
    # devices
    Family("device_lost", "1 when the GPU stopped answering (its readings are then absent), else 0", DEVICE),
    Family("device_memory_total_bytes", "Total memory", DEVICE),
    Family("device_memory_used_bytes", "Memory in use", DEVICE),
    Family("device_memory_reserved_bytes", "Memory the driver and firmware reserve", DEVICE),
    Family("device_utilization_ratio", "Share of time a kernel was running (0 to 1)", DEVICE),
    Family("device_memory_utilization_ratio", "Share of time device memory was read or written (0 to 1)", DEVICE),
    Family("device_encoder_utilization_ratio", "Video encoder utilisation (0 to 1)", DEVICE),
    Family("device_decoder_utilization_ratio", "Video decoder utilisation (0 to 1)", DEVICE),
    Family("device_temperature_celsius", "GPU temperature", DEVICE),
    Family("device_slowdown_temperature_celsius", "Temperature at which the GPU slows itself down", DEVICE),
    Family("device_fan_speed_ratio", "Fan speed, share of its maximum (0 to 1)", DEVICE),
    Family("device_power_watts", "Power draw", DEVICE),
    Family("device_power_limit_watts", "Enforced power limit", DEVICE),
    Family("device_clock_hertz", "Clock speed, of the SMs or the memory", (*DEVICE, "clock")),
    Family("device_clock_max_hertz", "Maximum clock speed, of the SMs or the memory", (*DEVICE, "clock")),
    Family("device_pcie_bytes_per_second", "PCIe throughput, received (rx) or sent (tx); read every 5 s",
           (*DEVICE, "direction")),
    Family("device_slowdown", "1 for each reason the clocks are held down now, else 0", (*DEVICE, "reason")),
    Family("device_ecc_errors", "ECC errors since the driver loaded, corrected or uncorrected",
           (*DEVICE, "kind"), "counter"),
    Family("mig_memory_total_bytes", "Memory of a MIG instance", MIG),
    Family("mig_memory_used_bytes", "Memory in use in a MIG instance", MIG),
    # GPU processes
    Family("owner_labels_left_out", f"GPU processes whose owner labels were left empty: their owners came after the "
           f"first {OWNER_LABEL_SETS} distinct owners of the sample"),
    Family("process_memory_bytes", "GPU memory NVML charges to the process on the GPU", PROCESS),
    Family("process_sm_utilization_ratio", "The process's SM utilisation on the GPU (0 to 1)", PROCESS),
    Family("process_memory_trend", "1 for the trend of the process's GPU memory over the last minutes, else 0",
           (*PROCESS, "state")),
    Family("process_memory_growth_bytes_per_second", "How fast the process's GPU memory grows (robust slope)",
           PROCESS),
    Family("process_seconds_to_oom", "Seconds until the GPU is full at the process's growth (growing only)",
           PROCESS),
    # who holds the GPUs, and who holds them idle (the w view's, --once's "Who holds the GPUs")
    Family("idle_window_seconds", "The window the owners' mean SM utilisation is taken over"),
    Family("idle_min_memory_bytes", "Memory an owner holds on a GPU at least for the GPU to count as idle"),
    Family("idle_max_utilization_ratio", "SM utilisation under which a held GPU is idle (0 to 1)"),
    Family("idle_after_seconds", "How long a held GPU stays idle, without a break, before it is called idle"),
    Family("idle_watched_seconds", "How long the exporter has watched: no GPU is called idle before idle_after"),
    Family("owners_left_out", f"Owners of GPU processes without owner_* series: those after the first "
           f"{OWNER_LABEL_SETS}, the owners holding the most idle GPUs and memory first"),
    Family("owner_memory_bytes", "GPU memory the owner holds, on all its GPUs", OWNER),
    Family("owner_gpus", "GPUs the owner's processes are on", OWNER),
    Family("owner_sm_utilization_ratio", "The owner's mean SM utilisation over idle_window_seconds, its GPUs "
           "weighted alike (0 to 1)", OWNER),
    # apart from the ratio, not a label on it: a figure that changes source keeps one series
    Family("owner_sm_utilization_from_gpu", "1 where the GPU's own utilisation stood in for the owner's processes' "
           "(the driver gave none for them; the ratio is then an upper bound), 0 where it is their own", OWNER),
    Family("owner_idle_gpus", "GPUs the owner has held idle for idle_after_seconds or longer", OWNER),
    Family("owner_idle_seconds", "The longest any of the owner's GPUs has been held idle without a break, "
           "even short of idle_after_seconds (0: none is)", OWNER),
    # probed PyTorch processes
    Family("probe_memory_bytes", "Where a probed process's memory on a device goes, by category "
           "(the breakdown of gputui --json)", (*PROBE, "category")),
    Family("probe_step_peak_bytes", "Peak allocated memory of each phase of the latest measured step",
           (*PROBE, "phase")),
    Family("probe_step_seconds", "Median seconds per training step over the recent steps", PROBE),
    Family("probe_steps", "Training steps the probe has counted", PROBE, "counter"),
    Family("probe_leak_state", "1 for the probe's leak verdict, else 0", (*PROBE, "state")),
    Family("probe_leak_category", "1 for what grows (parameters, activations ...) while the leak verdict "
           "is a growing state (leak, cache_growth, fragmentation)", (*PROBE, "category")),
    Family("probe_growth_bytes_per_step", "Growth per step of allocated memory (the C heap or resident memory "
           "of CPU jobs), reserved memory and inactive split blocks, over the recent steps", (*PROBE, "figure")),
    Family("probe_seconds_to_oom", "Seconds until the device runs out at the leak's rate (leaks only)", PROBE),
    Family("probe_allocator_retries", "Cache flushes forced by a failed cudaMalloc", PROBE, "counter"),
    Family("probe_out_of_memory_errors", "Out-of-memory errors the caching allocator raised", PROBE, "counter"),
    # training jobs' findings (the job view's)
    Family("job_straggler", "1 for a rank whose utilisation or step time lags the other ranks'",
           (*JOB_RANK, "measure")),
    Family("job_imbalance_ratio", "Memory a rank holds on its GPU over the median of the other ranks, "
           "for the one rank that holds far more", (*JOB_RANK, "index")),
)

# One reading: (family name, label values, value); a value of None is not known and has no sample.
Reading = tuple[str, tuple[str, ...], float | None]


def _same(value: float | None) -> float | None:
    return value


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100


def _hertz(mhz: float | None) -> float | None:
    return None if mhz is None else mhz * 1_000_000


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


# What a Device says, in the family's unit: (family, Device field, conversion, more label values).
DEVICE_READINGS: tuple[tuple[str, str, Callable[[float | None], float | None], tuple[str, ...]], ...] = (
    ("device_memory_total_bytes", "memory_total", _same, ()),
    ("device_memory_used_bytes", "memory_used", _same, ()),
    ("device_memory_reserved_bytes", "memory_reserved", _same, ()),
    ("device_utilization_ratio", "gpu_util", _ratio, ()),
    ("device_memory_utilization_ratio", "memory_util", _ratio, ()),
    ("device_encoder_utilization_ratio", "encoder_util", _ratio, ()),
    ("device_decoder_utilization_ratio", "decoder_util", _ratio, ()),
    ("device_temperature_celsius", "temperature", _same, ()),
    ("device_slowdown_temperature_celsius", "temperature_slowdown", _same, ()),
    ("device_fan_speed_ratio", "fan_speed", _ratio, ()),
    ("device_power_watts", "power_draw", _same, ()),
    ("device_power_limit_watts", "power_limit", _same, ()),
    ("device_clock_hertz", "clock_sm", _hertz, ("sm",)),
    ("device_clock_hertz", "clock_memory", _hertz, ("memory",)),
    ("device_clock_max_hertz", "clock_sm_max", _hertz, ("sm",)),
    ("device_clock_max_hertz", "clock_memory_max", _hertz, ("memory",)),
    ("device_pcie_bytes_per_second", "pcie_rx", _same, ("rx",)),
    ("device_pcie_bytes_per_second", "pcie_tx", _same, ("tx",)),
    ("device_ecc_errors", "ecc_corrected", _same, ("corrected",)),
    ("device_ecc_errors", "ecc_uncorrected", _same, ("uncorrected",)),
)
# The verdict's slopes, by the figure label they are exposed under.
GROWTH_FIGURES = (("allocated", "allocated_per_step"), ("reserved", "reserved_per_step"),
                  ("inactive_split", "inactive_split_per_step"))


def readings(sample: Sample) -> Iterator[Reading]:
    """Everything ``sample`` holds for the families, as (family, label values, value)."""
    snapshot = sample.snapshot
    driver = snapshot.driver
    yield "info", (__version__, visible(snapshot.host.hostname), driver.driver_version or "",
                   driver.cuda_driver_version or "", snapshot.source), 1
    yield "snapshot_timestamp_seconds", (), snapshot.taken_at
    if snapshot.monitor is not None:
        yield "sample_duration_seconds", (), _seconds(snapshot.monitor.sample_ms)
        yield "nvml_duration_seconds", (), _seconds(snapshot.monitor.nvml_ms)
    for device in snapshot.devices:
        yield from _device(device)
    yield from _processes(sample)
    yield from _owners(sample)
    yield from _jobs(sample)
    for report in snapshot.probes:
        try:
            found = list(_probe(report, sample))
        except Exception:  # noqa: BLE001 - a report the analysis chokes on loses its series, not the scrape
            continue
        yield from found


def _device(device: Device) -> Iterator[Reading]:
    labels = (str(device.index), device.uuid or "", visible(device.name or ""))
    yield "device_lost", labels, 1 if device.lost else 0
    for family, name, convert, more in DEVICE_READINGS:
        yield family, labels + more, convert(getattr(device, name))
    if device.throttle_reasons is not None:
        for reason in THROTTLE_REASONS:
            yield "device_slowdown", (*labels, reason), 1 if reason in device.throttle_reasons else 0
    for mig in device.mig_instances:
        mig_labels = (mig_name(device.index, mig.gpu_instance_id), mig.uuid or "",
                      visible(f"{device.name or 'GPU'} MIG {mig.profile or mig.index}"), device.uuid or "")
        yield "mig_memory_total_bytes", mig_labels, mig.memory_total
        yield "mig_memory_used_bytes", mig_labels, mig.memory_used


def owner_labels(owner: Owner | None) -> tuple[str, str, str, str, str]:
    """(namespace, pod, container, slurm_job, claimed_slurm_job) of a process; "" where it has none."""
    if owner is None:
        return NO_OWNER
    pod, container, slurm = owner.pod, owner.container, owner.slurm
    job = visible(slurm.job) if slurm is not None else ""
    return (visible((pod.namespace if pod else None) or ""), visible((pod.name or pod.uid) if pod else ""),
            visible((pod.container if pod and pod.container else None) or (container.label if container else "")),
            "" if slurm is None or slurm.claimed else job, job if slurm is not None and slurm.claimed else "")


def _processes(sample: Sample) -> Iterator[Reading]:
    uuids = {d.index: d.uuid or "" for d in sample.snapshot.devices}
    owners: set[tuple[str, str, str, str, str]] = set()
    left_out = 0
    for process in sample.snapshot.processes:
        owner = owner_labels(process.owner)
        if owner != NO_OWNER and owner not in owners:
            if len(owners) >= OWNER_LABEL_SETS:
                owner, left_out = NO_OWNER, left_out + 1
            else:
                owners.add(owner)
        labels = (str(process.own_pid), visible(process.user or ""), short_command(process),
                  str(process.device_index), uuids.get(process.device_index, ""), *owner)
        yield "process_memory_bytes", labels, process.gpu_memory
        yield "process_sm_utilization_ratio", labels, _ratio(process.sm_util)
        trend = sample.trends.get((process.pid, process.device_index))
        if trend is not None:
            for state in TREND_VERDICTS:
                yield "process_memory_trend", (*labels, state), 1 if trend.verdict == state else 0
            yield "process_memory_growth_bytes_per_second", labels, trend.rate
            yield "process_seconds_to_oom", labels, trend.time_to_oom
    yield "owner_labels_left_out", (), left_out


def _owners(sample: Sample) -> Iterator[Reading]:
    waste = sample.judgements.waste
    if waste is None:
        return
    rules = waste.rules
    yield "idle_window_seconds", (), rules.window
    yield "idle_min_memory_bytes", (), rules.min_memory
    yield "idle_max_utilization_ratio", (), _ratio(rules.max_util)
    yield "idle_after_seconds", (), rules.idle_after
    yield "idle_watched_seconds", (), waste.watched
    yield "owners_left_out", (), max(0, len(waste.owners) - OWNER_LABEL_SETS)
    for owner in waste.owners[:OWNER_LABEL_SETS]:  # the most idle GPUs and memory first
        labels = (owner.kind, visible(owner.name))
        yield "owner_memory_bytes", labels, owner.memory
        yield "owner_gpus", labels, len(owner.gpus)
        yield "owner_sm_utilization_ratio", labels, _ratio(owner.sm_util)
        from_gpu = None if owner.sm_source is None else int(owner.sm_source == "gpu")  # None: no figure at all
        yield "owner_sm_utilization_from_gpu", labels, from_gpu
        yield "owner_idle_gpus", labels, len(owner.idle)
        yield "owner_idle_seconds", labels, owner.idle_for


def _jobs(sample: Sample) -> Iterator[Reading]:
    for analysis in sample.judgements.jobs:
        job = (visible(analysis.job.key), visible(analysis.job.name))
        for straggler in analysis.stragglers:
            yield "job_straggler", (*job, str(straggler.pid), _known(straggler.rank), straggler.measure), 1
        imbalance = analysis.imbalance
        if imbalance is not None:
            yield "job_imbalance_ratio", (*job, str(imbalance.pid), _known(imbalance.rank),
                                          _known(imbalance.device)), imbalance.ratio


def _known(number: int | None) -> str:
    return "" if number is None else str(number)


def _probe(report: ProbeReport, sample: Sample) -> Iterator[Reading]:
    pid = str(report.pid)
    uuids = {d.device: visible(d.uuid or "") for d in report.devices}

    def labels(device: str | None) -> tuple[str, str, str]:
        return pid, visible(device or ""), uuids.get(device or "", "")

    for breakdown in breakdowns(report, sample.snapshot):
        for item in breakdown.items:
            yield "probe_memory_bytes", (*labels(breakdown.device), item.key), item.size
    for device in report.devices:
        if device.allocator is not None:
            yield "probe_allocator_retries", labels(device.device), device.allocator.alloc_retries
            yield "probe_out_of_memory_errors", labels(device.device), device.allocator.ooms
    if report.steps:
        latest = report.steps[-1]
        yield "probe_steps", labels(latest.device), latest.step
    measured = next((s for s in reversed(report.steps) if peaks(s)), None)
    if measured is not None:
        for phase, peak in peaks(measured):
            yield "probe_step_peak_bytes", (*labels(measured.device), phase), peak
    verdict = sample.leaks.get(report.pid)
    if verdict is not None:
        judged = labels(verdict.device)
        for state in LEAK_STATES:
            yield "probe_leak_state", (*judged, state), 1 if verdict.state == state else 0
        if verdict.state in LEAK_GROWING and verdict.category is not None:
            yield "probe_leak_category", (*judged, verdict.category), 1
        yield "probe_step_seconds", judged, verdict.step_time
        for figure, name in GROWTH_FIGURES:
            yield "probe_growth_bytes_per_step", (*judged, figure), getattr(verdict, name)
        yield "probe_seconds_to_oom", judged, verdict.seconds_to_oom(sample.snapshot.taken_at)


def short_command(process: GpuProcess) -> str:
    """The command for a label: the program's file name and its arguments, cut to COMMAND_CHARS."""
    if not process.command:
        return visible(f"[{process.name}]" if process.name else "")
    line = " ".join((os.path.basename(process.command[0]), *process.command[1:]))
    if len(line) > COMMAND_CHARS:
        line = line[:COMMAND_CHARS - 1] + "…"
    return visible(line)


def families(sample: Sample) -> list[Metric]:
    """Every declared family, with the sample's readings in it (a family may have none).

    A series said twice (a probe that lists one device twice) keeps its first value: Prometheus
    would refuse the duplicate.
    """
    made = {family.name: family.make() for family in FAMILIES}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for name, labels, value in readings(sample):
        if value is not None and (name, labels) not in seen:
            seen.add((name, labels))
            made[name].add_metric(labels, value)
    return list(made.values())


class SampleCollector(Collector):
    """Hands Prometheus the families of the latest sample; never samples anything itself."""

    def __init__(self, latest: Callable[[], Sample | None]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        sample = self._latest()
        if sample is not None:
            yield from families(sample)
