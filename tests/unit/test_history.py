"""History keeps bounded series per device and per GPU process."""

import tracemalloc

from gputui.analysis.history import PROCESS_METRICS, History
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


def test_unknowns_keep_their_places_as_old_points_fall_off():
    h = History(span=1e9, max_points=3)
    for t, used in enumerate((None, 5, None, 7, None)):
        h.add(Snapshot(taken_at=float(t), devices=(Device(index=0, memory_used=used),)))
    assert h.device(0, "memory_used").values == (None, 7, None)
    assert h.device(0, "memory_used").times == (2.0, 3.0, 4.0)
    h.add(Snapshot(taken_at=5.0, devices=(Device(index=0, memory_used=8),)))
    assert h.device(0, "memory_used").values == (7, None, 8)


def test_values_come_back_as_the_model_gave_them():
    """Whole numbers stay ints (bytes, percentages), fractions floats; a fraction where the model
    promised whole numbers is kept as given, and so are the numbers before it."""
    h = History()
    for t, util in enumerate((40, 41.5, 42)):
        procs = (GpuProcess(pid=7, device_index=0, gpu_memory=2**40 + t, cpu_percent=12.5 + t),)
        h.add(Snapshot(taken_at=float(t), devices=(Device(index=0, gpu_util=util, power_draw=300.25),),
                       processes=procs))
    assert [type(v) for v in h.process((7, 0), "gpu_memory").values] == [int, int, int]
    assert h.process((7, 0), "gpu_memory").values == (2**40, 2**40 + 1, 2**40 + 2)
    assert h.process((7, 0), "cpu_percent").values == (12.5, 13.5, 14.5)
    assert h.device(0, "power_draw").values == (300.25, 300.25, 300.25)
    assert h.device(0, "gpu_util").values == (40, 41.5, 42)


def test_a_sample_costs_about_eight_bytes_a_value():
    """Ten minutes of 64 processes at 1 s: the numbers are kept as C doubles and 64-bit ints, not as
    Python objects that the snapshot they came from would have let go of (issue 31 item 21: 32-40 bytes
    a value in deques, 6 MB of the monitor's memory ten minutes in)."""
    processes, samples = 64, 600
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        h = History()
        for t in range(samples):
            procs = tuple(GpuProcess(pid=100 + i, device_index=i % 8, gpu_memory=2**30 + t * 2**20, sm_util=50 + t % 40,
                                     cpu_percent=t / 7, host_memory=2**31 + t * 4096) for i in range(processes))
            h.add(Snapshot(taken_at=float(t), processes=procs))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    values = processes * samples * len(PROCESS_METRICS)
    assert kept / values < 10, f"{kept / values:.1f} bytes a value"
    # a size in KiB takes four bytes, a percentage one: 4 + 1 + 8 + 4 a process-sample, with the arrays' slack;
    # the instant is the history's, kept once for all its tracks (issue 46: 36.5 with each track's own copy of
    # the instants and the sizes in bytes)
    assert kept / (processes * samples) < 21, f"{kept / (processes * samples):.1f} bytes a process-sample"


def test_a_percentage_takes_a_byte_and_a_reading_that_does_not_fit_widens_its_column():
    h = History()
    for t, (sm, temperature) in enumerate(((97, 40), (300, -5), (12, 41))):
        h.add(Snapshot(taken_at=float(t), devices=(Device(index=0, temperature=temperature),),
                       processes=(GpuProcess(pid=7, device_index=0, sm_util=sm),)))
    assert h.process((7, 0), "sm_util").values == (97, 300, 12)
    assert h.device(0, "temperature").values == (40, -5, 41)
    assert [type(v) for v in h.process((7, 0), "sm_util").values] == [int, int, int]
    fresh = History()
    fresh.add(snap(0.0, 1, proc_mem=1))
    assert fresh._processes[(7, 0)].columns["sm_util"].itemsize == 1


def test_the_series_of_one_track_share_their_times():
    """Charts ask for several metrics of a device at each refresh: one tuple of times serves them all."""
    h = History()
    for t in range(3):
        h.add(snap(float(t), used=t * 10, proc_mem=t))
    assert h.device(0, "memory_used").times is h.device(0, "gpu_util").times == (0.0, 1.0, 2.0)
    h.add(snap(3.0, used=30))
    assert h.device(0, "gpu_util").times is h.device(0, "memory_used").times == (0.0, 1.0, 2.0, 3.0)


def test_a_process_missing_from_a_sample_has_no_point_at_its_instant():
    h = History(span=1e9, max_points=4)
    for t, here in enumerate((True, False, True)):
        h.add(snap(float(t), used=t, proc_mem=t if here else None))
    assert h.process((7, 0), "gpu_memory").times == (0.0, 2.0)
    for t, here in enumerate((True, False, True), start=3):
        h.add(snap(float(t), used=t, proc_mem=t if here else None))
    assert h.device(0, "memory_used").times == (2.0, 3.0, 4.0, 5.0)  # the four newest instants
    series = h.process((7, 0), "gpu_memory")
    assert (series.times, series.values) == ((2.0, 3.0, 5.0), (2, 3, 5))


def test_a_size_is_kept_in_kib_and_one_that_is_not_whole_kib_widens_its_column():
    """NVML gives sizes in MiB and /proc in pages: four bytes a sample in KiB. A size that is not whole KiB, or
    is too large for four bytes, is kept in bytes from then on, the sizes before it too."""
    h = History()
    for t, (used, rss) in enumerate(((2**33, 4096), (2**33 + 1, 2**50), (2**33 + 2**20, 8192))):
        h.add(Snapshot(taken_at=float(t), devices=(Device(index=0, memory_used=used),),
                       processes=(GpuProcess(pid=7, device_index=0, host_memory=rss, gpu_memory=2**20 * t),)))
    assert h.device(0, "memory_used").values == (2**33, 2**33 + 1, 2**33 + 2**20)
    assert h.process((7, 0), "host_memory").values == (4096, 2**50, 8192)
    assert h.process((7, 0), "gpu_memory").values == (0, 2**20, 2**21)
    assert [type(v) for v in h.process((7, 0), "host_memory").values] == [int, int, int]
    columns = h._processes[(7, 0)].columns
    assert (columns["gpu_memory"].typecode, columns["host_memory"].typecode) == ("I", "q")


def test_the_tracks_seen_at_the_same_instants_share_one_tuple_of_times():
    """Every track of a history is sampled at the history's instants: one tuple of them for all the series
    handed out until the next sample (64 processes' trends read one, not 64 copies)."""
    h = History()
    for t in range(3):
        procs = tuple(GpuProcess(pid=pid, device_index=0, gpu_memory=t) for pid in (7, 8))
        h.add(Snapshot(taken_at=float(t), devices=(Device(index=0, memory_used=t),), processes=procs))
    times = h.device(0, "memory_used").times
    assert times == (0.0, 1.0, 2.0)
    assert h.process((7, 0), "gpu_memory").times is times and h.process((8, 0), "sm_util").times is times


def test_a_history_keeps_only_the_metrics_asked_for():
    h = History(device_metrics=(), process_metrics=("gpu_memory",))
    for t in range(3):
        h.add(snap(float(t), used=t * 10, proc_mem=t))
    assert h.process((7, 0), "gpu_memory").values == (0, 1, 2)
    assert len(h.device(0, "memory_used")) == 0  # no device tracks at all
    assert h.process_keys() == ((7, 0),)


def test_the_judge_keeps_only_what_the_trends_read():
    """The live monitor's own history keeps every metric for its charts; the sampler's judge kept a second
    copy of them all, which doubled the history's growth in resident memory (issue 31 item 21)."""
    from gputui.sample.judge import Judge

    judge = Judge()
    for t in range(3):
        judge(snap(float(t), used=t * 10, proc_mem=t))
    assert judge.history is not None
    assert judge.history.process((7, 0), "gpu_memory").values == (0, 1, 2)
    assert len(judge.history.device(0, "memory_used")) == 0
    assert judge.history.process_metrics == ("gpu_memory",)


def test_the_judge_keeps_under_16_bytes_a_process_sample():
    """Ten minutes of 64 processes at 1 s: the sampler's judge keeps each process's memory as a C number
    (4 bytes, in KiB; the instant is its history's, once for all processes), with the trends' and the idle
    judge's own state: about 13.5 bytes. Each process's own copy of the instants, and its memory in bytes, made
    25.4 (issue 46); a second copy of every metric, and the Series tuples it had read once, made 82 (3 MB of
    the monitor's memory; issue 31 item 21)."""
    from gputui.sample.judge import Judge

    def sample(t):
        procs = tuple(GpuProcess(pid=100 + i, device_index=i % 8, gpu_memory=2**30 + t * 4096, sm_util=50,
                                 cpu_percent=t / 7, host_memory=2**31 + t) for i in range(processes))
        devices = tuple(Device(index=d, memory_used=2**34 + t, gpu_util=50, power_draw=300.5) for d in range(8))
        return Snapshot(taken_at=float(t), devices=devices, processes=procs)

    processes, samples = 64, 600
    judge = Judge()
    judge(sample(0))  # the analyses' modules imported: not what is measured
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in range(1, samples):
            judge(sample(t))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept / (processes * samples) < 16, f"{kept / (processes * samples):.1f} bytes a process-sample"
