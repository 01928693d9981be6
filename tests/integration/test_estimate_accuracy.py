"""``gputui estimate`` against a real CPU training step of the same job, for six kinds of model (an
MLP, a CNN with BatchNorm, an LSTM language model, a small GPT, the GPT with grouped-query attention
through torch's scaled_dot_product_attention, a frozen backbone): the estimate runs on the meta device,
for the CPU (the attention kernel the CPU picks); the same job then trains for real on the CPU under the
probe (every step measured), and once more with the estimate's own count of live tensors over real
tensors (the CPU has no caching allocator: allocated tensor bytes are the figure to compare).

Parameters, gradients, optimizer state and buffers must be exact, against the probe's record of the
real loop's last step; the activations' peak (bytes saved for backward at once) and each phase's peak
within 10 %. The LSTM is the known gap: on the CPU torch runs it as oneDNN's fused layer
(``mkldnn_rnn_layer``), which saves more for backward than the per-step operators torch decomposes it
into on the meta device (and cuDNN on a GPU saves something else again): its figures are asserted as
they are, with that gap. The probe's phase peaks on a CPU are readings at the phases' boundaries
(no allocator peak to read), so they are lower bounds: the estimate must not be below them.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")

from estimate_truth import MODELS, PHASES, compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 0.10
EXACT = [kind for kind in MODELS if kind != "lstm"]


@functools.cache
def compared(kind: str):
    return compare(kind)


@pytest.mark.parametrize("kind", MODELS)
def test_parameters_gradients_and_optimizer_state_are_exact(kind):
    c = compared(kind)
    assert c.estimated_static() == c.probe_static
    assert c.probe_static["parameters"] > 0 and c.probe_static["gradients"] > 0


@pytest.mark.parametrize("kind", EXACT)
def test_activations_peak_is_within_10_percent_of_the_probe(kind):
    c = compared(kind)
    assert c.estimated_activations() == pytest.approx(c.probe_activations, rel=TOLERANCE)


@pytest.mark.parametrize("kind", EXACT)
def test_phase_peaks_are_within_10_percent_of_the_real_step(kind):
    c = compared(kind)
    estimated, real = c.estimated_peaks(), c.real_peaks()
    for phase in PHASES:
        assert estimated[phase] == pytest.approx(real[phase], rel=TOLERANCE), phase


@pytest.mark.parametrize("kind", MODELS)
def test_phase_peaks_are_not_below_the_probes_boundary_readings(kind):
    c = compared(kind)
    estimated = c.estimated_peaks()
    for phase in PHASES:
        assert c.probe_peaks[phase] is not None
        if kind != "lstm":
            assert estimated[phase] >= c.probe_peaks[phase], phase


def test_the_lstm_gap_is_onednn_saving_more():
    """Known, stated: meta's decomposed LSTM saves 7.1 MB where oneDNN's fused layer saves 12.0 MB."""
    c = compared("lstm")
    assert c.estimated_activations() == 7_123_204
    assert c.probe_activations == c.real.activations_peak == 12_013_828
    estimated, real = c.estimated_peaks(), c.real_peaks()
    assert estimated["optimizer"] == real["optimizer"]  # no activations left by then: exact
    for phase in ("forward", "backward"):
        assert real[phase] - estimated[phase] == 12_013_828 - 7_123_204, phase
