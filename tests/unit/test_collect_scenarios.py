"""The collector against every simulated scenario, with a fixed clock and exact values.

Each device and process figure is checked against what the simulated driver holds at that instant
(its machine state and scenario plan), so the NVML decoding, unit conversions, version fallbacks and
fault handling are all exercised through the real pynvml wrappers.
"""

import dataclasses

import pynvml
import pytest

from gputui.collect import open_collector
from gputui.collect.sim import EPOCH, SCENARIOS
from gputui.collect.sim.devices import MiB
from gputui.collect.sim.host import cpu_seconds
from gputui.model import THROTTLE_REASONS, to_jsonable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0  # any origin: the simulator counts from its install

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def opened():
    collectors = []

    def open_(scenario, **kwargs):
        clock = Clock()
        collector = open_collector(scenario, clock=clock, environ=kwargs.pop("environ", {}), **kwargs)
        collectors.append(collector)
        return collector, clock

    yield open_
    for collector in collectors:
        collector.close()
    assert pynvml.nvmlLib is None  # close() gave pynvml back untouched


def sample_at(collector, clock, t):
    clock.now = 1000.0 + t
    return collector.sample()


def by_pid(snapshot, device=None):
    return {p.pid: p for p in snapshot.processes if device is None or p.device_index == device}


def check_devices_against_simulator(collector, snapshot):
    """Every figure of every healthy device equals the simulated driver's, in base units."""
    machine = collector.machine
    state = machine.state()
    missing = machine.plan.driver.missing
    for device, gpu in zip(snapshot.devices, machine.plan.gpus, strict=True):
        assert device.index == gpu.index
        if gpu.lost:
            assert device.lost == "GPU is lost"
            assert device.memory_total is None and device.name is None
            continue
        now, model = state.gpus[gpu.index], gpu.model
        unsupported = model.unsupported
        assert device.lost is None
        assert device.name == model.name
        assert device.uuid == gpu.uuid
        assert device.pci_bus_id == gpu.pci_bus_id
        assert device.memory_total == model.memory_total
        if "nvmlDeviceGetMemoryInfo_v2" in missing:  # old driver: v1, reservation counted as used
            assert device.memory_reserved is None
            assert device.memory_used == now.memory_used + model.memory_reserved
        else:
            assert device.memory_reserved == model.memory_reserved
            assert device.memory_used == now.memory_used
        assert device.memory_free == model.memory_total - model.memory_reserved - now.memory_used
        if gpu.mig:
            assert device.gpu_util is None and device.encoder_util is None  # MIG: whole-GPU n/a
        else:
            assert (device.gpu_util, device.memory_util) == (now.gpu_util, now.mem_util)
            if "nvmlDeviceGetEncoderUtilization" not in unsupported:
                assert (device.encoder_util, device.decoder_util) == (now.encoder, now.decoder)
        assert device.temperature == now.temperature
        assert device.temperature_slowdown == model.temp_slowdown
        assert device.fan_speed == (None if "nvmlDeviceGetFanSpeed" in unsupported else now.fan)
        assert device.power_draw == now.power_mw / 1000
        assert device.power_limit == model.power_limit
        assert (device.clock_sm, device.clock_sm_max) == (now.sm_clock, model.sm_max)
        assert (device.clock_memory, device.clock_memory_max) == (now.mem_clock, model.mem_max)
        assert device.performance_state == now.pstate
        assert (device.pcie_generation, device.pcie_generation_max) == (now.pcie_gen, model.pcie_gen)
        assert device.pcie_width == device.pcie_width_max == model.pcie_width
        if "nvmlDeviceGetPcieThroughput" in unsupported:
            assert device.pcie_rx is None and device.pcie_tx is None
        else:
            assert (device.pcie_rx, device.pcie_tx) == (now.pcie_rx_kb * 1024, now.pcie_tx_kb * 1024)
        bits = dict(zip(THROTTLE_REASONS, (0x08, 0x40, 0x80, 0x20, 0x04, 0x10, 0x02, 0x100, 0x01)))
        assert device.throttle_reasons == tuple(n for n, b in bits.items() if now.reasons & b)
        if model.has_ecc:
            assert (device.ecc_corrected, device.ecc_uncorrected) == (gpu.ecc_corrected, gpu.ecc_uncorrected)
        else:
            assert device.ecc_corrected is None and device.ecc_uncorrected is None
        assert device.mig_enabled == (bool(gpu.mig) if model.mig_profiles else None)
        assert device.compute_mode == ("default", "exclusive_thread", "prohibited",
                                       "exclusive_process")[gpu.compute_mode]


def check_processes_against_simulator(collector, snapshot):
    """NVML's lists come through whole: pid, device, kind, memory, MIG placement."""
    state = collector.machine.state()
    expected = {}
    for index, now in enumerate(state.gpus):
        for use in now.compute + now.graphics:
            key = (use.pid, index)
            before = expected.get(key)
            kind = use.kind if before is None or before[0] == use.kind else "compute+graphics"
            expected[key] = (kind, use.memory, use.gpu_instance_id, use.compute_instance_id)
    seen = {(p.pid, p.device_index): (p.kind, p.gpu_memory, p.gpu_instance_id, p.compute_instance_id)
            for p in snapshot.processes}
    assert len(seen) == len(snapshot.processes)
    if "nvmlDeviceGetComputeRunningProcesses_v2" in collector.machine.plan.driver.missing:
        # the v1 list has no MIG placement
        expected = {k: (kind, mem, None, None) for k, (kind, mem, _, _) in expected.items()}
    assert seen == expected


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("t", [0.0, 37.3, 250.0])
def test_every_scenario_reports_what_the_driver_holds(opened, scenario, t):
    collector, clock = opened(scenario)
    snapshot = sample_at(collector, clock, t)
    assert snapshot.source == f"sim:{scenario}"
    assert snapshot.taken_at == EPOCH + t
    assert snapshot.host.hostname == collector.machine.hostname
    check_devices_against_simulator(collector, snapshot)
    check_processes_against_simulator(collector, snapshot)
    assert [p.state for p in snapshot.processes if p.state == "unmapped"] == []
    assert all(p.local_pid == p.pid for p in snapshot.processes)


def test_same_seed_and_clock_give_the_same_snapshots(opened):
    first, clock_a = opened("training-node", seed=3)
    snaps_a = [to_jsonable(sample_at(first, clock_a, t)) for t in (0.0, 5.0, 90.0)]
    first.close()
    second, clock_b = opened("training-node", seed=3)
    snaps_b = [to_jsonable(sample_at(second, clock_b, t)) for t in (0.0, 5.0, 90.0)]
    assert snaps_a == snaps_b


# -- workstation -------------------------------------------------------------------------------

def test_workstation_details(opened):
    collector, clock = opened("workstation")
    snapshot = sample_at(collector, clock, 0.0)
    assert snapshot.driver.driver_version == "535.183.01"
    assert snapshot.driver.cuda_driver_version == "12.2"
    assert snapshot.driver.nvml_version == "12.535.183.01"
    assert [d.name for d in snapshot.devices] == ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"]
    assert [d.cuda_index for d in snapshot.devices] == [0, 1]
    processes = by_pid(snapshot)
    train = processes[3120]
    assert (train.name, train.user, train.ppid, train.kind) == ("python", "alice", 3050, "compute")
    assert train.command == ("python", "train_unet.py", "--data", "/data/kvasir", "--epochs", "80")
    assert train.started_at == EPOCH - 1800.0
    assert train.host_memory == int(5.8 * 1024**3)
    assert train.cpu_percent is None  # nothing to compare with yet
    assert train.state == "ok" and train.note is None
    assert processes[1455].kind == "graphics" and processes[1455].gpu_memory == 312 * MiB
    assert processes[5230].kind == "compute+graphics" and processes[5230].gpu_memory == 3482 * MiB
    # launchers of GPU processes that hold no GPU themselves, for the tree
    assert {p.pid: (p.name, p.ppid) for p in snapshot.parents} == {
        1302: ("gdm3", 1), 1820: ("sshd", 1), 2890: ("gnome-terminal-", 2210), 3050: ("bash", 2890),
        4410: ("jupyter-lab", 1), 5001: ("bash", 1820),
    }
    assert snapshot.host.cpu_count == 32 and snapshot.host.cpu_percent is None
    assert snapshot.host.memory_total == 128 * 1024**3
    assert snapshot.problems == ()


def test_cpu_percent_is_measured_between_samples_without_sleeping(opened):
    collector, clock = opened("workstation")
    sample_at(collector, clock, 10.0)
    later = sample_at(collector, clock, 25.0)
    program = next(p for p in collector.machine.plan.programs if p.pid == 5120)  # ffmpeg
    before = sum(cpu_seconds(program, 10.0 - program.started))
    after = sum(cpu_seconds(program, 25.0 - program.started))
    assert by_pid(later)[5120].cpu_percent == pytest.approx(100 * (after - before) / 15.0, abs=1e-9)
    assert later.host.cpu_percent is not None


def test_per_process_utilisation_only_from_new_samples(opened):
    collector, clock = opened("workstation")
    first = sample_at(collector, clock, 5.0)
    state = collector.machine.state()
    use = next(u for u in state.gpus[0].compute if u.pid == 3120)
    assert (by_pid(first)[3120].sm_util, by_pid(first)[3120].memory_util) == (use.sm, use.mem)
    again = collector.sample()  # same instant: the driver has no newer sample (NOT_FOUND)
    assert by_pid(again)[3120].sm_util is None


def test_cuda_visible_devices_gives_cuda_indices(opened):
    collector, clock = opened("workstation", environ={"CUDA_VISIBLE_DEVICES": "1"})
    snapshot = sample_at(collector, clock, 0.0)
    assert [d.cuda_index for d in snapshot.devices] == [None, 0]


# -- training node -----------------------------------------------------------------------------

def test_training_node_ramps_up_and_has_a_probe(opened):
    collector, clock = opened("training-node")
    early = sample_at(collector, clock, 1.0)
    late = sample_at(collector, clock, 120.0)
    assert [d.name for d in late.devices] == ["NVIDIA H100 80GB HBM3"] * 8
    ranks = {pid: p for pid, p in by_pid(late).items() if 48231 <= pid < 48239}
    assert sorted((p.device_index, p.pid) for p in ranks.values()) == [(r, 48231 + r) for r in range(8)]
    assert all(p.ppid == 48210 and p.user == "lena" for p in ranks.values())
    early_memory = sum(p.gpu_memory or 0 for pid, p in by_pid(early).items() if pid in ranks)
    assert sum(p.gpu_memory for p in ranks.values()) > early_memory
    assert 48210 in {p.pid for p in late.parents}  # torchrun
    assert late.devices[5].ecc_corrected == 2
    reports = collector.probe_reports()
    assert reports == collector.machine.probe_reports() and len(reports) >= 1


def test_benchmark_sizes(opened):
    collector, clock = opened("training-node", processes=1000)
    snapshot = sample_at(collector, clock, 120.0)
    assert len(snapshot.processes) == 1000
    assert {p.device_index for p in snapshot.processes} == set(range(8))
    assert all(p.state == "ok" for p in snapshot.processes)


# -- leaky -------------------------------------------------------------------------------------

def test_leaky_job_memory_grows_between_samples(opened):
    collector, clock = opened("leaky")
    memory = []
    for t in (5.0, 10.0, 15.0):
        snapshot = sample_at(collector, clock, t)
        job = [p for p in snapshot.processes if p.name == "python3" and p.user == "dev"]
        assert len(job) == 1
        memory.append(job[0].gpu_memory)
    assert memory[0] < memory[1] < memory[2]


# -- MIG ---------------------------------------------------------------------------------------

def test_mig_instances_and_their_processes(opened):
    collector, clock = opened("mig")
    snapshot = sample_at(collector, clock, 10.0)
    mig_gpu = snapshot.devices[0]
    assert mig_gpu.mig_enabled is True
    assert [(m.index, m.profile, m.gpu_instance_id, m.compute_instance_id) for m in mig_gpu.mig_instances] == [
        (0, "3g.40gb", 1, 0), (1, "2g.20gb", 5, 0), (2, "1g.10gb", 13, 0), (3, "1g.10gb", 14, 0)]
    slots = collector.machine.plan.gpus[0].mig
    assert [m.uuid for m in mig_gpu.mig_instances] == [s.uuid for s in slots]
    assert [m.memory_total for m in mig_gpu.mig_instances] == [s.profile.memory for s in slots]
    used = collector.machine.state().gpus[0].slot_used
    assert [m.memory_used for m in mig_gpu.mig_instances] == list(used)
    placed = {p.gpu_instance_id for p in snapshot.processes if p.device_index == 0}
    assert placed == {1, 5, 13, 14}
    assert snapshot.devices[1].mig_enabled is False
    assert snapshot.devices[1].compute_mode == "exclusive_process"


def test_mig_uuid_in_cuda_visible_devices(opened):
    collector, _ = opened("mig")
    second = collector.machine.plan.gpus[0].mig[1].uuid
    collector.environ = {"CUDA_VISIBLE_DEVICES": f"{second[:12]},1"}
    snapshot = collector.sample()
    assert [m.cuda_index for m in snapshot.devices[0].mig_instances] == [None, 0, None, None]
    assert [d.cuda_index for d in snapshot.devices] == [None, 1]


# -- faults ------------------------------------------------------------------------------------

def test_old_driver_falls_back_to_v1_calls(opened):
    collector, clock = opened("faults")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for newer in (pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
                  pynvml.nvmlDeviceGetComputeRunningProcesses_v2):
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            newer(handle)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    snapshot = sample_at(collector, clock, 30.0)
    assert snapshot.driver.driver_version == "450.248.02"
    assert snapshot.driver.cuda_driver_version == "11.0"
    gpu0 = snapshot.devices[0]
    model = collector.machine.plan.gpus[0].model
    assert gpu0.memory_reserved is None
    assert gpu0.memory_used + gpu0.memory_free == model.memory_total  # v1: total = used + free
    assert {p.pid: p.gpu_memory for p in snapshot.processes} == {
        3141: 24870 * MiB, 2718: 2148 * MiB, 1618: 1126 * MiB, 4040: 806 * MiB, 4100: 2568 * MiB}
    assert gpu0.throttle_reasons is not None  # throttle reasons, the old name of event reasons


def test_unsupported_fields_are_none_not_zero(opened):
    collector, clock = opened("faults")
    snapshot = sample_at(collector, clock, 30.0)
    v100, gtx = snapshot.devices[0], snapshot.devices[2]
    assert v100.fan_speed is None and v100.mig_enabled is None
    assert v100.temperature is not None and v100.ecc_corrected == 17
    assert (gtx.encoder_util, gtx.decoder_util, gtx.pcie_rx, gtx.pcie_tx) == (None, None, None, None)
    assert (gtx.ecc_corrected, gtx.ecc_uncorrected) == (None, None)
    assert gtx.fan_speed is not None and gtx.gpu_util is not None
    # the GTX reports no per-process utilisation either
    assert by_pid(snapshot)[4100].sm_util is None
    assert by_pid(snapshot)[3141].sm_util is not None


def test_lost_gpu_is_marked_and_the_others_still_report(opened):
    collector, clock = opened("faults")
    for t in (0.0, 1.0):  # and it stays marked on later samples
        snapshot = sample_at(collector, clock, t)
        lost = snapshot.devices[1]
        assert lost == dataclasses.replace(type(lost)(index=1), lost="GPU is lost", cuda_index=1)
        assert snapshot.problems == ("GPU 1 is not answering: GPU is lost",)
        assert snapshot.devices[0].memory_total is not None
        assert snapshot.devices[2].memory_total is not None
        assert {p.device_index for p in snapshot.processes} == {0, 2}


def test_vanished_denied_and_zombie_processes_are_listed_with_what_is_known(opened):
    collector, clock = opened("faults")
    sample_at(collector, clock, 0.0)
    processes = by_pid(sample_at(collector, clock, 10.0))

    gone = processes[4040]
    assert (gone.state, gone.device_index, gone.gpu_memory) == ("gone", 2, 806 * MiB)
    assert gone.note == "exited before its details could be read"
    assert gone.name is None and gone.cpu_percent is None

    denied = processes[2718]
    assert (denied.state, denied.device_index, denied.gpu_memory) == ("denied", 0, 2148 * MiB)
    assert denied.note == "details hidden: access denied (another user's process)"
    assert denied.sm_util is not None  # NVML still tells us how busy it is
    assert denied.user is None and denied.command == ()

    zombie = processes[1618]
    assert (zombie.state, zombie.gpu_memory) == ("zombie", 1126 * MiB)
    assert (zombie.name, zombie.user, zombie.ppid) == ("python", "ana", 3000)
    assert zombie.command == ()  # a zombie's command line cannot be read
    assert zombie.started_at == EPOCH - 5000.0
    assert zombie.note == "zombie: exited, but its parent has not reaped it yet"

    healthy = processes[3141]
    assert healthy.state == "ok" and healthy.cpu_percent > 0


def test_real_pynvml_is_restored_after_close(opened):
    collector, _ = opened("faults")
    collector.close()
    collector.close()  # twice is harmless
    assert pynvml.nvmlLib is None


def test_what_a_sample_costs_the_monitor_is_measured_on_its_clocks():
    from gputui.collect import sim
    from gputui.collect.collector import Collector

    machine = sim.install("workstation", clock=lambda: 0.0)
    timer, cpu = [0.0], [10.0]

    def tick():  # every timer reading moves 1 ms on
        timer[0] += 0.001
        return timer[0]

    try:
        collector = Collector(pynvml, machine.psutil, clock=machine.clock, wallclock=machine.wallclock,
                              proc_root=None, cpu_clock=lambda: cpu[0], timer=tick)
        first = collector.sample().monitor
        assert first.cpu_percent is None  # nothing to compare with yet
        assert first.nvml_ms > 0 and first.sample_ms > first.nvml_ms
        timer[0] += 0.997  # a second later, during which the monitor used 20 ms of CPU
        cpu[0] += 0.020
        second = collector.sample().monitor
        # CPU over the time between the two samples' ends: 20 ms over 1 s and this sample's ticks.
        elapsed = second.sample_ms / 1000 + 0.997 + 0.001
        assert second.cpu_percent == pytest.approx(100 * 0.020 / elapsed, abs=0.01)
        collector.close()
    finally:
        sim.uninstall()


def test_a_fake_clock_leaves_the_cost_unmeasured(opened):
    collector, _ = opened("workstation")
    assert collector.sample().monitor is None
