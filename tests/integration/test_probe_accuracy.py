"""The probe's breakdown against the truth, on eight kinds of training loop: a CNN with BatchNorm, an
LSTM language model, a tied-weight LM, a small GPT with gradient accumulation, a GAN with two
optimizers, a frozen backbone, a loop with no optimizer and LBFGS.

Each loop runs a handful of tiny steps on the CPU under the probe (every step measured: budget 1.0).
Parameters, gradients, optimizer state and buffers must be exact, in the latest step's record and in
a fresh reading taken after the loop; activations (the step's activations_peak) within 2 % of the
truth: the bytes the autograd graph of one forward pass and its loss saved for backward, found by
walking that graph (the largest such graph of an iteration: the GAN builds two). The truth counts
each storage once, as the probe does, and leaves out parameters' and buffers' storages.

The graphs walked are built after runtime.stop(), by the same models on the same shapes, one
iteration further: reading a saved tensor of a graph built under the probe calls the probe's unpack
hook, which takes that for the start of backward (the figures are the same, the step's phases not).

The loss is computed by a criterion module (nn.CrossEntropyLoss()) everywhere but in the GPT loop,
which computes it with F.cross_entropy in the loop, outside any module, as nanoGPT does: that loop
carries the known gap of a loss the probe does not see (issue 12). The loop with no optimizer has no
steps: its activations are those a fresh reading shows.

``bench/accuracy_table.py`` prints the same comparison as a Markdown table.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from probe_truth import fresh_reading, state_tensors, storage_bytes  # noqa: E402
from torch import nn  # noqa: E402

from gputui.probe import runtime  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import estimate_gpt  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 4  # loop iterations under the probe, each ending with the main optimizer's step()
STATIC = ("parameters", "gradients", "optimizer_state", "buffers")  # exact, at the step and now
ACTIVATIONS_TOLERANCE = 0.02


# -- the truth ----------------------------------------------------------------------------------------


def _saved_by(node) -> Iterator:
    """The tensors one autograd node saved for backward."""
    values = [getattr(node, name) for name in dir(node) if name.startswith("_saved_")]
    if hasattr(node, "saved_tensors"):  # a custom autograd Function (ctx.save_for_backward)
        values.append(node.saved_tensors)
    for value in values:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if torch.is_tensor(item):
                yield item


def saved_for_backward(loss, model_storages: set[int]) -> int:
    """Bytes the graph behind ``loss`` saved for backward, each storage once, leaving out the
    storages of parameters and buffers (``model_storages``, by data_ptr).

    Walks the graph itself (grad_fn, next_functions, each node's ``_saved_*`` attributes, a custom
    Function's saved_tensors), so it does not depend on how the probe sees saved tensors. Call it on
    a graph built without the probe (see the module's docstring).
    """
    views: dict[int, list] = {}  # data_ptr -> the graph's tensors on that storage
    nodes, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in nodes:
            continue
        nodes.add(node)
        for tensor in _saved_by(node):
            ptr = tensor.untyped_storage().data_ptr()
            if ptr and ptr not in model_storages:
                views.setdefault(ptr, []).append(tensor)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return sum(_counted_bytes(tensors) for tensors in views.values())


def _counted_bytes(views: list) -> int:
    """One storage's bytes as the probe's rule counts them (Activations.pack): a storage the graph
    uses less than half of (a batch sliced out of a dataset tensor) counts by the bytes used, else
    whole. The probe applies the rule to the first tensor it sees of a storage; here it applies to
    the elements all the graph's tensors on the storage use together, which is what the rule
    means: q, k and v split out of one projection each use a third of it, all three the whole.
    A storage the graph computed (a view's base is no leaf: BERT's pooler saves the first token of
    the last layer's output) counts whole however little of it is used: only the graph holds it.
    (Told here by the view's base; the probe tells it by the view's grad_fn.)"""
    if any(t._base is not None and not t._base.is_leaf for t in views):
        return views[0].untyped_storage().nbytes()
    storage = views[0].untyped_storage()
    size = {t.element_size() for t in views}
    if len(size) != 1:
        return storage.nbytes()  # the same storage seen as two dtypes: count it whole
    (itemsize,) = size
    used = torch.zeros(storage.nbytes() // itemsize, dtype=torch.bool)
    for t in views:
        used.as_strided(t.size(), t.stride(), t.storage_offset()).fill_(True)
    nbytes = int(used.sum()) * itemsize
    return nbytes if nbytes < storage.nbytes() // 2 else storage.nbytes()


# -- the loops ----------------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One training loop: what it trains, one iteration of it, and its forward passes."""

    models: tuple  # every module the loop calls, frozen parts included
    optimizers: tuple  # the first is the one whose step() ends the probe's steps (stepped first)
    iteration: Callable[[], None]  # one iteration of the loop
    # Each forward pass and loss one iteration builds, graphs kept (no backward): the truth is the
    # largest of them.
    passes: Callable[[], Iterator]
    forward: Callable[[], object]  # a plain forward pass, run under no_grad for a fresh reading


def cnn_batchnorm() -> Scenario:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    )
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))

    return classifier(model, criterion, optimizer, x, y)


def classifier(model, criterion, optimizer, x, y) -> Scenario:
    """The plain loop: one batch, a criterion module, one optimizer step."""

    def iteration():
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()

    return Scenario((model, criterion), (optimizer,), iteration,
                    lambda: iter([criterion(model(x), y)]), lambda: model(x))


class WordLM(nn.Module):
    """pytorch/examples' word_language_model: embedding, LSTM, decoder, log-softmax."""

    def __init__(self, ntoken=50, ninp=16, nhid=32, nlayers=2):
        super().__init__()
        self.ntoken = ntoken
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(self.encoder(tokens), hidden)
        return F.log_softmax(self.decoder(output).view(-1, self.ntoken), dim=1), hidden

    def init_hidden(self, bsz):
        return (torch.zeros(self.nlayers, bsz, self.nhid), torch.zeros(self.nlayers, bsz, self.nhid))


def lstm_lm() -> Scenario:
    bptt, bsz = 8, 4
    model = WordLM()
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    # The corpus batchified as the example does: (rows, bsz); each batch is a slice of it, so the
    # graph saves views of the corpus's storage (the embedding's indices, the loss's targets): the
    # slice rule (_counted_bytes) at work.
    corpus = torch.randint(0, 50, (((STEPS + 4) * bptt + 1) * bsz,)).view(bsz, -1).t().contiguous()
    at = {"i": 0, "hidden": model.init_hidden(bsz)}

    def batch():
        i = at["i"]
        at["i"] = (i + bptt) % (len(corpus) - bptt - 1)
        return corpus[i:i + bptt], corpus[i + 1:i + 1 + bptt].reshape(-1)

    def forward_loss():
        data, targets = batch()
        hidden = tuple(h.detach() for h in at["hidden"])  # repackage_hidden
        output, at["hidden"] = model(data, hidden)
        return criterion(output, targets)

    def iteration():
        optimizer.zero_grad()
        forward_loss().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()

    return Scenario((model, criterion), (optimizer,), iteration, lambda: iter([forward_loss()]),
                    lambda: model(corpus[:bptt], at["hidden"]))


class TiedLM(nn.Module):
    """An embedding, one hidden layer, and an output layer that shares the embedding's weight."""

    def __init__(self, vocab=64, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.out.weight = self.embed.weight  # tied: one storage, counted once

    def forward(self, tokens):
        return self.out(torch.tanh(self.hidden(self.embed(tokens))))


def tied_lm() -> Scenario:
    model = TiedLM()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters())
    tokens, targets = torch.randint(0, 64, (8, 16)), torch.randint(0, 64, (8 * 16,))

    def forward_loss():
        return criterion(model(tokens).view(-1, 64), targets)

    def iteration():
        optimizer.zero_grad()
        forward_loss().backward()
        optimizer.step()

    return Scenario((model, criterion), (optimizer,), iteration, lambda: iter([forward_loss()]),
                    lambda: model(tokens))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.c_attn, self.c_proj, self.heads = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def GPT(block_size: int = 16):
    """nanoGPT in miniature (examples/estimate_gpt.py's, which gputui estimate's accuracy is measured
    on too), with torch's fused attention as nanoGPT has it."""
    return estimate_gpt.GPT(block_size=block_size, attention=CausalSelfAttention)


def gpt_accumulation() -> Scenario:
    accumulation, batch, block = 3, 4, 16
    model = GPT(block_size=block)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    data = torch.randint(0, 64, (1000,))

    def get_batch():
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        return x, y

    at = {"batch": get_batch()}

    def forward_loss():
        X, Y = at["batch"]
        logits = model(X)
        # As nanoGPT's train.py: the loss outside any module, in the loop.
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), Y.view(-1)) / accumulation
        at["batch"] = get_batch()  # the next batch, fetched while the graph is alive
        return loss

    def iteration():
        for _ in range(accumulation):
            forward_loss().backward()  # each micro-batch's graph freed before the next is built
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return Scenario((model,), (optimizer,), iteration, lambda: iter([forward_loss()]),
                    lambda: model(at["batch"][0]))


def gan() -> Scenario:
    nz, features, batch = 8, 16, 32
    G = nn.Sequential(nn.Linear(nz, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, features))
    D = nn.Sequential(nn.Linear(features, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    criterion = nn.BCEWithLogitsLoss()
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.randn(batch, features)
    ones, zeros = torch.ones(batch, 1), torch.zeros(batch, 1)

    def d_loss():
        fake = G(torch.randn(batch, nz)).detach()  # G's graph dropped: D's loss trains D only
        return criterion(D(real), ones) + criterion(D(fake), zeros)

    def g_loss():
        return criterion(D(G(torch.randn(batch, nz))), ones)  # through D, into G

    def iteration():
        # DCGAN's order: the discriminator first (its optimizer's step() ends the probe's steps),
        # then the generator.
        D.zero_grad()
        d_loss().backward()
        opt_d.step()
        G.zero_grad()
        g_loss().backward()
        opt_g.step()

    def passes():
        yield d_loss()
        yield g_loss()

    return Scenario((G, D, criterion), (opt_d, opt_g), iteration, passes,
                    lambda: G(torch.randn(batch, nz)))


def frozen_backbone() -> Scenario:
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(4), nn.Flatten())
    backbone.requires_grad_(False)  # BatchNorm still updates its running statistics (train mode)
    head = nn.Sequential(nn.Linear(8 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))
    model = nn.Sequential(backbone, head)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)  # the head only
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))

    return classifier(model, criterion, optimizer, x, y)


def no_optimizer() -> Scenario:
    # word_language_model as shipped: p.data updated by hand, no torch.optim at all.
    model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(32 * 8, 64),
                          nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 100))
    criterion = nn.CrossEntropyLoss()
    tokens, targets = torch.randint(0, 100, (16, 8)), torch.randint(0, 100, (16,))

    def iteration():
        model.zero_grad()
        criterion(model(tokens), targets).backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.1)

    return Scenario((model, criterion), (), iteration,
                    lambda: iter([criterion(model(tokens), targets)]), lambda: model(tokens))


def lbfgs() -> Scenario:
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=4)
    x, y = torch.randn(64, 16), torch.randn(64, 1)

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss

    return Scenario((model, criterion), (optimizer,), lambda: optimizer.step(closure),
                    lambda: iter([criterion(model(x), y)]), lambda: model(x))


# The eight loops, by name (the test ids, and the table's rows).
SCENARIOS: dict[str, Callable[[], Scenario]] = {
    f.__name__: f for f in (cnn_batchnorm, lstm_lm, tied_lm, gpt_accumulation, gan, frozen_backbone,
                            no_optimizer, lbfgs)
}


# -- running one under the probe ----------------------------------------------------------------------


def static_truth(scenario: Scenario) -> dict[str, int]:
    params = [p for m in scenario.models for p in m.parameters()]  # each once, tied or shared
    return {
        "parameters": storage_bytes(params),
        "gradients": storage_bytes(p.grad for p in params if p.grad is not None),
        "optimizer_state": storage_bytes(t for opt in scenario.optimizers for t in state_tensors(opt)),
        "buffers": storage_bytes(b for m in scenario.models for b in m.buffers()),
    }


@dataclass
class Measured:
    """What the probe reported for one loop, beside the truth: (probe, truth) pairs of bytes."""

    step: dict | None  # category -> pair at the end of the latest measured step; None: no steps
    now: dict  # category -> pair in a fresh reading after the loop
    activations: tuple  # the step's activations_peak (no steps: the fresh reading's), and the truth
    limits: tuple[str, ...]  # what the report says the probe cannot see


def measure(kind: str, steps: int = STEPS) -> Measured:
    """Run one loop under the probe and read what it reports, and the truth, in this process."""
    torch.manual_seed(0)
    scenario = SCENARIOS[kind]()
    at_steps: list[dict] = []  # the truth at the end of each step, the probe's step n at [n - 1]
    handle = None
    if scenario.optimizers:
        # Taken at the very moment the probe records the step: right after the main optimizer's
        # step(); its own hooks run just before the probe's global one, with nothing in between.
        handle = scenario.optimizers[0].register_step_post_hook(
            lambda *_: at_steps.append(static_truth(scenario)))
    probe = runtime.start(serve=False, budget=1.0)
    try:
        for _ in range(steps):
            scenario.iteration()
        report = probe.report()
        now = fresh_reading(probe, scenario.forward)
    finally:
        runtime.stop()
        if handle is not None:
            handle.remove()
    truth_now = static_truth(scenario)
    # Activations: the graphs of one more iteration's forward passes, built with the probe gone (the
    # loop's steady state: the LSTM's carried hidden state, the next batch).
    model_storages = {t.untyped_storage().data_ptr()
                      for m in scenario.models for t in (*m.parameters(), *m.buffers())}
    saved = max(saved_for_backward(loss, model_storages) for loss in scenario.passes())
    measured = [s for s in report.steps if s.categories is not None]
    if measured:
        record = measured[-1]
        truth = at_steps[record.step - 1]
        step = {c: (getattr(record.categories, c), truth[c]) for c in STATIC}
        peak = record.activations_peak
    else:
        # No optimizer, no steps: the activations a monitor is shown are the fresh reading's.
        step, peak = None, now.activations
    return Measured(step, {c: (getattr(now, c), truth_now[c]) for c in STATIC}, (peak, saved),
                    report.limits)


@functools.cache
def measured(kind: str) -> Measured:
    """Each loop runs once for all the tests that look at it."""
    return measure(kind)


WITH_STEPS = [kind for kind in SCENARIOS if kind != "no_optimizer"]


def probe_and_truth(pairs: dict) -> tuple[dict, dict]:
    return {c: p for c, (p, _) in pairs.items()}, {c: t for c, (_, t) in pairs.items()}


# -- the tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", WITH_STEPS)
def test_the_step_record_counts_the_model_exactly(kind):
    probe, truth = probe_and_truth(measured(kind).step)
    assert probe == truth


@pytest.mark.parametrize("kind", SCENARIOS)
def test_a_fresh_reading_counts_the_model_exactly(kind):
    probe, truth = probe_and_truth(measured(kind).now)
    assert probe == truth


def test_a_loop_without_an_optimizer_has_no_steps_but_a_reading():
    m = measured("no_optimizer")
    assert m.step is None
    assert m.now["parameters"][0] == (100 * 32 + 32 * 8 * 64 + 64 + 2 * 64 + 64 * 100 + 100) * 4


# What a loss function saves outside any module: the probe does not see it, a limit its report
# states (hooks left on outside a forward pass would make torch.func raise in the job). The GPT
# loop's F.cross_entropy over 64 tokens and 64 classes: see
# test_the_truth_counts_a_loss_computed_outside_any_module.
LOSS_OUTSIDE = {"gpt_accumulation": 64 * 64 * 4 + 64 * 8 + 4 + 8}


@pytest.mark.parametrize("kind", SCENARIOS)
def test_activations_at_their_peak_are_within_2_percent(kind):
    # no_optimizer: no steps, so no step's peak; the fresh reading, taken as the next forward starts,
    # shows the last forward pass's peak.
    peak, truth = measured(kind).activations
    truth -= LOSS_OUTSIDE.get(kind, 0)
    assert peak is not None, "the step record has no activations_peak"
    assert peak == pytest.approx(truth, rel=ACTIVATIONS_TOLERANCE), (
        f"{kind}: probe {peak} B, truth {truth} B ({(peak - truth) / truth:+.1%})")


@pytest.mark.parametrize("kind", SCENARIOS)
def test_the_report_says_what_the_probe_cannot_see(kind):
    if kind in LOSS_OUTSIDE:
        (limit,) = measured(kind).limits
        assert "what a loss function saves outside any module" in limit
    else:  # a criterion module computes the loss: its saved tensors are seen, and no note says otherwise
        assert measured(kind).limits == ()


# Figures worked out by hand from the shapes, to check the truth itself.
BY_HAND = {
    # BatchNorm2d(8) and (16): running mean and variance, and a batch counter (int64) each.
    ("cnn_batchnorm", "buffers"): 2 * (8 + 16) * 4 + 2 * 8,
    # The embedding's weight is the output layer's: counted once.
    ("tied_lm", "parameters"): (64 * 32 + 32 * 32 + 32 + 64) * 4,
    ("gan", "buffers"): 2 * 32 * 4 + 8,  # the generator's BatchNorm1d(32)
    # Gradients and momentum of the head only; the frozen backbone has neither.
    ("frozen_backbone", "gradients"): (128 * 64 + 64 + 64 * 10 + 10) * 4,
    ("frozen_backbone", "optimizer_state"): (128 * 64 + 64 + 64 * 10 + 10) * 4,
    # The direction and the previous gradient, and 4 pairs of history (history_size=4), each a flat
    # vector of the 1153 parameters; 4 ro and 4 alpha scalars, and H_diag.
    ("lbfgs", "optimizer_state"): 10 * (16 * 64 + 64 + 64 + 1) * 4 + 9 * 4,
    # x (saved by the first Linear), tanh's output (by tanh and the second Linear), and the MSE
    # loss's input and target.
    ("lbfgs", "activations"): (64 * 16 + 64 * 64 + 64 + 64) * 4,
}


@pytest.mark.parametrize("kind, figure", BY_HAND)
def test_the_truth_agrees_with_sums_worked_out_by_hand(kind, figure):
    m = measured(kind)
    truth = m.activations[1] if figure == "activations" else (m.step or m.now)[figure][1]
    assert truth == BY_HAND[kind, figure]


def test_the_truth_counts_a_loss_computed_outside_any_module():
    torch.manual_seed(0)
    model = GPT()
    idx, targets = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, 64), targets.view(-1)) / 3
    model_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    # The log-softmax of 64 tokens over 64 classes, the targets (int64), nll_loss's total weight and
    # the divisor (a 0-d int64 tensor).
    assert (saved_for_backward(loss, model_storages) - saved_for_backward(logits, model_storages)
            == 64 * 64 * 4 + 64 * 8 + 4 + 8)


def test_the_truth_counts_slices_of_a_storage_by_what_the_graph_uses():
    data = torch.arange(1000)
    assert _counted_bytes([data[:10]]) == 10 * 8  # a batch sliced from a dataset: not the dataset
    assert _counted_bytes([data[:600]]) == 1000 * 8  # half of it or more: the whole storage
    qkv = torch.randn(4, 16, 96)
    q, k, v = qkv.split(32, dim=2)
    assert _counted_bytes([q]) == 4 * 16 * 32 * 4  # a third of it, alone
    assert _counted_bytes([q, k, v]) == qkv.nbytes  # all three: the whole projection
    hidden = torch.randn(4, 32, 64, requires_grad=True) + 1  # computed by the graph
    assert _counted_bytes([hidden[:, 0]]) == hidden.nbytes  # BERT's pooler: the whole output
