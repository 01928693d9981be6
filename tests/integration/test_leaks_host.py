"""Leak verdicts for CPU-only jobs, from host memory beyond the tracked tensors (synthetic steps)."""

from gputui.analysis.leaks import leak_verdict
from gputui.model import MemoryCategories, ProbeReport, StepRecord

KIB = 1 << 10
MIB = 1 << 20
TRACKED = 6 * MIB  # parameters, gradients and Adam state of a small MLP
BASE = 300 * MIB  # the interpreter, torch and the dataset, in host memory


def cpu_report(n, *, heap=None, rss=None, activations=lambda s: 0, device="cpu", reserved=None):
    """n CPU steps; ``heap``/``rss`` give what host memory holds beyond the tracked tensors."""
    steps = []
    for s in range(1, n + 1):
        allocated = TRACKED + activations(s)
        steps.append(StepRecord(
            step=s, ended_at=100.0 + s * 0.005, duration=0.005, device=device, allocated=allocated,
            reserved=reserved, categories=MemoryCategories(
                TRACKED // 4, TRACKED // 4, TRACKED // 2, activations(s), None),
            host_allocated=None if heap is None else allocated + heap(s),
            host_memory=None if rss is None else allocated + rss(s),
        ))
    return ProbeReport(pid=1, taken_at=steps[-1].ended_at, steps=tuple(steps))


def test_a_growing_dict_of_tensors_on_cpu_is_a_leak_of_other_tensors():
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + s * 64 * KIB, rss=lambda s: BASE + 400 * MIB))
    assert v.state == "leak" and v.category == "other"
    # judged on the C heap in use, which holds every tensor; the tracked categories stay flat
    assert v.allocated_per_step == 64 * KIB and v.host_other_per_step == 64 * KIB
    assert v.allocated == TRACKED + BASE + 80 * 64 * KIB
    assert v.growth[0].name == "other" and v.growth[0].bytes_per_step == 64 * KIB
    assert v.growth[0].level is None  # what host memory holds is not all tensors: no level claimed
    assert v.host_memory == TRACKED + BASE + 400 * MIB  # resident, as people know it from top
    assert v.reason == (
        "host memory in use grows 64.0 KiB per step over the last 64 steps (other +64.0 KiB/step); "
        "now 311 MiB")


def test_the_oom_forecast_uses_the_free_memory_given():
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + s * MIB), device_free=100 * MIB)
    assert v.state == "leak" and v.oom_step == 80 + 100 + 1 and v.oom_in == 100 * 0.005


def test_a_young_host_leak_is_watched_first():
    v = leak_verdict(cpu_report(20, heap=lambda s: BASE + s * 64 * KIB))
    assert v.state == "warming_up" and v.host_other_per_step == 64 * KIB and v.steps_needed == 4
    assert v.reason.endswith("over 20 steps; 4 more steps to confirm a leak")


def test_a_one_off_jump_in_host_memory_is_no_leak():
    # The C library takes 8 MiB once (a buffer, a larger batch) and keeps it.
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + (8 * MIB if s >= 50 else 0)))
    assert v.state == "clean", v.reason
    # ... and neither is a little creep below the floor (a list of floats, the probe's own records).
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + s * KIB))
    assert v.state == "clean" and v.host_other_per_step == KIB


def test_host_memory_released_again_and_again_is_no_leak():
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + (s % 8) * 512 * KIB))
    assert v.state == "clean", v.reason


def test_kept_graphs_on_cpu_stay_activations_though_host_memory_grows_faster():
    # Autograd's nodes and the C library's overhead come on top of the saved tensors the probe counts.
    v = leak_verdict(cpu_report(80, activations=lambda s: s * 256 * KIB,
                                heap=lambda s: BASE + s * 40 * KIB))
    assert v.state == "leak" and v.category == "activations"
    assert v.allocated_per_step == 296 * KIB and v.host_other_per_step == 40 * KIB


def test_kept_graphs_seen_on_a_few_measured_steps_are_activations():
    # The probe measures one step in ten; the others carry only the heap in use. The live activations
    # of measured steps grow by a tenth of the leak, but each measured step says what it kept.
    steps = []
    for s in range(1, 81):
        heap = BASE + TRACKED + s * 300 * KIB
        if s % 10:
            steps.append(StepRecord(step=s, ended_at=100.0 + s * 0.005, duration=0.005, device="cpu",
                                    host_allocated=heap))
        else:
            acts = (s // 10) * 256 * KIB
            steps.append(StepRecord(
                step=s, ended_at=100.0 + s * 0.005, duration=0.005, device="cpu", allocated=TRACKED + acts,
                categories=MemoryCategories(TRACKED // 4, TRACKED // 4, TRACKED // 2, acts, None),
                host_allocated=heap, activations_kept=256 * KIB))
    v = leak_verdict(ProbeReport(pid=1, taken_at=steps[-1].ended_at, steps=tuple(steps)))
    assert v.state == "leak" and v.category == "activations"
    growth = {g.name: g.bytes_per_step for g in v.growth}
    assert growth["activations"] == 256 * KIB and growth["other"] == 44 * KIB
    assert v.allocated_per_step == 300 * KIB and v.steps_seen == 80


def test_a_leak_between_measured_steps_waits_for_one_to_say_what_grows():
    # The growth began at step 40, after the latest measured step: that step cannot say what grows.
    steps = [StepRecord(step=1, ended_at=100.0, duration=0.005, device="cpu", allocated=TRACKED,
                        categories=MemoryCategories(1, 1, 1, 0, None), host_allocated=BASE)]
    steps += [StepRecord(step=s, ended_at=100.0 + s * 0.005, duration=0.005, device="cpu",
                         host_allocated=BASE + max(0, s - 40) * MIB) for s in range(2, 80)]
    v = leak_verdict(ProbeReport(pid=1, taken_at=steps[-1].ended_at, steps=tuple(steps)))
    assert v.state == "warming_up" and v.category is None
    assert v.reason.endswith("waiting for the probe to measure a step to tell what grows")


def test_resident_memory_alone_needs_more_growth_and_more_steps():
    growing = lambda s: BASE + s * 64 * KIB  # noqa: E731
    assert leak_verdict(cpu_report(40, rss=growing)).state == "warming_up"
    v = leak_verdict(cpu_report(64, rss=growing))
    assert v.state == "leak" and v.category == "other" and v.host_other_per_step == 64 * KIB
    # 20 KiB a step is 1.25 MiB over the window: enough for the exact figure, not for resident memory.
    assert leak_verdict(cpu_report(80, rss=lambda s: BASE + s * 20 * KIB)).state == "clean"
    assert leak_verdict(cpu_report(80, heap=lambda s: BASE + s * 20 * KIB)).state == "leak"


def test_jobs_with_an_allocator_are_judged_on_it_not_on_host_memory():
    v = leak_verdict(cpu_report(80, heap=lambda s: BASE + s * MIB, device="cuda:0", reserved=8 * MIB))
    assert v.state == "clean" and v.host_other_per_step is None and v.host_memory is None
    assert {g.name: g.bytes_per_step for g in v.growth}["other"] == 0.0


def test_steps_without_host_readings_are_judged_as_before():
    v = leak_verdict(cpu_report(80))
    assert v.state == "clean" and v.host_other_per_step is None
