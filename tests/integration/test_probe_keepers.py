"""The keeper search (gputui.probe.keepers.look): what the user's frames reach by name, attributes of
modules and of objects with many attributes included, within its time budget."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gputui.probe import keepers  # noqa: E402


class Trainer:
    """Like a Hugging Face Trainer subclass: 52 attributes of its own before the user's."""

    def __init__(self):
        for index in range(52):
            setattr(self, f"setting_{index}", [index])
        self.running = [torch.zeros(1)] * 7


class CachingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.cache = {k: torch.zeros(1) for k in range(5)}


def attribute_sizes(found: dict) -> dict:
    return {key[3]: value[1] for key, value in found.items() if key[2] == "attribute"}


def test_a_look_reaches_an_attribute_past_the_fiftieth_and_a_modules_own_collections():
    trainer, model = Trainer(), CachingModel()  # noqa: F841 - found by name, in this frame
    sizes = attribute_sizes(keepers.look(sys._getframe()))
    assert sizes["trainer.running"] == 7 and sizes["trainer.setting_51"] == 1
    assert sizes["model.cache"] == 5
    # nn.Module's bookkeeping (_parameters, _modules, hooks) is no collection of the user's
    assert not [name for name in sizes if name.startswith("model._")]


def test_a_look_stops_at_its_time_budget_with_what_it_found():
    trainer = Trainer()  # noqa: F841
    ticks = iter(range(1000))
    found = keepers.look(sys._getframe(), clock=lambda: next(ticks) * 0.01, seconds=0.1)
    names = attribute_sizes(found)
    assert 5 <= len(names) <= 12 and "trainer.running" not in names


def test_a_look_at_a_model_with_many_attributes_reaches_every_one():
    # How long such a look takes (3 ms on a quiet machine, 0.2 s under load) is a figure for bench/,
    # not a timed test; the look's own bound is LOOK_SECONDS, tested above.
    model = CachingModel()
    for index in range(2000):  # a model with thousands of plain attributes (config values, flags, lists)
        setattr(model, f"option_{index}", [index] if index % 2 else index)
    model.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(200))
    found = keepers.look(sys._getframe(), seconds=10.0)
    assert attribute_sizes(found)["model.option_1999"] == 1  # every one of them


LIGHTNING_JOB = '''
import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
        self.outputs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.outputs.append(loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
'''


@pytest.mark.filterwarnings("ignore")  # (Lightning's own deprecation notices)
def test_a_list_on_a_real_lightning_module_is_named_as_the_keeper(tmp_path, monkeypatch):
    # Lightning's loop calls optimizer.step(): at the step's end no frame of the user's code is on the
    # stack, only Lightning's, whose `model` is the user's LightningModule.
    lightning = pytest.importorskip("lightning")
    (tmp_path / "lit_job.py").write_text(LIGHTNING_JOB)
    monkeypatch.syspath_prepend(str(tmp_path))
    import lit_job

    from gputui.probe import runtime

    data = torch.utils.data.TensorDataset(torch.randn(1024, 64), torch.randint(0, 10, (1024,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    probe = runtime.start(serve=False, budget=1.0)

    class RecordSites(lightning.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx == 5:
                probe.desk.record_sites({"steps": 5})

    try:
        trainer = lightning.Trainer(max_steps=20, accelerator="cpu", logger=False, enable_checkpointing=False,
                                    enable_progress_bar=False, enable_model_summary=False,
                                    callbacks=[RecordSites()])
        trainer.fit(lit_job.Classifier(), loader)
        report = probe.report()
    finally:
        runtime.stop()
    (keeper,) = report.keepers
    assert (keeper.name, keeper.scope, keeper.what, keeper.per_step) == ("self.outputs", "attribute", "a list", 1.0)
    line = LIGHTNING_JOB.splitlines().index("        self.outputs.append(loss)") + 1
    assert keeper.where == (f"{tmp_path / 'lit_job.py'}:{line} in training_step",)
