"""The memory breakdown of a probed device: every item from the probe's figures and NVML's, adding up
to NVML's per-process memory, computed without Textual."""

from gputui.analysis.breakdown import breakdowns, devices_shown
from gputui.analysis.breakdown import explain as explain_for
from gputui.model import AllocatorStats, MemoryCategories, ProbeDevice, ProbeReport

MIB = 1 << 20
GIB = 1 << 30


def explain(device, nvml):
    return explain_for(4242, device, nvml)


def device(allocator=None, categories=None) -> ProbeDevice:
    return ProbeDevice("cuda:0", 0, "GPU-0", allocator, categories)


def test_items_explain_the_whole_nvml_figure():
    alloc = AllocatorStats(allocated=10 * GIB, reserved=14 * GIB, inactive_split=1 * GIB)
    cats = MemoryCategories(parameters=2 * GIB, gradients=2 * GIB, optimizer_state=4 * GIB,
                            activations=1 * GIB, other=512 * MIB)
    b = explain(device(alloc, cats), nvml=14 * GIB + 500 * MIB)
    assert [(i.key, i.size) for i in b.items] == [
        ("parameters", 2 * GIB), ("gradients", 2 * GIB), ("optimizer_state", 4 * GIB),
        ("activations", GIB), ("other", 512 * MIB),
        ("untracked", 512 * MIB),  # allocated beyond the categories
        ("cache", 3 * GIB), ("fragmentation", GIB), ("context", 500 * MIB)]
    assert b.total == b.nvml == sum(i.size for i in b.items) == 14 * GIB + 500 * MIB
    assert b.basis == "NVML per-process memory" and b.note == ""


def test_activations_read_between_steps_are_the_last_peak_taken_out_of_the_cache():
    # At a step's end backward has freed the graph: the allocator counts it in its cache, and the
    # probe reports step 40's peak, which the next step's forward pass takes again.
    alloc = AllocatorStats(allocated=8 * GIB, reserved=14 * GIB, inactive_split=GIB)
    cats = MemoryCategories(parameters=2 * GIB, gradients=2 * GIB, optimizer_state=4 * GIB,
                            activations=3 * GIB, other=0, activations_step=40)
    b = explain(device(alloc, cats), nvml=14 * GIB + 500 * MIB)
    assert [(i.key, i.size) for i in b.items] == [
        ("parameters", 2 * GIB), ("gradients", 2 * GIB), ("optimizer_state", 4 * GIB),
        ("activations", 3 * GIB), ("cache", 2 * GIB), ("fragmentation", GIB), ("context", 500 * MIB)]
    assert b.items[3].label == "activations (step 40's peak; freed to the cache between steps)"
    assert b.total == b.nvml and b.note == ""
    # A cache emptied since (torch.cuda.empty_cache()) cannot hold them: said, not hidden.
    emptied = explain(device(AllocatorStats(allocated=8 * GIB, reserved=9 * GIB), cats), nvml=9 * GIB)
    assert "the activations of step 40's peak are more than the allocator's cache holds" in emptied.note


def test_parameters_fsdp_gathers_are_a_step_peak_taken_out_of_the_cache():
    # An FSDP rank at a step's end: its shards allocated; the unsharded parameters it gathered for
    # forward and backward (the step's peak, 3 GiB) were freed to the cache, which the next step takes again.
    alloc = AllocatorStats(allocated=4 * GIB, reserved=8 * GIB)
    cats = MemoryCategories(parameters=GIB, gradients=GIB, optimizer_state=2 * GIB, activations=0, other=0,
                            gathered=3 * GIB)
    b = explain(device(alloc, cats), nvml=8 * GIB)
    assert [(i.key, i.size) for i in b.items] == [
        ("parameters", GIB), ("gradients", GIB), ("optimizer_state", 2 * GIB), ("gathered", 3 * GIB),
        ("cache", GIB)]
    assert b.items[3].label == ("gathered parameters (FSDP, unsharded for forward/backward) (the latest measured "
                                "step's peak; freed to the cache between steps)")
    assert b.total == 8 * GIB and b.note == ""


def test_odd_figures_are_shown_with_a_note_not_hidden():
    alloc = AllocatorStats(allocated=GIB, reserved=2 * GIB)
    cats = MemoryCategories(parameters=GIB + 4 * MIB)  # counted more than the allocator has
    b = explain(device(alloc, cats), nvml=GIB)  # NVML read before the cache grew
    assert [(i.key, i.size) for i in b.items] == [("parameters", GIB + 4 * MIB), ("cache", GIB)]
    assert "NVML counts 1.00 GiB less than the allocator reserves" in b.note
    assert b.total == GIB + 4 * MIB + GIB and b.basis == "allocator and NVML figures"


def test_a_cpu_jobs_activations_between_steps_are_named_by_their_step():
    cats = MemoryCategories(parameters=3 * MIB, activations=MIB, activations_step=12)
    b = explain(ProbeDevice("cpu", categories=cats), None)
    assert [(i.label, i.size) for i in b.items] == [("parameters", 3 * MIB),
                                                    ("activations (step 12's peak)", MIB)]
    first = MemoryCategories(parameters=3 * MIB, activations=MIB, activations_step=0)
    assert explain(ProbeDevice("cpu", categories=first), None).items[1].label == (
        "activations (the last forward pass's peak)")


def test_cpu_job_and_no_figures():
    b = explain(ProbeDevice("cpu", categories=MemoryCategories(parameters=3 * MIB, gradients=0)), None)
    assert [(i.key, i.size) for i in b.items] == [("parameters", 3 * MIB)]
    assert b.basis == "tracked tensors; no CUDA allocator"
    assert explain(None, 5 * GIB) is None
    assert explain(ProbeDevice("cuda:0"), 5 * GIB) is None


def test_a_gpu_jobs_host_crumbs_are_not_listed_but_a_cpu_job_and_real_host_memory_are():
    # As on a real H100: AdamW's step counters are CPU tensors, 24 bytes beside 53 MiB on cuda:0.
    gpu = device(AllocatorStats(allocated=GIB, reserved=GIB), MemoryCategories(parameters=GIB))
    crumbs = ProbeDevice("cpu", categories=MemoryCategories(parameters=0, optimizer_state=24))
    report = ProbeReport(pid=1, taken_at=0.0, devices=(gpu, crumbs))
    assert devices_shown(report) == (gpu,)
    assert [b.device for b in breakdowns(report, None)] == ["cuda:0"]
    offloaded = ProbeDevice("cpu", categories=MemoryCategories(optimizer_state=2 * GIB))  # ZeRO-Offload
    assert devices_shown(ProbeReport(pid=1, taken_at=0.0, devices=(gpu, offloaded))) == (gpu, offloaded)
    cpu_job = ProbeReport(pid=1, taken_at=0.0, devices=(crumbs,))
    assert devices_shown(cpu_job) == (crumbs,)
