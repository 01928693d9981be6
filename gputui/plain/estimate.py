"""``gputui estimate``'s output: the phases-by-categories table and the verdict, or its JSON document;
and the device to measure against (``--device-memory``, or ``--gpu`` read through the collector)."""

from __future__ import annotations

from gputui import units
from gputui.analysis.whatif import effect
from gputui.errors import UserError
from gputui.model import PHASE_WORDS, RUNS_OUT_WORDS, Estimate
from gputui.model.estimate import CUDA_CONTEXT, SAFETY_MARGIN
from gputui.options import Options
from gputui.untrusted import visible

# The table's columns: a category (or the total) and its heading; 7 columns of 9 and the phase's 15
# fit an 80-column terminal.
COLUMNS = (("parameters", "params"), ("gradients", "grads"), ("optimizer_state", "optim"),
           ("activations", "activ"), ("buffers", "buffers"), ("other", "other"))
CELL = 9
LABEL = 15
EFFECT = 19  # the longest effect, "costs 1.00GiB more", and a space


def device(options: Options, memory: int | None, gpu: int | None) -> tuple[int | None, str | None]:
    """(total bytes, name) of the device to measure against; (None, None) where none was given."""
    if memory is not None:
        return memory, f"a {units.size(memory)} device"
    if gpu is None:
        return None, None
    from gputui.sample.pipeline import open_pipeline

    with open_pipeline(options) as pipeline:
        gpus = pipeline.source.sample().devices  # the GPUs alone: nothing to judge
    found = next((g for g in gpus if g.index == gpu), None)
    if found is None or found.memory_total is None:
        indices = ", ".join(str(g.index) for g in gpus) or "none"
        raise UserError(f"no GPU {gpu} with a known memory size here (GPUs: {indices})")
    return found.memory_total, f"GPU {gpu} ({found.name or 'unnamed'})"


def text(estimate: Estimate) -> str:
    """The table and the verdict, for an 80-column terminal."""
    how = (f"one training step with {estimate.optimizer} in {estimate.precision}"
           + (f", batch size {estimate.batch_size}" if estimate.batch_size else "")
           + (", activation checkpointing" if estimate.checkpointing else ""))
    lines = [estimate.job, how, "measured on the meta device (no memory allocated); each phase's peak:", ""]
    lines.append("phase".ljust(LABEL) + "".join(h.rjust(CELL) for _, h in COLUMNS) + "total".rjust(CELL))
    for phase in estimate.phases:
        cells = [units.size_compact(getattr(phase.categories, name)) for name, _ in COLUMNS]
        lines.append(PHASE_WORDS[phase.phase].ljust(LABEL) + "".join(c.rjust(CELL) for c in cells)
                     + units.size_compact(phase.total).rjust(CELL))
    lines += ["", verdict(estimate)]
    if estimate.largest_batch is not None or estimate.safe_batch is not None:
        lines.append(f"largest batch that fits: {estimate.largest_batch}; with {SAFETY_MARGIN:.0%} held back "
                     f"(allocator cache, workspaces): {estimate.safe_batch}")
    if estimate.what_ifs:
        lines += ["", *what_if_table(estimate)]
    if estimate.left_out and not estimate.what_ifs:
        lines.append("")
    lines += [f"left out: {visible(why)}" for why in estimate.left_out]  # its why may quote the user's model
    return "\n".join(lines) + "\n"


def what_if_table(estimate: Estimate) -> list[str]:
    """Each change's peak and what it saves (or costs: analysis/whatif.py's words); measured (run again
    on fake tensors) or computed (from the measured categories); the largest batch with it where
    --max-batch asked. 80 columns at most: 33 + 8 + 2 + 19 + 9 + 9."""
    batches = any(w.largest_batch is not None for w in estimate.what_ifs)
    lines = ["what if".ljust(33) + "peak".rjust(CELL - 1) + "  " + "effect".ljust(EFFECT) + "how".ljust(CELL)
             + ("max batch".rjust(CELL) if batches else "")]
    for w in estimate.what_ifs:
        batch = "" if not batches else ("-" if w.largest_batch is None else str(w.largest_batch)).rjust(CELL)
        lines.append(w.change[:32].ljust(33) + units.size_compact(w.peak).rjust(CELL - 1) + "  "
                     + effect(w.saving, units.size_compact).ljust(EFFECT)
                     + ("measured" if w.measured else "computed").ljust(CELL) + batch)
    return [line.rstrip() for line in lines]


def verdict(estimate: Estimate) -> str:
    """Fits with what to spare, or runs out in which phase; or the peak alone without a device."""
    peak = estimate.peak
    if estimate.device_usable is None:
        return (f"peak {units.size(peak)}; give --device-memory SIZE or --gpu INDEX for a verdict")
    room = (f"{estimate.device_name}: {units.size(estimate.device_usable)} usable, the total less "
            f"{units.size(CUDA_CONTEXT)} for the CUDA context")
    phase = estimate.runs_out_in()
    if phase is None:
        return f"fits with {units.size(estimate.device_usable - peak)} to spare: peak {units.size(peak)}\n{room}"
    needs = max(p.total for p in estimate.timeline if p.phase == phase)
    return (f"does not fit: runs out in {RUNS_OUT_WORDS[phase]}, needs "
            f"{units.size(needs)} of {units.size(estimate.device_usable)}\n{room}")
