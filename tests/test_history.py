"""History keeps bounded series per device and per GPU process."""

from gputui.analysis.history import History
from gputui.model import Device, GpuProcess, Snapshot


def snap(t, used, proc_mem=None):
    procs = () if proc_mem is None else (GpuProcess(pid=7, device_index=0, gpu_memory=proc_mem),)
    return Snapshot(taken_at=t, devices=(Device(index=0, memory_used=used, gpu_util=None),), processes=procs)


def test_series_keep_order_and_unknowns():
    h = History()
    for t in range(3):
        h.add(snap(float(t), used=t * 10, proc_mem=t))
    s = h.device(0, "memory_used")
    assert s.times == (0.0, 1.0, 2.0) and s.values == (0, 10, 20)
    assert h.device(0, "gpu_util").values == (None, None, None)
    assert h.device(0, "gpu_util").known() == ((), ())
    assert h.process((7, 0), "gpu_memory").values == (0, 1, 2)


def test_old_points_and_vanished_processes_are_forgotten():
    h = History(span=5.0)
    h.add(snap(0.0, 1, proc_mem=1))
    for t in range(1, 11):
        h.add(snap(float(t), t))
    assert h.device(0, "memory_used").times[0] == 5.0
    assert h.process_keys() == ()
    assert len(h.process((7, 0), "gpu_memory")) == 0


def test_point_count_is_bounded():
    h = History(span=1e9, max_points=4)
    for t in range(10):
        h.add(snap(float(t), t))
    assert h.device(0, "memory_used").values == (6, 7, 8, 9)
