"""Real framework training jobs on CPU (on CUDA with FRAMEWORK_JOB_DEVICE=cuda), each run under the probe
with the truth summed inside the job, for tests/integration/test_probe_frameworks.py and bench/frameworks.py.

A job trains a few steps of a small model built from its config (nothing downloaded). ``Truth`` watches
the job through public hooks (the model's forward, each gradient's accumulation, every optimizer step)
and sums, each storage once as the probe does, what the job holds at each phase boundary: at each
forward's end (the model, its gradients and optimizer state, and the activations counted before the run),
at each backward's end, and at each optimizer step's end.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, field

import torch
from probe_truth import saved_bytes, state_tensors, storage_bytes
from torch import nn

from gputui.probe import runtime

CATEGORIES = ("parameters", "gradients", "optimizer_state", "buffers")
# Where the jobs train: the CPU (the tests) or "cuda" (bench/frameworks.py --device cuda on a GPU machine).
DEVICE = torch.device(os.environ.get("FRAMEWORK_JOB_DEVICE", "cpu"))
ON_CPU = DEVICE.type == "cpu"


def held(model: nn.Module, optimizers) -> dict[str, int]:
    """Bytes per category the job holds now: every parameter (frozen ones too), their gradients, the
    optimizers' state, the model's buffers."""
    params = list(model.parameters())
    return {"parameters": storage_bytes(params),
            "gradients": storage_bytes(p.grad for p in params if p.grad is not None),
            "optimizer_state": storage_bytes(t for o in optimizers for t in state_tensors(o, DEVICE.type)),
            "buffers": storage_bytes(model.buffers())}


@dataclass
class StepTruth:
    """One optimizer step's truth, at its phase boundaries (the only points a CPU job can be read at):
    ``forward``, the highest total where a forward pass starts, where the model's forward returns (above
    both others when the job frees gradients between forward and backward: Lightning's zero_grad) or
    where backward starts; ``backward``, the highest where backward starts or ends; the total before the
    optimizer's own work and the categories after it."""

    forward: int = 0
    backward: int = 0
    before_optimizer: int = 0
    categories: dict[str, int] = field(default_factory=dict)

    @property
    def optimizer(self) -> int:
        return max(self.before_optimizer, sum(self.categories.values()))


class Truth:
    """Sums what ``model`` holds at each phase boundary of the job (see the module's docstring).

    ``activations``: the bytes one forward pass saves for backward, counted before the run with
    probe_truth.saved_bytes (the model's inputs are the same shape at every step). Backward starts
    where the model's forward returns, unless the job says otherwise (``backward_starts()`` from a
    framework's own hook, with ``backward_follows_forward`` False).
    """

    def __init__(self, model: nn.Module, activations: int, backward_follows_forward: bool = True):
        self.model, self.activations = model, activations
        self.backward_follows_forward = backward_follows_forward
        self.optimizers: list = []
        self.steps: list[StepTruth] = [StepTruth()]
        self._handles: list = []

    def total(self) -> int:
        return sum(held(self.model, self.optimizers).values())

    def backward_starts(self) -> None:
        step, now = self.steps[-1], self.total() + self.activations
        step.forward, step.backward = max(step.forward, now), max(step.backward, now)

    def __enter__(self) -> "Truth":
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        def forward_starts(module, args):
            if torch.is_grad_enabled():
                self.steps[-1].forward = max(self.steps[-1].forward, self.total())

        def forward_ends(module, args, output):
            if torch.is_grad_enabled():
                step = self.steps[-1]
                step.forward = max(step.forward, self.total() + self.activations)
                if self.backward_follows_forward:
                    self.backward_starts()

        def gradient_kept(param):  # (the last one of a backward pass sees all its gradients: backward's end)
            step = self.steps[-1]
            step.before_optimizer = self.total()
            step.backward = max(step.backward, step.before_optimizer)

        def before_step(optimizer, args, kwargs):  # (a closure's backward runs after this: it counts last)
            if optimizer not in self.optimizers:
                self.optimizers.append(optimizer)
            self.steps[-1].before_optimizer = self.total()

        def after_step(optimizer, args, kwargs):
            self.steps[-1].categories = held(self.model, self.optimizers)
            self.steps.append(StepTruth())

        self._handles = [self.model.register_forward_pre_hook(forward_starts),
                         self.model.register_forward_hook(forward_ends),
                         register_optimizer_step_pre_hook(before_step), register_optimizer_step_post_hook(after_step)]
        self._handles += [p.register_post_accumulate_grad_hook(gradient_kept)
                          for p in self.model.parameters() if p.requires_grad]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self.steps.pop()  # (the step that never began)


@dataclass
class Run:
    """A job's run: the probe's report (None without the probe), the truth per optimizer step and the
    activations of one forward pass (empty and 0 when not watched), the seconds between steps' ends."""

    name: str
    checked: str
    report: object
    truth: list[StepTruth]
    activations: int
    step_seconds: list[float]


def under_probe(name: str, checked: str, truth: Truth | None, train, budget: float | None = 1.0) -> Run:
    """Run ``train()`` with the probe started at ``budget`` (1.0: every step measured; None: no probe) and
    ``truth`` (None: nothing but the clock) watching."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    gc.collect()
    ends: list[float] = []
    clock = register_optimizer_step_post_hook(lambda *args: ends.append(time.perf_counter()))
    probe = None if budget is None else runtime.start(serve=False, budget=budget)
    try:
        if truth is None:
            train()
        else:
            with truth:
                train()
        report = probe.report() if probe else None
    finally:
        clock.remove()
        if probe:
            runtime.stop()
    return Run(name, checked, report, truth.steps if truth else [], truth.activations if truth else 0,
               [b - a for a, b in zip(ends, ends[1:])])


# -- Hugging Face -------------------------------------------------------------------------------------------


def gpt2(lora: bool = False) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64,
                                       bos_token_id=0, eos_token_id=0))
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True))
    return model


def bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=512,
        max_position_embeddings=64, num_labels=3))


def text_examples(kind: str, batches: int, batch: int = 4, length: int = 32) -> list[dict]:
    """Examples of one length (every batch the same shape): tokens, and labels for the model's loss (the
    tokens for a language model, one of 3 classes for a classifier)."""
    torch.manual_seed(1)
    examples = []
    for _ in range(batches * batch):
        tokens = torch.randint(0, 512, (length,))
        examples.append({"input_ids": tokens, "labels": tokens if kind == "lm" else torch.randint(0, 3, ())})
    return examples


def hf_trainer(name: str, checked: str, model: nn.Module, kind: str, budget: float | None = 1.0,
               watch: bool = True, steps: int = 6, accumulation: int = 2) -> Run:
    """transformers' Trainer with its AdamW (torch's), micro-batches of 4, ``accumulation`` to a step."""
    import transformers
    from transformers import Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    args = TrainingArguments(output_dir="/nonexistent", per_device_train_batch_size=4,
                             gradient_accumulation_steps=accumulation, max_steps=steps, use_cpu=ON_CPU, report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True, optim="adamw_torch",
                             dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=text_examples(kind, steps * accumulation))
    truth = None
    if watch:  # the activations of the loss as the Trainer computes it (it divides by a count it makes)
        batches, count = trainer.get_batch_samples(iter(trainer.get_train_dataloader()), accumulation, DEVICE)
        first = {key: value.to(DEVICE) for key, value in batches[0].items()}  # (the Trainer put the model there)
        model.train()
        truth = Truth(model, saved_bytes(model, lambda: trainer.compute_loss(model, first, num_items_in_batch=count)))
    return under_probe(name, checked, truth, trainer.train, budget)


def hf_gpt2(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    return hf_trainer("transformers GPT-2", "Trainer, AdamW, 2 micro-batches a step", gpt2(), "lm", budget, watch,
                      steps)


def hf_bert(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    return hf_trainer("transformers BERT", "Trainer, AdamW, 2 micro-batches a step, buffers", bert(), "classes",
                      budget, watch, steps)


def peft_lora(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    """PEFT's LoRA on GPT-2's attention under the Trainer: the base model frozen, only the adapters train."""
    return hf_trainer("PEFT LoRA", "GPT-2 frozen, LoRA r=4 on c_attn, Trainer, AdamW", gpt2(lora=True), "lm",
                      budget, watch, steps)


def plain_gpt2(name: str, checked: str, model: nn.Module, budget: float | None, watch: bool, steps: int) -> Run:
    """A plain loop of GPT-2 ``model`` (compiled or not) with AdamW, one batch of 4 a step."""
    torch.manual_seed(1)
    tokens = [torch.randint(0, 512, (4, 32)).to(DEVICE) for _ in range(steps)]  # (not views of one tensor)
    model.to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    truth = Truth(model, saved_bytes(model, lambda: model(input_ids=tokens[0], labels=tokens[0]).loss)) \
        if watch else None

    def train():
        for batch in tokens:
            optimizer.zero_grad()
            model(input_ids=batch, labels=batch).loss.backward()
            optimizer.step()

    return under_probe(name, checked, truth, train, budget)


def compiled(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    """torch.compile with AOTAutograd's eager backend (its joint graph saves the activations; no C compiler
    needed), on GPT-2 with AdamW."""
    torch.compiler.reset()
    return plain_gpt2("torch.compile", "GPT-2 compiled (aot_eager), AdamW",
                      torch.compile(gpt2(), backend="aot_eager"), budget, watch, steps)


def checkpointed(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    """transformers' activation checkpointing (torch's non-reentrant checkpoint of each block), GPT-2, AdamW."""
    model = gpt2()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return plain_gpt2("activation checkpointing", "GPT-2, each block checkpointed (non-reentrant), AdamW",
                      model, budget, watch, steps)


def accelerate_loop(budget: float | None = 1.0, watch: bool = True, steps: int = 6, accumulation: int = 2) -> Run:
    """accelerate's own loop: prepare(), accumulate(), accelerator.backward(), on GPT-2 with AdamW."""
    from accelerate import Accelerator

    model = gpt2()
    loader = torch.utils.data.DataLoader(text_examples("lm", steps * accumulation), batch_size=4)
    accelerator = Accelerator(cpu=ON_CPU, gradient_accumulation_steps=accumulation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    truth = Truth(model, saved_bytes(model, lambda: model(**next(iter(loader))).loss)) if watch else None

    def train():
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()

    return under_probe("accelerate", f"Accelerator, AdamW, {accumulation} micro-batches a step", truth, train,
                       budget)


# -- PyTorch Lightning ----------------------------------------------------------------------------------------


def lightning_closure(budget: float | None = 1.0, watch: bool = True, steps: int = 6) -> Run:
    """Lightning's automatic optimization, which steps Adam with a closure: training_step, zero_grad,
    backward. The model is wider than its activations, so backward's end is the step's peak."""
    import lightning

    class Classifier(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    # (steps of a few ms, not one: the probe's readings stay a small share of them on a loaded machine, so
    # that at budget 1.0 every step is measured)
    torch.manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(64 * steps, 64), torch.randint(0, 10, (64 * steps,)))
    module = Classifier()
    # (Lightning zeroes the gradients after training_step returns: backward starts without them)
    truth = Truth(module, saved_bytes(module, lambda: module(torch.randn(64, 64))),
                  backward_follows_forward=False) if watch else None

    class BackwardStarts(lightning.Callback):
        def on_before_backward(self, trainer, module, loss):
            if truth is not None:
                truth.backward_starts()

    trainer = lightning.Trainer(max_steps=steps, accelerator=DEVICE.type, devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=[BackwardStarts()])
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    return under_probe("Lightning", "automatic optimization: Adam stepped with a closure", truth,
                       lambda: trainer.fit(module, loader), budget)


# Each job, and the frameworks it needs (the Trainer needs accelerate too).
JOBS = {"hf-gpt2": (hf_gpt2, ("transformers", "accelerate")), "hf-bert": (hf_bert, ("transformers", "accelerate")),
        "peft-lora": (peft_lora, ("transformers", "accelerate", "peft")),
        "accelerate": (accelerate_loop, ("transformers", "accelerate")),
        "lightning": (lightning_closure, ("lightning",)), "compile": (compiled, ("transformers",)),
        "checkpointing": (checkpointed, ("transformers",))}
