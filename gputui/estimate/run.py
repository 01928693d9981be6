"""``gputui estimate SCRIPT:FUNCTION``: the job measured, against the device's capacity."""

from __future__ import annotations

from gputui.estimate.job import load
from gputui.estimate.step import Settings, measure
from gputui.model.estimate import Estimate, usable


def estimate(spec: str, settings: Settings, device_total: int | None = None,
             device_name: str | None = None) -> Estimate:
    """Run ``spec``'s job on the meta device and set it against ``device_total`` bytes."""
    measured = measure(load(spec), settings)
    return Estimate(
        job=spec, optimizer=measured.optimizer, precision=settings.precision,
        checkpointing=settings.checkpointing, phases=measured.phases, timeline=measured.timeline,
        activations_peak=measured.activations_peak,
        batch_size=settings.batch_size, device_total=device_total,
        device_usable=None if device_total is None else usable(device_total), device_name=device_name)
