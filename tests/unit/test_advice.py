"""Advice rules: what fires, in which order, with which numbers."""

from dataclasses import replace

from gputui.analysis.advice import advise
from gputui.analysis.leaks import leak_verdict
from gputui.analysis.sites import growing_sites
from gputui.model import (
    Advice,
    AllocationSite,
    AllocatorStats,
    Device,
    GpuProcess,
    LeakKeeper,
    MemoryCategories,
    ProbeDevice,
    ProbeReport,
    Snapshot,
    StepRecord,
)
from gputui.model.verdicts import ProcessTrend

MIB = 1 << 20
GIB = 1 << 30


def gpu(index=0, total=80 * GIB, used=20 * GIB, cuda_index=None):
    return Device(index=index, uuid=f"GPU-{index}", memory_total=total, memory_used=used,
                  memory_free=total - used, cuda_index=cuda_index)


def snap(*devices, processes=()):
    return Snapshot(taken_at=2000.0, devices=devices or (gpu(),), processes=processes)


def job(pid=42, device=0, memory=8 * GIB, **kw):
    return GpuProcess(pid=pid, device_index=device, gpu_memory=memory, **kw)


def cats(parameters=GIB, gradients=GIB, optimizer_state=GIB, activations=0, other=64 * MIB):
    return MemoryCategories(parameters=parameters, gradients=gradients, optimizer_state=optimizer_state,
                            activations=activations, other=other)


def probe_report(steps=(), categories=None, allocator=None, sites=(), recorded=(), taken_at=None):
    device = ProbeDevice("cuda:0", cuda_index=0, uuid="GPU-0", categories=categories,
                         allocator=allocator or AllocatorStats(allocated=4 * GIB, reserved=5 * GIB))
    return ProbeReport(pid=42, taken_at=taken_at if taken_at is not None else (steps[-1].ended_at if steps else 0.0),
                       devices=(device,), steps=tuple(steps), sites=tuple(sites), recorded_steps=tuple(recorded))


def step(s, allocated, peak=None, categories=None, reserved=None):
    return StepRecord(step=s, ended_at=1000.0 + s * 0.5, duration=0.5, device="cuda:0", allocated=allocated,
                      reserved=reserved, peak_backward=peak, categories=categories)


def leaking_job():
    steps = [
        step(s, 4 * GIB + s * 24 * MIB, peak=6 * GIB + s * 24 * MIB, reserved=5 * GIB + s * 24 * MIB,
             categories=cats(activations=s * 24 * MIB))
        for s in range(40)
    ]
    site = AllocationSite(where="train.py:42 in train_step", live_bytes=tuple(k * 24 * MIB for k in range(8)))
    return probe_report(steps, categories=steps[-1].categories, sites=(site,), recorded=tuple(range(32, 40)))


def test_a_leak_near_oom_ranks_the_deadline_then_the_fix_with_its_line():
    report = leaking_job()
    device = gpu(used=78 * GIB)  # 2 GiB free
    verdict = leak_verdict(report, device_free=device.memory_free)
    assert verdict.state == "leak" and verdict.oom_in == (GIB / (24 * MIB)) * 0.5
    advice = advise(snapshot=snap(device), process=job(), report=report, verdict=verdict,
                    sites=growing_sites(report))
    assert [a.kind for a in advice] == ["oom-soon", "keep-graph"]
    assert [a.rank for a in advice] == [1, 2]
    deadline, fix = advice
    assert deadline.severity == "critical" and deadline.title == "Out of memory in about 21 s"
    assert deadline.detail == "At 24.0 MiB per step (leak), the device is full by step 82."
    assert fix.severity == "critical" and fix.estimated_saving == 39 * 24 * MIB
    assert "train.py:42 in train_step (+24.0 MiB/step)" in fix.detail
    assert "total_loss += loss.item()" in fix.action and "out.detach()" in fix.action


def test_a_leak_without_recorded_sites_says_how_to_find_the_line():
    report = leaking_job()
    verdict = leak_verdict(report)  # no device figures: no forecast
    advice = advise(snapshot=snap(), process=job(), report=report, verdict=verdict)
    assert advice[0].kind == "keep-graph"
    assert advice[0].detail.endswith("Record allocation sites from the detail screen to find the line.")
    assert "oom-soon" not in [a.kind for a in advice]


def test_growing_other_tensors_get_the_bounded_cache_advice():
    steps = [step(s, 2 * GIB + s * 3 * MIB, categories=cats(other=s * 3 * MIB)) for s in range(30)]
    report = probe_report(steps, categories=steps[-1].categories)
    advice = advise(snapshot=snap(), process=job(), report=report, verdict=leak_verdict(report))
    assert advice[0].kind == "growing-tensors" and advice[0].severity == "critical"


def test_evaluation_with_grad_enabled():
    report = replace(probe_report(categories=cats(activations=3 * GIB), taken_at=50.0), started_at=10.0)
    advice = advise(snapshot=snap(), process=job(), report=report)
    assert [a.kind for a in advice] == ["no-grad-eval"]
    assert advice[0].estimated_saving == 3 * GIB
    assert advice[0].detail.startswith("3.00 GiB of activations are saved for backward, with no optimizer step")
    assert "torch.inference_mode()" in advice[0].action


def test_an_evaluation_phase_after_training_counts_but_training_itself_does_not():
    steps = [step(s, 4 * GIB) for s in range(20)]  # last step ends at 1009.5
    during = probe_report(steps, categories=cats(activations=GIB), taken_at=1010.0)
    assert advise(snapshot=snap(), process=job(), report=during) == ()
    after = probe_report(steps, categories=cats(activations=GIB), taken_at=1084.5)
    (advice,) = advise(snapshot=snap(), process=job(), report=after)
    assert advice.kind == "no-grad-eval" and "no optimizer step for 75 s" in advice.detail


def test_advice_comes_from_settled_evidence_only():
    # The first training step, two seconds in, has saved 3 GiB and not reached optimizer.step() yet:
    # that is training, not an evaluation with gradients on.
    first = replace(probe_report(categories=cats(activations=3 * GIB), taken_at=12.0), started_at=10.0)
    assert advise(snapshot=snap(), process=job(), report=first) == ()
    # Long after the last step, the figure is that step's peak (held by nobody now): no advice either.
    steps = [step(s, 4 * GIB) for s in range(20)]
    peak = cats(activations=GIB)
    peak = replace(peak, activations_step=19)
    assert advise(snapshot=snap(), process=job(), report=probe_report(steps, categories=peak,
                                                                       taken_at=2000.0)) == ()
    # Steps without readings between measured ones leave the peak advice where it was.
    measured = [step(s, 4 * GIB, peak=10 * GIB) if s % 4 == 0 else
                StepRecord(step=s, ended_at=1000.0 + s * 0.5, duration=0.5, device="cuda:0")
                for s in range(2, 23)]
    kinds = {tuple(a.kind for a in advise(snapshot=snap(), process=job(),
                                          report=probe_report(measured[:n], categories=cats())))
             for n in range(4, len(measured) + 1)}
    assert kinds == {("activations",)}


def test_activations_dominating_the_peak():
    steps = [step(s, 4 * GIB, peak=10 * GIB) for s in range(20)]
    report = probe_report(steps, categories=cats())
    (advice,) = advise(snapshot=snap(), process=job(), report=report)
    assert advice.kind == "activations" and advice.severity == "info"
    assert advice.estimated_saving == 3 * GIB
    assert "6.00 GiB (60%)" in advice.detail and "checkpoint(" in advice.action
    tight = advise(snapshot=snap(gpu(total=12 * GIB, used=11 * GIB)), process=job(), report=report)
    assert tight[0].severity == "warning" and "83% of the device" in tight[0].detail


def test_optimizer_state_dominating():
    report = probe_report(categories=cats(parameters=2 * GIB, gradients=2 * GIB, optimizer_state=4 * GIB,
                                          other=0))
    (advice,) = advise(snapshot=snap(), process=job(), report=report)
    assert advice.kind == "optimizer-state" and advice.estimated_saving == 3 * GIB
    assert advice.detail == "Optimizer state holds 4.00 GiB (50% of the tensors, 2.0x the parameters)."


def test_fragmented_cache_suggests_expandable_segments_unless_already_on():
    frag = AllocatorStats(allocated=10 * GIB, reserved=20 * GIB, inactive_split=6 * GIB, alloc_retries=12)
    (advice,) = advise(snapshot=snap(), process=job(), report=probe_report(allocator=frag))
    assert advice.kind == "expandable-segments" and advice.estimated_saving == 6 * GIB
    assert advice.detail.startswith("Reserved 20.0 GiB but allocated 10.0 GiB: 10.0 GiB cached, 6.00 GiB")
    assert "expandable_segments:True" in advice.action
    on = AllocatorStats(allocated=10 * GIB, reserved=20 * GIB, inactive_split=6 * GIB, alloc_retries=12,
                        expandable_segments=True)
    assert advise(snapshot=snap(), process=job(), report=probe_report(allocator=on)) == ()
    no_retries = AllocatorStats(allocated=10 * GIB, reserved=20 * GIB, inactive_split=6 * GIB, alloc_retries=0)
    assert advise(snapshot=snap(), process=job(), report=probe_report(allocator=no_retries)) == ()


def test_other_processes_on_the_same_gpu_and_where_to_go():
    mine = job(memory=20 * GIB)
    others = (job(pid=7, memory=30 * GIB, user="alice", name="python"),
              job(pid=8, memory=20 * GIB, user="bob", name="jupyter"),
              job(pid=9, device=1, memory=10 * GIB))
    crowded = snap(gpu(used=78 * GIB), gpu(index=1, used=10 * GIB, cuda_index=1),
                   processes=(mine,) + others)
    (advice,) = advise(snapshot=crowded, process=mine)
    assert advice.kind == "other-processes" and advice.severity == "warning"
    assert advice.estimated_saving == 50 * GIB
    assert advice.title == "Other processes hold 50.0 GiB on GPU 0"
    assert advice.detail == ("2 other processes on this GPU: 7 (alice, python) 30.0 GiB, "
                             "8 (bob, jupyter) 20.0 GiB.")
    assert "CUDA_VISIBLE_DEVICES=1 python train.py   # GPU 1: 70.0 GiB free" in advice.action


def test_a_growing_process_without_probe_is_told_to_attach_it():
    proc = job(command=("python", "train.py", "--lr", "0.1"))
    trend = ProcessTrend("growing", rate=MIB, level=8 * GIB, samples=300, span=299.0, time_to_oom=3600.0)
    advice = advise(snapshot=snap(), process=proc, trend=trend)
    assert [a.kind for a in advice] == ["oom-soon", "attach-probe"]
    assert advice[0].severity == "warning" and advice[0].title == "Out of memory in about 60 min"
    assert advice[0].detail == "Its memory grows 60 MiB/min and 60.0 GiB is left."
    assert "gputui run -- python train.py --lr 0.1" in advice[1].action
    far = ProcessTrend("growing", rate=MIB, level=8 * GIB, time_to_oom=7 * 3600.0)
    assert [a.kind for a in advise(snapshot=snap(), process=proc, trend=far)] == ["attach-probe"]


def test_a_healthy_process_gets_no_advice():
    steps = [step(s, 4 * GIB, peak=5 * GIB, reserved=5 * GIB, categories=cats()) for s in range(40)]
    report = probe_report(steps, categories=cats())
    trend = ProcessTrend("steady", rate=0.0, level=6 * GIB, samples=300, span=299.0)
    assert advise(snapshot=snap(), process=job(), report=report, trend=trend,
                  verdict=leak_verdict(report)) == ()


def test_ranking_puts_warnings_before_info_and_bigger_savings_first():
    mine, other = job(memory=30 * GIB), job(pid=7, memory=10 * GIB)
    categories = cats(parameters=GIB, gradients=GIB, optimizer_state=6 * GIB)
    steps = [step(s, 4 * GIB, peak=10 * GIB, categories=categories) for s in range(20)]
    frag = AllocatorStats(allocated=10 * GIB, reserved=20 * GIB, inactive_split=6 * GIB, alloc_retries=3)
    report = probe_report(steps, categories=categories, allocator=frag)
    advice = advise(snapshot=snap(gpu(used=40 * GIB), processes=(mine, other)), process=mine, report=report)
    assert [(a.rank, a.kind, a.severity, a.estimated_saving) for a in advice] == [
        (1, "expandable-segments", "warning", 6 * GIB),
        (2, "other-processes", "info", 10 * GIB),
        (3, "optimizer-state", "info", 6 * GIB * 3 // 4),
        (4, "activations", "info", 3 * GIB),
    ]


def test_a_cpu_job_growing_untracked_tensors_gets_the_rate_from_host_memory_and_the_line():
    steps = [StepRecord(step=s, ended_at=1000.0 + s * 0.005, duration=0.005, device="cpu", allocated=6 * MIB,
                        categories=MemoryCategories(MIB, MIB, 4 * MIB, 0, None),
                        host_allocated=300 * MIB + s * 64 * 1024) for s in range(1, 81)]
    site = AllocationSite(where="loops.py:83 in leak_cache", live_bytes=tuple(k * 64 * 1024 for k in range(12)))
    keeper = LeakKeeper(name="cache", scope="local", what="a dict", size=80, per_step=1.0,
                        where=("loops.py:93 in leak_cache",))
    report = ProbeReport(pid=42, taken_at=1000.4, devices=(ProbeDevice("cpu"),), steps=tuple(steps),
                         sites=(site,), recorded_steps=tuple(range(69, 81)), keepers=(keeper,))
    verdict = leak_verdict(report)
    (advice,) = advise(snapshot=snap(), process=None, report=report, verdict=verdict,
                       sites=growing_sites(report))
    assert advice.kind == "growing-tensors" and advice.severity == "critical"
    assert advice.detail == (
        "Host memory beyond parameters, gradients, optimizer state and activations grows 64.0 KiB per "
        "step over 64 steps: a list, dict or cache of tensors that is never emptied. Kept at: "
        "loops.py:93 in leak_cache (cache, a dict grows by 1 item a step). Allocated at: "
        "loops.py:83 in leak_cache (+64.0 KiB/step).")
    recording = ProbeReport(pid=42, taken_at=1000.4, devices=(ProbeDevice("cpu"),), steps=tuple(steps),
                            recording=True)
    (advice,) = advise(snapshot=snap(), process=None, report=recording, verdict=verdict)
    assert advice.detail.endswith("The probe is recording allocation sites now, to find the line.")


def test_a_leak_read_every_few_steps_says_over_how_many_steps_not_readings():
    # 40 readings, one every 4 steps (as a probe within its budget reads): the window is the last 64 steps,
    # 16 readings spanning 61 steps.
    steps = [
        step(s, 4 * GIB + s * 6 * MIB, peak=6 * GIB + s * 6 * MIB, reserved=5 * GIB + s * 6 * MIB,
             categories=cats(activations=s * 6 * MIB))
        for s in range(0, 160, 4)
    ]
    report = probe_report(steps, categories=steps[-1].categories)
    verdict = leak_verdict(report)
    assert verdict.state == "leak" and verdict.window_steps == 61
    fix = advise(snapshot=snap(), process=job(), report=report, verdict=verdict)[0]
    assert fix.detail.startswith("Allocated memory grows 6.00 MiB per step over 61 steps"), fix.detail


def _cpu_leak_kept_by(keeper: LeakKeeper) -> Advice:
    steps = [StepRecord(step=s, ended_at=1000.0 + s * 0.005, duration=0.005, device="cpu", allocated=6 * MIB,
                        categories=MemoryCategories(MIB, MIB, 4 * MIB, 0, None),
                        host_allocated=300 * MIB + s * 64 * 1024) for s in range(1, 81)]
    report = ProbeReport(pid=42, taken_at=1000.4, devices=(ProbeDevice("cpu"),), steps=tuple(steps),
                         keepers=(keeper,))
    (advice,) = advise(snapshot=snap(), process=None, report=report, verdict=leak_verdict(report))
    return advice


def test_the_fix_is_written_for_the_keepers_kind_and_name():
    # Issue 47 item 7: `losses.append(loss)` was shown a dict's example (`cache[key] = value.detach()`).
    losses = LeakKeeper(name="losses", scope="local", what="a list", size=80, per_step=1.0,
                        where=("train.py:40 in train",))
    assert _cpu_leak_kept_by(losses).action == (
        "Bound it, or keep numbers instead of tensors:\n"
        "    losses.append(loss.item())   # a number; not: losses.append(loss)\n"
        "    losses.append(loss.detach())   # to keep a tensor, without its graph\n"
        "    del losses[:-LIMIT]   # and keep only the latest")
    cache = LeakKeeper(name="self.cache", scope="attribute", what="a dict", size=80, per_step=1.0,
                       where=("model.py:15 in forward",))
    assert _cpu_leak_kept_by(cache).action == (
        "Bound it, or keep numbers instead of tensors:\n"
        "    self.cache[key] = value.item()   # a number; or value.detach() to keep a tensor\n"
        "    if len(self.cache) > LIMIT: self.cache.pop(next(iter(self.cache)))")
    kept = LeakKeeper(name="seen", scope="global", what="a set", size=80, per_step=1.0, where=("a.py:3 in f",))
    assert _cpu_leak_kept_by(kept).action.endswith("if len(cache) > LIMIT: cache.pop(next(iter(cache)))")
