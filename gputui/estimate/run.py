"""``gputui estimate SCRIPT:FUNCTION``: the job measured, against the device's capacity, with its
what-ifs (FSDP2's where asked) and, where asked, the largest batch that fits."""

from __future__ import annotations

from gputui.analysis.whatif import ZERO_GPUS
from gputui.estimate.job import load
from gputui.estimate.step import Settings, measure
from gputui.estimate.whatif import fsdp2_row, largest_batch_of, what_ifs
from gputui.model.estimate import SAFETY_MARGIN, Estimate, usable


def estimate(spec: str, settings: Settings, device_total: int | None = None, device_name: str | None = None,
             *, what_if: bool = True, max_batch: bool = False, gpus: int = ZERO_GPUS,
             fsdp2: bool = False) -> Estimate:
    """Run ``spec``'s job on the meta device and set it against ``device_total`` bytes; with ``fsdp2``,
    one rank of FSDP2 over ``gpus`` GPUs measured too (a what-if row, or why it was left out)."""
    function = load(spec)
    measured = measure(function, settings)
    room = None if device_total is None else usable(device_total)
    largest = safe = None
    if max_batch:
        if room is None:
            from gputui.errors import UserError

            raise UserError("--max-batch needs the device: give --device-memory SIZE or --gpu INDEX")
        largest = largest_batch_of(function, settings, room, measured)
        safe = largest_batch_of(function, settings, int(room * (1 - SAFETY_MARGIN)), measured)
    rows = what_ifs(function, settings, measured, gpus, room, max_batch) if what_if else []
    left_out: list[str] = []
    if fsdp2:
        row = fsdp2_row(function, settings, measured, gpus, room, max_batch)
        if isinstance(row, str):
            left_out.append(row)
        else:
            rows.append(row)
    return Estimate(
        job=spec, optimizer=measured.optimizer, precision=settings.precision,
        checkpointing=settings.checkpointing, phases=measured.phases, timeline=measured.timeline,
        activations_peak=measured.activations_peak, host_state=measured.host_state, batch_size=settings.batch_size,
        device_total=device_total, device_usable=room, device_name=device_name,
        what_ifs=tuple(rows), left_out=tuple(left_out), largest_batch=largest, safe_batch=safe)
