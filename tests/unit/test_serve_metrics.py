"""The exporter's metric families from fixed snapshots: names, labels, Prometheus units and values,
read back through the text format as Prometheus reads it; the analysis the live monitor does; and
what must never break a scrape (a lost GPU, hostile strings, a probe the analysis chokes on)."""

from __future__ import annotations

import dataclasses

import pytest
from hostile import ATTACK, SHOWN, poison
from plain_data import GiB, MiB, T, judged_document, training_report, workstation
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from ui_data import ReplaySource, process, training_snapshot

from gputui.analysis.leaks import snapshot_leak_verdict
from gputui.model import GpuProcess, ProbeDevice, ProbeReport, StepRecord
from gputui.model.verdicts import LEAK_STATES, LeakVerdict
from gputui.options import Options
from gputui.sample.pipeline import Pipeline, open_pipeline
from gputui.sample.probes import Watched
from gputui.serve import metrics
from gputui.serve.metrics import FAMILIES, SampleCollector, short_command
from gputui.serve.sampling import Sample, Sampling
from gputui.ui.table.cells import growth_of


def exposition(sample: Sample | None) -> str:
    registry = CollectorRegistry()
    registry.register(SampleCollector(lambda: sample))
    return generate_latest(registry).decode("utf-8")


def series(sample: Sample) -> dict[tuple[str, frozenset], float]:
    """Every sample of the exposition, by (name, labels), parsed back as Prometheus parses it."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(exposition(sample)) for s in family.samples}


def value(found: dict, metric: str, /, **labels: str) -> float | None:
    """The one series of ``metric`` whose labels include ``labels``; None when there is none."""
    matching = [v for (n, ls), v in found.items() if n == metric and set(labels.items()) <= ls]
    assert len(matching) <= 1, f"{len(matching)} series of {metric} match {labels}"
    return matching[0] if matching else None


RTX = dict(index="0", uuid="GPU-aaaa", name="NVIDIA GeForce RTX 4090")


def demo_sample(scenario: str) -> Sample:
    """The exporter's first sample of a demo scenario, as ``gputui --demo SCENARIO serve`` takes it."""
    sampling = Sampling(open_pipeline(Options(demo=scenario), lasting=True))
    try:
        return sampling.take()
    finally:
        sampling.stop()


@pytest.fixture(scope="module")
def workstation_series():
    return series(Sample(workstation()))


# ---------------------------------------------------------------------------------------- devices

@pytest.mark.parametrize("name, labels, expected", [
    ("gputui_device_memory_used_bytes", {}, 12 * GiB),
    ("gputui_device_memory_total_bytes", {}, 24 * GiB),
    ("gputui_device_utilization_ratio", {}, 0.87),
    ("gputui_device_memory_utilization_ratio", {}, 0.40),
    ("gputui_device_fan_speed_ratio", {}, 0.55),
    ("gputui_device_temperature_celsius", {}, 71),
    ("gputui_device_slowdown_temperature_celsius", {}, 84),
    ("gputui_device_power_watts", {}, 402.3),
    ("gputui_device_power_limit_watts", {}, 450.0),
    ("gputui_device_clock_hertz", {"clock": "sm"}, 2_520_000_000),
    ("gputui_device_clock_hertz", {"clock": "memory"}, 10_501_000_000),
    ("gputui_device_clock_max_hertz", {"clock": "sm"}, 2_820_000_000),
    ("gputui_device_slowdown", {"reason": "sw_power_cap"}, 1),
    ("gputui_device_slowdown", {"reason": "hw_thermal"}, 0),
    ("gputui_device_lost", {}, 0),
])
def test_a_device_reading_in_prometheus_units(workstation_series, name, labels, expected):
    assert value(workstation_series, name, **RTX, **labels) == expected


def test_what_the_gpu_does_not_report_has_no_series(workstation_series):
    # The RTX reports no reserved memory, no encoder, no PCIe: absent, never 0.
    for name in ("gputui_device_memory_reserved_bytes", "gputui_device_encoder_utilization_ratio",
                 "gputui_device_pcie_bytes_per_second"):
        assert value(workstation_series, name, **RTX) is None


def test_a_lost_gpu_says_so_and_has_no_readings(workstation_series):
    lost = dict(index="1", uuid="GPU-bbbb", name="NVIDIA RTX A4000")
    assert value(workstation_series, "gputui_device_lost", **lost) == 1
    readings = [n for (n, labels) in workstation_series if ("uuid", "GPU-bbbb") in labels]
    assert readings == ["gputui_device_lost"]


def test_a_mig_instance_is_labelled_with_its_parent(workstation_series):
    # index: GPU 2, GPU instance 1, the name --once and the monitor give it (it said 2:0, the MIG device index)
    mig = dict(index="2:1", uuid="MIG-1", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", parent_uuid="GPU-cccc")
    assert value(workstation_series, "gputui_mig_memory_used_bytes", **mig) == 4 * GiB
    assert value(workstation_series, "gputui_mig_memory_total_bytes", **mig) == 20 * GiB


def test_every_family_has_the_prefix_and_help():
    names = [family.exposed for family in FAMILIES]
    assert len(names) == len(set(names))
    assert all(name.startswith("gputui_") and family.help for name, family in zip(names, FAMILIES))
    assert all(name.endswith("_total") == (family.kind == "counter") for name, family in zip(names, FAMILIES))


# -------------------------------------------------------------------------------------- processes

def test_a_process_is_labelled_by_pid_user_command_and_gpu(workstation_series):
    job = dict(pid="4242", user="alice", command="python train.py --lr 3e-4", index="0", uuid="GPU-aaaa")
    assert value(workstation_series, "gputui_process_memory_bytes", **job) == 10 * GiB
    assert value(workstation_series, "gputui_process_sm_utilization_ratio", **job) == 0.85


def test_a_process_whose_details_are_gone_still_counts(workstation_series):
    assert value(workstation_series, "gputui_process_memory_bytes", pid="7777", user="", command="") == 200 * MiB


def test_the_command_label_is_short():
    xorg = GpuProcess(pid=1, device_index=0, command=("/usr/lib/xorg/Xorg", "vt1", "-displayfd", "3"))
    assert short_command(xorg) == "Xorg vt1 -displayfd 3"
    long = GpuProcess(pid=1, device_index=0, command=("python", "x" * 200))
    assert len(short_command(long)) == metrics.COMMAND_CHARS and short_command(long).endswith("…")
    assert short_command(GpuProcess(pid=1, device_index=0, name="python3")) == "[python3]"


def test_a_processes_memory_trend_comes_from_the_monitors_history():
    """Memory rising 300 MiB every 3 s for 90 s: growing at 100 MiB/s, with a time to OOM."""
    def at(i: int):
        rising = process(2000, 0, gpu_memory=4 * GiB + i * 300 * MiB)
        others = training_snapshot().processes[1:]
        return dataclasses.replace(training_snapshot(T + 3 * i), processes=(rising, *others))

    sampling = Sampling(Pipeline(ReplaySource([at(i) for i in range(31)])))
    for _ in range(31):
        sample = sampling.take()
    found = series(sample)
    job = dict(pid="2000", index="0")
    assert value(found, "gputui_process_memory_trend", state="growing", **job) == 1
    assert value(found, "gputui_process_memory_trend", state="steady", **job) == 0
    assert value(found, "gputui_process_memory_growth_bytes_per_second", **job) == 100 * MiB
    oom = value(found, "gputui_process_seconds_to_oom", **job)
    assert oom == sample.trends[(2000, 0)].time_to_oom == pytest.approx(60 * GiB / (100 * MiB))  # device 0's free


def test_the_same_instant_twice_is_one_reading_in_the_history():
    sampling = Sampling(Pipeline(ReplaySource([training_snapshot(T)])))
    first, second = sampling.take(), sampling.take()
    assert second.trends[(2000, 0)].samples == first.trends[(2000, 0)].samples == 1


# --------------------------------------------------------------------------------------- probes

def test_the_probes_breakdown_is_the_json_documents(workstation_series):
    snapshot = workstation()
    document = judged_document(snapshot)["breakdowns"]
    assert [b["pid"] for b in document] == [4242]
    exported = {dict(labels)["category"]: v for (name, labels), v in workstation_series.items()
                if name == "gputui_probe_memory_bytes"}
    assert exported == {item["key"]: item["size"] for item in document[0]["items"]}
    assert exported["parameters"] == GiB and exported["context"] == 10 * GiB - (9 * GiB + 512 * MiB)


def test_the_phase_peaks_are_the_latest_measured_steps():
    report = training_report()
    later = StepRecord(step=413, ended_at=T - 0.8, duration=0.2, allocated=5 * GiB)  # not measured
    snapshot = dataclasses.replace(workstation(), probes=(dataclasses.replace(report, steps=report.steps + (later,)),))
    found = series(Sample(snapshot))
    probe = dict(pid="4242")
    assert value(found, "gputui_probe_step_peak_bytes", phase="forward", **probe) == 7 * GiB
    assert value(found, "gputui_probe_step_peak_bytes", phase="backward", **probe) == 8 * GiB
    assert value(found, "gputui_probe_step_peak_bytes", phase="optimizer.step()", **probe) == 8 * GiB + 512 * MiB
    assert value(found, "gputui_probe_steps_total", pid="4242") == 413


def test_the_allocators_counters(workstation_series):
    probe = dict(pid="4242", device="cuda:0", uuid="GPU-aaaa")
    assert value(workstation_series, "gputui_probe_allocator_retries_total", **probe) == 2
    assert value(workstation_series, "gputui_probe_out_of_memory_errors_total", **probe) == 1


def test_the_leak_verdict_is_a_state_gauge_with_its_rate_and_forecast():
    verdict = LeakVerdict("leak", device="cuda:0", allocated_per_step=50 * MiB, step_time=0.5,
                          oom_in=130.0, oom_at=T + 120.0)
    found = series(Sample(workstation(), leaks={4242: verdict}))
    probe = dict(pid="4242", device="cuda:0", uuid="GPU-aaaa")
    states = {state: value(found, "gputui_probe_leak_state", state=state, **probe) for state in LEAK_STATES}
    assert states == {state: (1 if state == "leak" else 0) for state in LEAK_STATES}
    assert value(found, "gputui_probe_growth_bytes_per_step", figure="allocated", **probe) == 50 * MiB
    assert value(found, "gputui_probe_growth_bytes_per_step", figure="reserved", **probe) is None
    assert value(found, "gputui_probe_seconds_to_oom", **probe) == 120.0  # from the sample's time, as the monitor
    assert value(found, "gputui_probe_step_seconds", **probe) == 0.5


def test_the_leaky_demos_verdict_and_forecast_are_the_monitors():
    sample = demo_sample("leaky")
    report = sample.snapshot.probes[0]
    verdict = snapshot_leak_verdict(report, sample.snapshot)
    assert sample.leaks[report.pid] == verdict and verdict.state == "leak"
    found = series(sample)
    _, monitors = growth_of(None, verdict, sample.snapshot.taken_at)  # the process table's figure
    assert value(found, "gputui_probe_seconds_to_oom", pid=str(report.pid)) == pytest.approx(monitors, abs=1e-9)
    assert value(found, "gputui_probe_leak_state", pid=str(report.pid), state="leak") == 1


def test_a_growing_verdict_names_what_grows_and_a_clean_one_nothing():
    found = series(demo_sample("leaky"))
    grows = {dict(labels)["category"]: v for (name, labels), v in found.items()
             if name == "gputui_probe_leak_category"}
    assert grows == {"activations": 1}
    assert value(found, "gputui_probe_leak_category", pid="51200", device="cuda:0") == 1
    clean = series(Sample(workstation(), leaks={4242: LeakVerdict("clean", device="cuda:0")}))
    assert not [name for name, _ in clean if name == "gputui_probe_leak_category"]


# ------------------------------------------------------------------------------ training jobs' findings

def test_the_torchrun_demos_straggler_lags_by_both_measures():
    found = series(demo_sample("torchrun"))
    lagging = sorted((dict(labels)["pid"], dict(labels)["rank"], dict(labels)["measure"], v)
                     for (name, labels), v in found.items() if name == "gputui_job_straggler")
    assert lagging == [("70125", "13", "step time", 1), ("70125", "13", "utilisation", 1)]  # local rank 5
    assert value(found, "gputui_job_straggler", measure="utilisation", job_key="launcher 70100",
                 job_name="pretrain.py (torchrun)") == 1
    assert not [name for name, _ in found if name == "gputui_job_imbalance_ratio"]


def test_the_dataparallel_demos_first_gpu_holds_more_than_twice_the_others():
    found = series(demo_sample("dataparallel"))
    assert value(found, "gputui_job_imbalance_ratio", pid="61042", index="0", rank="",
                 job_key="devices 61042") == 2.18
    assert not [name for name, _ in found if name == "gputui_job_straggler"]


# ------------------------------------------------------------------------------ never break a scrape

def test_no_sample_yet_is_an_empty_answer():
    assert exposition(None) == ""


def test_the_faults_demo_scrapes_whole():
    sample = demo_sample("faults")
    found = series(sample)
    assert "GPU 1 is not answering: GPU is lost" in sample.snapshot.problems
    assert value(found, "gputui_device_lost", index="1") == 1
    assert value(found, "gputui_device_lost", index="0") == 0
    assert value(found, "gputui_device_memory_used_bytes", index="1") is None
    assert value(found, "gputui_device_memory_used_bytes", index="0") == sample.snapshot.devices[0].memory_used


def test_outside_strings_are_made_visible_in_labels():
    out = exposition(Sample(poison(workstation()))).encode("utf-8")
    assert b"\x1b" not in out and b"\x07" not in out and "\u202e".encode() not in out
    assert SHOWN.replace("\\", "\\\\").encode() in out  # label values escape their backslashes
    assert ATTACK not in out.decode("utf-8")


def test_a_probe_the_analysis_chokes_on_loses_only_its_own_series(monkeypatch):
    def choke(report, snapshot):
        raise ValueError("a report no one expected")

    monkeypatch.setattr(metrics, "breakdowns", choke)
    found = series(Sample(workstation()))
    assert value(found, "gputui_device_memory_used_bytes", **RTX) == 12 * GiB
    assert value(found, "gputui_probe_memory_bytes", category="parameters") is None


def test_a_series_said_twice_is_exported_once():
    twice = ProbeDevice("cuda:0", uuid="GPU-aaaa", allocator=training_report().devices[0].allocator)
    report = ProbeReport(pid=4242, taken_at=T, devices=(twice, twice))
    found = series(Sample(dataclasses.replace(workstation(), probes=(report,))))
    assert value(found, "gputui_probe_allocator_retries_total", pid="4242") == 2


class VanishingWatcher:
    """The link client's ProbeWatcher as it behaves when a probe stops answering after one report."""

    def __init__(self, report: ProbeReport) -> None:
        self.polls, self.report = 0, report
        self.unavailable: dict[int, str] = {}
        self.error = None

    def poll(self):
        self.polls += 1
        if self.polls == 1:
            return {self.report.pid: self.report}
        self.unavailable = {self.report.pid: "the probe has gone away"}
        return {}

    def close(self):
        pass


def test_a_probe_that_stops_answering_becomes_a_problem_not_a_failed_scrape():
    watcher = VanishingWatcher(training_report())
    assert Watched(watcher).reports() == ((training_report(),), ())
    reports, problems = Watched(watcher).reports()
    assert reports == () and problems == ("probe of process 4242 did not answer: the probe has gone away",)
    found = series(Sample(dataclasses.replace(workstation(), probes=(), problems=problems)))
    assert value(found, "gputui_probe_memory_bytes", pid="4242", category="parameters") is None
    assert value(found, "gputui_device_memory_used_bytes", **RTX) == 12 * GiB
