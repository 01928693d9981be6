"""The estimate of each example job (examples/estimate_models.py; examples/estimate_hf.py's Hugging Face
models where transformers is installed) beside what a real CPU training step of the same job measures:
the probe's step record, and the live tensor bytes of the real step. The estimate is asked for the CPU
(``Settings(device="cpu")``): the kernels it assumes (attention's) are the ones the real step runs.

Shared by tests/integration/test_estimate_accuracy.py, which asserts the figures, and bench/estimate_table.py,
which prints them as docs/estimate.md's table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from cli_helpers import ROOT

from gputui.estimate.job import build, load
from gputui.estimate.step import Settings, measure, prepare
from gputui.model import Estimate
from gputui.probe import runtime

MODELS = ("mlp", "cnn_batchnorm", "lstm", "gpt", "gqa", "frozen")
HF_MODELS = ("gpt2", "bert", "llama")  # examples/estimate_hf.py's: GPT-2, BERT, Llama with grouped-query attention
STATIC = ("parameters", "gradients", "optimizer_state", "buffers")
PHASES = ("forward", "backward", "optimizer")
STEPS = 3


@dataclass
class Comparison:
    """One job: the estimate (meta device, for the CPU), the real step's peaks (CPU, the same count of
    live tensors), and the probe's record of the real loop's last step."""

    estimate: Estimate
    real: Estimate
    probe_static: dict[str, int]
    probe_activations: int
    probe_peaks: dict[str, int | None]

    def estimated_static(self) -> dict[str, int]:
        steady = self.estimate.phase("steady").categories
        return {c: getattr(steady, c) for c in STATIC}

    def estimated_peaks(self) -> dict[str, int]:
        return {p: self.estimate.phase(p).total for p in PHASES}

    def real_peaks(self) -> dict[str, int]:
        return {p: self.real.phase(p).total for p in PHASES}

    def estimated_activations(self) -> int:
        return self.estimate.activations_peak


def spec(kind: str) -> str:
    script = "estimate_hf.py" if kind in HF_MODELS else "estimate_models.py"
    return f"{ROOT / 'examples' / script}:{kind}"


def as_estimate(kind: str, real: bool) -> Estimate:
    measured = measure(load(spec(kind)), Settings(real=real, device="cpu"))
    return Estimate(job=spec(kind), optimizer=measured.optimizer, precision="fp32", checkpointing=False,
                    phases=measured.phases, timeline=measured.timeline,
                    activations_peak=measured.activations_peak)


def compare(kind: str) -> Comparison:
    torch.manual_seed(0)
    job = prepare(build(load(spec(kind)), None), Settings(real=True))
    optimizer = job.optimizer
    assert optimizer is not None
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(STEPS):
            optimizer.zero_grad()
            job.loss_of(job.forward()).backward()
            optimizer.step()
        report = probe.report()
    finally:
        runtime.stop()
    record = [s for s in report.steps if s.categories is not None][-1]
    static = {c: getattr(record.categories, c) for c in STATIC}
    # This CPU job's step counters are on its one device, where the probe counts them; a GPU job keeps
    # them on the host (neither capturable nor fused here), as the estimate counts them.
    static["optimizer_state"] -= sum(state["step"].nbytes for state in optimizer.state.values() if "step" in state)
    peaks = {p: getattr(record, f"peak_{p}") for p in PHASES}
    return Comparison(as_estimate(kind, real=False), as_estimate(kind, real=True), static,
                      record.activations_peak, peaks)
