"""What a probe inside a PyTorch process reports: allocator figures, where the bytes went, steps, OOMs.

Sizes are bytes, times seconds. ``None`` means "not known here" (e.g. no allocator figures for a
CPU-only job), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryCategories:
    """Live tensor bytes by what they are for, deduplicated by storage."""

    parameters: int | None = None
    gradients: int | None = None
    optimizer_state: int | None = None
    activations: int | None = None  # tensors saved for backward by autograd
    other: int | None = None  # every other live tensor the allocator holds
    buffers: int | None = None  # the models' buffers: BatchNorm statistics, positional encodings
    # Set when ``activations`` is not what is held now but the peak of this measured step: read
    # between steps (the graph is freed by backward), the figure worth showing is the last peak.
    # 0: the latest forward pass's peak, in a job that has not stepped an optimizer.
    activations_step: int | None = None

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


@dataclass(frozen=True)
class AllocatorStats:
    """torch.cuda caching-allocator counters for one device (see torch.cuda.memory_stats)."""

    allocated: int
    reserved: int
    active: int | None = None
    inactive_split: int | None = None  # free bytes stuck inside split blocks: fragmentation
    requested: int | None = None  # bytes the program asked for, before rounding
    allocated_peak: int | None = None
    reserved_peak: int | None = None
    active_peak: int | None = None
    inactive_split_peak: int | None = None
    requested_peak: int | None = None
    alloc_retries: int | None = None  # cache flushes forced by a failed cudaMalloc
    ooms: int | None = None
    segments: int | None = None
    largest_free_block: int | None = None  # biggest block reusable without a new cudaMalloc
    settings: str | None = None  # PYTORCH_CUDA_ALLOC_CONF as the allocator sees it
    expandable_segments: bool | None = None


@dataclass(frozen=True)
class ProbeDevice:
    """One device a probed process uses ("cuda:0", or "cpu" for a CPU-only job)."""

    device: str
    cuda_index: int | None = None
    uuid: str | None = None  # matches Device.uuid, to join with NVML
    allocator: AllocatorStats | None = None
    categories: MemoryCategories | None = None


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


@dataclass(frozen=True)
class StepRecord:
    """One training step, bounded by optimizer.step() calls."""

    step: int
    ended_at: float
    duration: float | None = None
    device: str | None = None
    allocated: int | None = None  # at the end of the step
    reserved: int | None = None
    inactive_split: int | None = None
    alloc_retries: int | None = None
    peak_forward: int | None = None
    peak_backward: int | None = None
    peak_optimizer: int | None = None
    categories: MemoryCategories | None = None
    # The process's resident memory at the end of the step (CPU-only jobs: what tensors outside the
    # tracked categories hold shows here and nowhere else).
    host_memory: int | None = None
    # Bytes the C allocator had handed out at the end of the step (glibc); exact where resident memory
    # is blurred by freed memory the C library keeps. None elsewhere, and on CUDA jobs.
    host_allocated: int | None = None
    # Bytes this step saved for backward that were still held at its end: a graph kept past its step
    # (a loss summed with its graph, outputs kept in a list). Measured steps only.
    activations_kept: int | None = None
    # The most bytes saved for backward held at once during the step: what its forward passes kept
    # for backward at their peak (measured steps).
    activations_peak: int | None = None
    # Memory at the start of the step's first forward pass, on the same terms as ``allocated``
    # (measured steps): where the phases' peaks rise from.
    allocated_at_start: int | None = None


@dataclass(frozen=True)
class OomRecord:
    """The last out-of-memory error the process hit."""

    at: float
    device: str | None = None
    requested: int | None = None
    free: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    message: str = ""
    where: tuple[str, ...] = ()  # "file.py:123 in function", innermost last


@dataclass(frozen=True)
class AllocationSite:
    """Live bytes allocated from one place in the code, at the end of each recorded step.

    Recorded only on demand (allocation-site recording), for a bounded window of steps; the monitor's
    analysis decides which sites grow.
    """

    where: str  # "train.py:42 in train_step", the innermost frame in user code
    live_bytes: tuple[int, ...]  # one entry per ProbeReport.recorded_steps
    stack: tuple[str, ...] = ()  # a few frames, innermost last


@dataclass(frozen=True)
class LeakKeeper:
    """A name in the user's code that held more at each step while a leak was recorded.

    Found on the training thread by sizing what the user's frames reach by name at two step ends; the
    lines are the statements of the user's code that add to that name (where the fix goes).
    """

    name: str  # "total_loss", "self.history", "trainer.fakes"
    scope: str  # "local", "attribute" or "global"
    what: str  # "a list", "a tensor whose autograd graph", "a tensor"
    size: int  # items, graph nodes or elements at the second look
    per_step: float  # how much that grew per step between the looks
    where: tuple[str, ...] = ()  # "train.py:57 in train", the lines that add to it


@dataclass(frozen=True)
class ProbeReport:
    """Everything one probe knows about its process right now."""

    pid: int
    taken_at: float
    torch_version: str | None = None
    started_at: float | None = None  # when the probe started in the process
    command: tuple[str, ...] = ()
    devices: tuple[ProbeDevice, ...] = ()
    # When the devices' figures were read (on the training thread, at a step end or the next hook after
    # a monitor asked), and how many steps had been counted then; None when nothing was read yet.
    read_at: float | None = None
    read_at_step: int | None = None
    steps: tuple[StepRecord, ...] = ()  # the most recent steps, oldest first
    last_oom: OomRecord | None = None
    recording: bool = False  # allocation-site recording is on
    recorded_steps: tuple[int, ...] = ()  # step numbers the AllocationSite columns belong to
    sites: tuple[AllocationSite, ...] = ()  # the largest sites by live bytes, bounded
    keepers: tuple[LeakKeeper, ...] = ()  # what kept growing while sites were recorded, fastest first
    recording_cost: float | None = None  # seconds of overhead per step while recording
    probe_cpu_seconds: float | None = None  # CPU the probe itself has used
    problems: tuple[str, ...] = ()  # contained exceptions, for the user to see
    limits: tuple[str, ...] = ()  # what the probe cannot see in this job, in words
