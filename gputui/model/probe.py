"""What a probe inside a PyTorch process reports: allocator figures, where the bytes went, steps, OOMs.

Sizes are bytes, times seconds. ``None`` means "not known here" (e.g. no allocator figures for a
CPU-only job), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputui.model.fielddoc import doc
from gputui.model.job import Placement
from gputui.model.record import Record


@dataclass(frozen=True, eq=False, repr=False)
class MemoryCategories(Record):
    """Live tensor bytes by what they are for, deduplicated by storage."""

    parameters: int | None = field(default=None, metadata=doc("model parameters (bytes)", minimum=0))
    gradients: int | None = field(default=None, metadata=doc("parameter gradients (bytes)", minimum=0))
    optimizer_state: int | None = field(default=None, metadata=doc(
        "optimizer state, e.g. Adam's two moments (bytes)", minimum=0))
    activations: int | None = field(default=None, metadata=doc(
        "tensors autograd saved for backward: held now, or the peak of step `activations_step` where that is set "
        "(bytes)", minimum=0))
    other: int | None = field(default=None, metadata=doc(
        "every other live tensor the allocator holds (bytes)", minimum=0))
    buffers: int | None = field(default=None, metadata=doc(
        "the models' buffers: BatchNorm statistics, positional encodings (bytes)", minimum=0))
    activations_step: int | None = field(default=None, metadata=doc(
        "set when `activations` is not what is held now but the peak of this measured step, read between steps "
        "(backward had freed the graph, so the last peak is the figure worth showing); `0`: the latest forward "
        "pass's peak, in a job that has not stepped an optimizer; `null`: held now", minimum=0))
    gathered: int | None = field(default=None, metadata=doc(
        "the unsharded parameters FSDP2 (`fully_shard`) gathered for forward and backward: the most held at once "
        "in the latest measured step, freed between steps (bytes); `null` where the job shards no parameters. "
        "`parameters`, `gradients` and `optimizer_state` are then this rank's shards", minimum=0))

    def activations_when(self) -> str:
        """Whose peak ``activations`` is, in words; "" when it is what is held now."""
        if self.activations_step is None:
            return ""
        if self.activations_step == 0:
            return "the last forward pass's peak"
        return f"step {self.activations_step}'s peak"

    def tensor_bytes(self) -> int | None:
        """What the categories account for in tensors; None when none is known."""
        known = [getattr(self, name) for name in TENSOR_CATEGORIES if getattr(self, name) is not None]
        return sum(known) if known else None


# The tensor categories, in the order every view lists them.
TENSOR_CATEGORIES = ("parameters", "gradients", "optimizer_state", "buffers", "activations", "other")


@dataclass(frozen=True, eq=False, repr=False)
class AllocatorStats(Record):
    """torch.cuda caching-allocator counters for one device (see torch.cuda.memory_stats)."""

    allocated: int = field(metadata=doc("bytes in live tensors", minimum=0))
    reserved: int = field(metadata=doc("bytes the caching allocator holds from CUDA", minimum=0))
    active: int | None = field(default=None, metadata=doc("bytes in active blocks", minimum=0))
    inactive_split: int | None = field(default=None, metadata=doc(
        "free bytes stuck inside split blocks: fragmentation", minimum=0))
    requested: int | None = field(default=None, metadata=doc(
        "bytes the program asked for, before rounding", minimum=0))
    allocated_peak: int | None = field(default=None, metadata=doc("peak of `allocated` (bytes)", minimum=0))
    reserved_peak: int | None = field(default=None, metadata=doc("peak of `reserved` (bytes)", minimum=0))
    active_peak: int | None = field(default=None, metadata=doc("peak of `active` (bytes)", minimum=0))
    inactive_split_peak: int | None = field(default=None, metadata=doc(
        "peak of `inactive_split` (bytes)", minimum=0))
    requested_peak: int | None = field(default=None, metadata=doc("peak of `requested` (bytes)", minimum=0))
    alloc_retries: int | None = field(default=None, metadata=doc(
        "cache flushes forced by a failed cudaMalloc (count)", minimum=0))
    ooms: int | None = field(default=None, metadata=doc("out-of-memory errors (count)", minimum=0))
    segments: int | None = field(default=None, metadata=doc("cudaMalloc segments held (count)", minimum=0))
    largest_free_block: int | None = field(default=None, metadata=doc(
        "biggest block reusable without a new cudaMalloc (bytes)", minimum=0))
    settings: str | None = field(default=None, metadata=doc(
        "`PYTORCH_CUDA_ALLOC_CONF` as the allocator sees it"))
    expandable_segments: bool | None = field(default=None, metadata=doc("expandable segments are on"))


@dataclass(frozen=True, eq=False, repr=False)
class ProbeDevice(Record):
    """One device a probed process uses ("cuda:0", or "cpu" for a CPU-only job)."""

    device: str = field(metadata=doc('`"cuda:N"` or `"cpu"`'))
    cuda_index: int | None = field(default=None, metadata=doc("CUDA index inside the probed process"))
    uuid: str | None = field(default=None, metadata=doc(
        "GPU UUID; matches `Device.uuid` to join with the GPU and its `GpuProcess`"))
    allocator: AllocatorStats | None = field(default=None, metadata=doc(
        "caching-allocator counters; null for the CPU"))
    categories: MemoryCategories | None = field(default=None, metadata=doc("where the live tensor bytes went"))


# The first measured steps are kept for the life of the job, wherever the probe's and the monitor's
# windows of recent steps have moved on: they show the model, then its activations, gradients and
# optimizer state arriving (a job that runs out of memory at its first optimizer.step()).
FIRST_STEPS_KEPT = 2


# What a probe cannot see in a job, said in its report (ProbeReport.limits).
LIMIT_LOSS_OUTSIDE = (
    "Activations leave out what a loss function saves outside any module, if the job calls one in "
    "its training loop (F.cross_entropy there): the probe's hooks there would make torch.func raise.")
LIMIT_NO_FORWARD = (
    "No forward pass of a torch.nn.Module seen (a model compiled in place with model.compile(), or a "
    "model that is no Module): activations are not counted.")
LIMIT_NOT_WATCHED = "Activations are not watched (the probe was started with activations=False)."
LIMIT_HOOKS_UNAVAILABLE = (
    "Activations are not watched: this torch gives the probe no look at autograd's saved-tensor "
    "hooks (the probe's problems say why).")


@dataclass(frozen=True, eq=False, repr=False)
class StepRecord(Record):
    """One training step, bounded by optimizer.step() calls."""

    step: int = field(metadata=doc("step number", minimum=0))
    ended_at: float = field(metadata=doc("end of the step (seconds since the epoch)"))
    duration: float | None = field(default=None, metadata=doc("step time (seconds)", minimum=0))
    device: str | None = field(default=None, metadata=doc("the device the figures are for"))
    allocated: int | None = field(default=None, metadata=doc("allocated at the end of the step (bytes)", minimum=0))
    reserved: int | None = field(default=None, metadata=doc("reserved at the end of the step (bytes)", minimum=0))
    inactive_split: int | None = field(default=None, metadata=doc(
        "fragmentation at the end of the step (bytes)", minimum=0))
    alloc_retries: int | None = field(default=None, metadata=doc("allocator retries so far (count)", minimum=0))
    peak_forward: int | None = field(default=None, metadata=doc(
        "peak allocated during the forward pass (bytes)", minimum=0))
    peak_backward: int | None = field(default=None, metadata=doc(
        "peak allocated during the backward pass (bytes)", minimum=0))
    peak_optimizer: int | None = field(default=None, metadata=doc(
        "peak allocated during `optimizer.step()` (bytes)", minimum=0))
    categories: MemoryCategories | None = field(default=None, metadata=doc("categories at the end of the step"))
    host_memory: int | None = field(default=None, metadata=doc(
        "resident memory of the process at the end of the step (bytes; CPU-only jobs: what tensors outside the "
        "tracked categories hold shows here and nowhere else)", minimum=0))
    host_allocated: int | None = field(default=None, metadata=doc(
        "bytes the C allocator had handed out at the end of the step (glibc; CPU-only jobs): exact where "
        "resident memory is blurred by freed memory the C library keeps", minimum=0))
    activations_kept: int | None = field(default=None, metadata=doc(
        "bytes saved for backward during the step and still held at its end: a graph kept past its step (a loss "
        "summed with its graph, outputs kept in a list; measured steps)", minimum=0))
    activations_peak: int | None = field(default=None, metadata=doc(
        "the most bytes saved for backward held at once during the step (measured steps)", minimum=0))
    allocated_at_start: int | None = field(default=None, metadata=doc(
        "memory at the start of the step's first forward pass, on the same terms as `allocated`: where the "
        "phases' peaks rise from (measured steps)", minimum=0))


@dataclass(frozen=True, eq=False, repr=False)
class OomRecord(Record):
    """The last out-of-memory error the process hit."""

    at: float = field(metadata=doc("when (seconds since the epoch)"))
    device: str | None = field(default=None, metadata=doc("the device that ran out"))
    requested: int | None = field(default=None, metadata=doc("size of the allocation that failed (bytes)", minimum=0))
    free: int | None = field(default=None, metadata=doc("free device memory at the time (bytes)", minimum=0))
    allocated: int | None = field(default=None, metadata=doc("allocated at the time (bytes)", minimum=0))
    reserved: int | None = field(default=None, metadata=doc("reserved at the time (bytes)", minimum=0))
    message: str = field(default="", metadata=doc("the error message"))
    where: tuple[str, ...] = field(default=(), metadata=doc(
        'Python frames, `"file.py:123 in function"`, innermost last'))
    line: str | None = field(default=None, metadata=doc(
        'the innermost frame of the job\'s own code (not torch\'s, the standard library\'s or gputui\'s), '
        '`"train.py:42 in forward"`: where a change would go; null when none was on the stack'))
    phase: str | None = field(default=None, metadata=doc(
        "where in the training loop it came, by torch's frames on the stack: `forward` (a module's forward "
        "pass), `backward`, `optimizer` (the optimizer's step) or `other` (the loop around them: data, a loss "
        "outside the model, evaluation); null from an older probe", enum=("forward", "backward", "optimizer",
        "other")))
    step: int | None = field(default=None, metadata=doc(
        "training steps completed before it (the failing step is the next one)", minimum=0))
    report_file: str | None = field(default=None, metadata=doc(
        "the OOM report the probe wrote as the error ended the process (`gputui oom` prints it); null when "
        "the process carried on or no report could be written"))


@dataclass(frozen=True, eq=False, repr=False)
class AllocationSite(Record):
    """Live bytes allocated from one place in the code, at the end of each recorded step.

    Recorded only on demand (allocation-site recording), for a bounded window of steps; the monitor's
    analysis decides which sites grow.
    """

    where: str = field(metadata=doc('the innermost frame in user code, `"train.py:42 in train_step"`'))
    live_bytes: tuple[int, ...] = field(metadata=doc(
        "live bytes at the end of each step in `recorded_steps` (bytes)", minimum=0))
    stack: tuple[str, ...] = field(default=(), metadata=doc("a few frames, innermost last"))


# LeakKeeper.what for a tensor whose autograd graph grows (``total_loss += loss``): a graph, not a collection.
KEEPER_GRAPH = "a tensor whose autograd graph"


@dataclass(frozen=True, eq=False, repr=False)
class LeakKeeper(Record):
    """A name in the user's code that held more at each step while a leak was recorded.

    Found on the training thread by sizing what the user's frames reach by name at two step ends; the
    lines are the statements of the user's code that add to that name (where the fix goes).
    """

    name: str = field(metadata=doc(
        'the name in the user\'s code, `"total_loss"`, `"self.history"`, `"trainer.fakes"`'))
    scope: str = field(metadata=doc("where the name lives", enum=("local", "attribute", "global")))
    what: str = field(metadata=doc(
        'what it is: `"a list"`, `"a tensor whose autograd graph"`, `"a tensor"`'))
    size: int = field(metadata=doc("items, graph nodes or elements at the second look", minimum=0))
    per_step: float = field(metadata=doc("growth of that size per step between the looks"))
    where: tuple[str, ...] = field(default=(), metadata=doc(
        'the lines that add to it, `"train.py:57 in train"`'))


# ProbeReport.via values: how the probe came into the job.
PROBE_STARTS = ("run", "env", "api", "attach", "demo")


@dataclass(frozen=True, eq=False, repr=False)
class ProbeReport(Record):
    """Everything one probe knows about its process right now."""

    pid: int = field(metadata=doc("PID of the probed process, as it sees itself", minimum=1))
    taken_at: float = field(metadata=doc("when the report was made (seconds since the epoch)"))
    torch_version: str | None = field(default=None, metadata=doc("`torch.__version__`"))
    started_at: float | None = field(default=None, metadata=doc(
        "when the probe started in the process (seconds since the epoch): when it was attached, for `via` "
        "`attach`. Steps, phase peaks, activations and leak verdicts count from its first step after this"))
    via: str | None = field(default=None, metadata=doc(
        "how the probe was started: `run` (`gputui run`), `env` (`GPUTUI_PROBE=1`), `api` "
        "(`gputui.probe.start()` in the script), `attach` (`gputui attach PID`, into a running job), `demo`; "
        "null from an older probe", enum=PROBE_STARTS))
    command: tuple[str, ...] = field(default=(), metadata=doc("command line (argv)"))
    devices: tuple[ProbeDevice, ...] = field(default=(), metadata=doc("the devices the process uses"))
    read_at: float | None = field(default=None, metadata=doc(
        "when the devices' figures were read, on the training thread (seconds since the epoch); null before the "
        "first reading. The probe reads at the end of the steps it measures, and at its next hook when a report "
        "finds the figures older than a second"))
    read_at_step: int | None = field(default=None, metadata=doc(
        "training steps counted when the devices' figures were read", minimum=0))
    steps: tuple[StepRecord, ...] = field(default=(), metadata=doc("recent training steps, oldest first"))
    last_oom: OomRecord | None = field(default=None, metadata=doc("the last out-of-memory error; null if none"))
    recording: bool = field(default=False, metadata=doc("allocation-site recording is on"))
    recorded_steps: tuple[int, ...] = field(default=(), metadata=doc(
        "the step numbers each site's `live_bytes` entries belong to"))
    sites: tuple[AllocationSite, ...] = field(default=(), metadata=doc(
        "the largest allocation sites by live bytes (while recording; bounded)"))
    keepers: tuple[LeakKeeper, ...] = field(default=(), metadata=doc(
        "what kept growing while sites were recorded, fastest first"))
    recording_cost: float | None = field(default=None, metadata=doc(
        "overhead per step while recording (seconds)", minimum=0))
    probe_cpu_seconds: float | None = field(default=None, metadata=doc(
        "CPU time the probe itself has used (seconds)", minimum=0))
    problems: tuple[str, ...] = field(default=(), metadata=doc("exceptions the probe contained, for people"))
    limits: tuple[str, ...] = field(default=(), metadata=doc(
        "what the probe cannot see in this job, in words: activations a loss function saves outside any module; "
        "no forward pass seen (a model compiled in place)"))
    placement: Placement | None = field(default=None, metadata=doc(
        "its rank in a distributed job, from its own environment when the report was made; null outside one"))
