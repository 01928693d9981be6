"""The probe is invisible to torch.compile: no warning, no recompile, and it still sees the steps and the
activations of a compiled model (torch.compile(model) and an nn.Sequential, which dynamo traces
inline)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gputui.probe import runtime  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("make", [MLP, lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))],
                         ids=["module", "sequential"])
@pytest.mark.parametrize("budget", [0.004, 1.0])
def test_a_compiled_model_compiles_once_and_warns_nothing(make, budget):
    torch.manual_seed(0)
    graphs = []

    def backend(graph_module, example_inputs):  # counts what dynamo compiles, runs it as traced
        graphs.append(graph_module)
        return graph_module.forward

    model = make()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    probe = runtime.start(serve=False, budget=budget)
    try:
        compiled = torch.compile(model, backend=backend)
        with warnings.catch_warnings(record=True) as caught:
            for _ in range(20):  # the first 3 steps are where the probe learns the model
                optimizer.zero_grad()
                ((compiled(x) - y) ** 2).mean().backward()
                optimizer.step()
        report = probe.report()
    finally:
        runtime.stop()
        torch.compiler.reset()  # (the compile cache, so the next case compiles anew)
    assert [str(w.message) for w in caught] == []
    assert len(graphs) == 1  # compiled once: no recompile when the probe's hooks come and go
    assert len(report.steps) == 20 and report.problems == ()
    # What the compiled graph saves for backward: relu's output (16 x 64 floats) and x for the first
    # layer's weight (16 x 32); the second layer's input is relu's output, the same storage.
    assert report.steps[0].activations_peak == (16 * 64 + 16 * 32) * 4
    assert report.devices[0].categories.activations == (16 * 64 + 16 * 32) * 4
