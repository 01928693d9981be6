"""Hand-built snapshots, a replaying snapshot source and the pilot helpers for the UI tests (no
simulator needed).

Fixed values and a fixed clock: whatever the tests draw is the same on every run.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from gputui.model import Device, Driver, GpuProcess, Host, HostProcess, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.sources.sampler import Sampler
from gputui.ui.startup.monitor_options import MonitorOptions
from gputui.ui.widgets.processes import ProcessTable

GIB = 1 << 30
MIB = 1 << 20
T0 = 1767603600.0  # 2026-01-05 09:00:00 UTC


def device(index: int, **changes) -> Device:
    base = Device(
        index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index:08d}", pci_bus_id=f"0000:{index:02x}:00.0",
        cuda_index=index, memory_total=80 * GIB, memory_used=(20 + 7 * index) * GIB,
        memory_free=(60 - 7 * index) * GIB, gpu_util=min(100, 40 + 8 * index), memory_util=30,
        encoder_util=0, decoder_util=0, temperature=50 + 3 * index, temperature_slowdown=90,
        fan_speed=None, power_draw=300.0 + 40 * index, power_limit=700.0, clock_sm=1980,
        clock_sm_max=1980, clock_memory=2619, clock_memory_max=2619, performance_state=0,
        pcie_generation=5, pcie_generation_max=5, pcie_width=16, pcie_width_max=16,
        pcie_rx=1200 * MIB, pcie_tx=300 * MIB, throttle_reasons=(), compute_mode="default",
    )
    return dataclasses.replace(base, **changes)


def process(pid: int, gpu: int, **changes) -> GpuProcess:
    base = GpuProcess(
        pid=pid, device_index=gpu, local_pid=pid, kind="compute", gpu_memory=(4 + gpu) * GIB,
        sm_util=50 + gpu, memory_util=20, name="python", user="alice",
        command=("python", "train.py", f"--rank={gpu}"), ppid=1000, cpu_percent=99.0,
        host_memory=3 * GIB, started_at=T0 - 3600,
    )
    return dataclasses.replace(base, **changes)


def training_snapshot(t: float = T0, *, lost: bool = False, extra=()) -> Snapshot:
    """Four H100s: a torchrun job with one rank per GPU, a notebook of bob's, a throttled GPU."""
    devices = [device(0), device(1), device(2, throttle_reasons=("sw_power_cap",)), device(3)]
    if lost:
        devices[3] = Device(index=3, name="NVIDIA H100 80GB HBM3", lost="GPU is lost")
    procs = [process(2000 + g, g) for g in range(4)]
    procs.append(process(3100, 0, user="bob", name="python", command=("jupyter-lab",),
                         gpu_memory=12 * GIB, sm_util=3, cpu_percent=2.0, ppid=3000,
                         started_at=T0 - 90000))
    procs.append(process(3200, 1, user="carol", command=(), name="Xorg", kind="graphics",
                         gpu_memory=300 * MIB, sm_util=None, cpu_percent=None, ppid=1))
    procs.extend(extra)
    parents = (
        HostProcess(pid=1000, ppid=900, name="torchrun", command=("torchrun", "--nproc-per-node=4", "train.py"),
                    user="alice"),
        HostProcess(pid=900, ppid=1, name="bash", command=("-bash",), user="alice"),
        HostProcess(pid=3000, ppid=1, name="bash", command=("bash",), user="bob"),
    )
    return Snapshot(
        taken_at=t,
        driver=Driver(driver_version="550.54.15", cuda_driver_version="12.4", nvml_version="12.550.54.15"),
        devices=tuple(devices), processes=tuple(procs), parents=parents,
        host=Host(hostname="dgx-test-01", cpu_count=64, cpu_percent=23.0, memory_total=512 * GIB,
                  memory_used=128 * GIB, swap_total=8 * GIB, swap_used=0, load_average=(3.5, 3.1, 2.9)),
        source="nvml",
    )


def fixture_pids() -> frozenset[int]:
    """The pids the hand-built training snapshot uses, for its GPU processes and their parents."""
    snap = training_snapshot()
    return frozenset(p.pid for p in snap.processes) | frozenset(p.pid for p in snap.parents)


def sleeping_child() -> subprocess.Popen:
    """A real process to stand for a job, at a pid none of the training snapshot's processes has.

    A fresh machine hands out pids in the low thousands, so the kernel may give the child 2000 or 3200:
    its row would then be the fixture's rank or Xorg, not the real process the test means.
    """
    taken = fixture_pids()
    strays: list[subprocess.Popen] = []
    try:
        while True:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            if child.pid not in taken:
                return child
            strays.append(child)
    finally:
        for stray in strays:
            stray.kill()
            stray.wait()


class ReplaySource:
    """A collector stand-in: hands out the given snapshots in turn, then repeats the last one."""

    def __init__(self, snapshots) -> None:
        self.snapshots = list(snapshots)
        self.calls = 0
        self.closed = False

    def sample(self) -> Snapshot:
        snap = self.snapshots[min(self.calls, len(self.snapshots) - 1)]
        self.calls += 1
        return snap

    def probe_reports(self):
        return ()

    def close(self) -> None:
        self.closed = True


# -- the live monitor on these snapshots, driven by Textual's pilot


# GpuTuiApp's own arguments; every other keyword is a MonitorOptions field.
APP_ARGUMENTS = ("banner", "first_sample", "requester", "attacher")


def app_on(source, **asked) -> GpuTuiApp:
    """The monitor on ``source``, ``asked`` as MonitorOptions' fields and the app's own arguments."""
    own = {name: asked.pop(name) for name in APP_ARGUMENTS if name in asked}
    return GpuTuiApp(source, MonitorOptions(**asked), **own)


def make_app(snapshots=None, **options) -> GpuTuiApp:
    source = ReplaySource(snapshots or [training_snapshot()])
    options.setdefault("me", "bob")
    return app_on(Sampler(source, watch_probes=False), **options)


async def settle(pilot, samples: int = 1, *, tries: int = 100) -> None:
    """Wait until the app has taken ``samples`` snapshots and drawn them (``tries`` pauses of 50 ms)."""
    for _ in range(tries):
        if pilot.app.samples >= samples:
            break
        await pilot.pause(0.05)
    assert pilot.app.samples >= samples
    await pilot.pause()



async def wait_for(pilot, check, tries: int = 100) -> None:
    """Wait until ``check()`` holds (``tries`` pauses of 50 ms), and fail saying so if it never does."""
    for _ in range(tries):
        if check():
            return
        await pilot.pause(0.05)
    assert check(), f"still not so after {tries * 0.05:g} s"

def table_keys(app) -> list[str]:
    table = app.screen.query_one(ProcessTable)
    return list(table.row_keys)
