"""A corpus of small PyTorch training loops that leak memory in the classic ways, and clean look-alikes.

Plain PyTorch, no probe code. Every loop is a function ``NAME(steps)`` that seeds torch, builds its own
tiny model, optimizer and random data, trains on the CPU for ``steps`` steps (each ending with one
``optimizer.step()`` of its main optimizer) and returns what it kept, so a caller can hold a leak alive
until it has read a report. ``PATTERNS`` at the bottom says which loops leak, in which category
("activations": graphs kept with their saved tensors; "other": plain tensors kept), on which model,
and what the mistake and its fix are. In each leaky loop one line is marked ``allocates`` (where the
leaking tensors are made) and one ``keeps`` (the line that holds on to them); ``marked_line`` finds them.

Run one by name, under the probe or not::

    gputui run -- python examples/leak_corpus.py eval_total_loss --steps 300
    python examples/leak_corpus.py --list
"""

from __future__ import annotations

import argparse
import collections
import gc
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# -- models -------------------------------------------------------------------------------------------


class MLP(nn.Module):
    """A classifier on flat features: one wide hidden layer, then a narrower one."""

    def __init__(self, features: int, wide: int = 1024, narrow: int = 256, classes: int = 10):
        super().__init__()
        self.wide = nn.Linear(features, wide)
        self.narrow = nn.Linear(wide, narrow)
        self.out = nn.Linear(narrow, classes)

    def forward(self, x):
        h = torch.relu(self.wide(x))  # allocates: eval_total_loss; allocates: module_outputs
        h = torch.relu(self.narrow(h))
        return self.out(h)


class SmallCNN(nn.Module):
    """Two conv blocks with BatchNorm on 3x16x16 images, then a linear head."""

    def __init__(self, classes: int = 10, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.head = nn.Linear(2 * width * 4 * 4, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # allocates: outputs_list
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return self.head(h.flatten(1))


class LSTMLanguageModel(nn.Module):
    """Next-token prediction: embedding, one LSTM layer, a linear decoder."""

    def __init__(self, vocab: int = 64, embed: int = 32, hidden: int = 128):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))  # allocates: loss_history
        return self.decoder(out)


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks, a vocabulary head."""

    def __init__(self, vocab: int = 288, width: int = 64, heads: int = 4, layers: int = 2, context: int = 32):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class VAE(nn.Module):
    """A variational autoencoder on flat 28x28 images."""

    def __init__(self, pixels: int = 784, hidden: int = 256, latent: int = 16):
        super().__init__()
        self.enc = nn.Linear(pixels, hidden)
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Linear(latent, hidden)
        self.out = nn.Linear(hidden, pixels)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.mu(h), self.logvar(h)

    def decode(self, z):
        h = F.relu(self.dec(z))
        return torch.sigmoid(self.out(h))  # allocates: detached_cache

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


def vae_loss(recon, x, mu, logvar):
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (bce + kl) / len(x)


class Generator(nn.Module):
    """DCGAN-style: a projection to 4x4, then transposed convolutions up to 3x16x16."""

    def __init__(self, latent: int = 32, width: int = 32, channels: int = 3):
        super().__init__()
        self.project = nn.Linear(latent, 2 * width * 4 * 4)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 4, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.up2 = nn.ConvTranspose2d(width, channels, 4, 2, 1)

    def forward(self, z):
        h = F.relu(self.project(z)).view(len(z), -1, 4, 4)
        h = F.relu(self.bn1(self.up1(h)))  # allocates: attribute_history
        return torch.tanh(self.up2(h))


class Discriminator(nn.Module):
    """DCGAN-style: strided convolutions down to 4x4, then a linear score."""

    def __init__(self, width: int = 32, channels: int = 3):
        super().__init__()
        self.down1 = nn.Conv2d(channels, width, 4, 2, 1)
        self.down2 = nn.Conv2d(width, 2 * width, 4, 2, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.score = nn.Linear(2 * width * 4 * 4, 1)

    def forward(self, x):
        h = F.leaky_relu(self.down1(x), 0.2)
        h = F.leaky_relu(self.bn2(self.down2(h)), 0.2)
        return self.score(h.flatten(1)).squeeze(1)


class GANTrainer:
    """Trains a Generator against a Discriminator, the discriminator stepped first in each step."""

    def __init__(self, batch: int = 16, latent: int = 32, samples: int = 32):
        torch.manual_seed(0)
        self.batch, self.latent = batch, latent
        self.generator, self.discriminator = Generator(latent), Discriminator()
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        self.images = torch.rand(1024, 3, 16, 16) * 2 - 1
        self.fixed_noise = torch.randn(samples, latent)
        self.fakes: list[torch.Tensor] = []

    def step(self, step: int):
        real = batch_at(self.images, step, self.batch)
        fake = self.generator(torch.randn(self.batch, self.latent))
        ones, zeros = torch.ones(self.batch), torch.zeros(self.batch)
        self.opt_d.zero_grad()
        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                  + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros))
        d_loss.backward()
        self.opt_d.step()
        self.opt_g.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        g_loss.backward()
        self.opt_g.step()
        return g_loss.item()

    def keep_samples(self):
        fake = self.generator(self.fixed_noise)  # grad enabled: fake carries the generator's graph
        self.fakes.append(fake)  # keeps: attribute_history


class LeakyRNN(nn.Module):
    """A tiny RNN over wide sensor frames, one frame per step: its few units leak towards a tanh drive
    of the frame, hidden = leak * hidden + (1 - leak) * tanh(W frame), and an MLP reads them out.

    The recurrence has no trained weight, so backward can still run through older steps after the
    optimizer has stepped (with nn.RNN the second backward through a kept graph fails with "modified by
    an inplace operation" instead of leaking).
    """

    def __init__(self, channels: int = 1152, hidden: int = 8, outputs: int = 8, leak: float = 0.9):
        super().__init__()
        self.leak = leak
        self.drive = nn.Linear(channels, hidden, bias=False)
        self.readout = nn.Sequential(
            nn.Linear(hidden, 384), nn.ReLU(), nn.Linear(384, 384), nn.ReLU(), nn.Linear(384, outputs))

    def forward(self, frame, hidden):
        hidden = torch.lerp(torch.tanh(self.drive(frame)), hidden, self.leak)  # leak*hidden + (1-leak)*drive
        return self.readout(hidden), hidden


class LitClassifier(nn.Module):
    """A LightningModule-style classifier: the loop calls its training_step and validation_step, and
    it collects the validation losses on itself for an epoch-end summary, as Lightning's docs show."""

    def __init__(self, features: int = 64):
        super().__init__()
        self.net = MLP(features, wide=512)
        self.val_outputs: list[torch.Tensor] = []

    def training_step(self, batch):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)  # grad enabled: the loss carries its graph
        self.val_outputs.append(loss)  # keeps: module_outputs


class Trainer:
    """A trainer in the style of Hugging Face's: many attributes set up front, then the user's own
    ``running`` list last, past the first fifty."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        for index in range(52):  # (a real Trainer's args, callbacks, state, accelerator, ...)
            setattr(self, f"setting_{index}", [index])
        self.running: list[torch.Tensor] = []

    def training_step(self, x, y):
        self.optimizer.zero_grad()
        features = torch.relu(self.model.wide(x))  # allocates: trainer_attribute
        loss = F.cross_entropy(self.model.out(torch.relu(self.model.narrow(features))), y)
        loss.backward()
        self.optimizer.step()
        self.running.append(features.detach())  # keeps: trainer_attribute


# -- helpers ------------------------------------------------------------------------------------------


def batch_at(data: torch.Tensor, step: int, size: int) -> torch.Tensor:
    """Rows ``size`` at a time, walking round ``data`` (a view: no copy)."""
    start = (step * size) % (len(data) - size + 1)
    return data[start:start + size]


def classify_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def lm_step(model, optimizer, tokens):
    optimizer.zero_grad()
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    return logits, loss


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def vae_step(model, optimizer, x):
    optimizer.zero_grad()
    recon, mu, logvar = model(x)
    vae_loss(recon, x, mu, logvar).backward()
    optimizer.step()
    return recon


def mlp_job(features: int = 64, wide: int = 1024):
    torch.manual_seed(0)
    model = MLP(features, wide)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, labels = torch.randn(4096, features), torch.randint(0, 10, (4096,))
    return model, optimizer, inputs, labels


def cnn_job():
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = torch.randn(2048, 3, 16, 16), torch.randint(0, 10, (2048,))
    return model, optimizer, images, labels


def lstm_job(length: int = 24):
    torch.manual_seed(0)
    model = LSTMLanguageModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 64, (1024, length + 1))
    return model, optimizer, tokens


def gpt_job(context: int = 32):
    torch.manual_seed(0)
    model = TinyGPT(context=context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    tokens = torch.randint(0, 288, (2048, context + 1))
    return model, optimizer, tokens


def vae_job():
    torch.manual_seed(0)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.rand(4096, 784)
    return model, optimizer, images


def rnn_job():
    torch.manual_seed(0)
    model = LeakyRNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    counts = torch.randint(-2000, 2000, (128, 64, 1152), dtype=torch.int16)  # raw sensor readings
    targets = torch.randn(128, 64, 8)
    return model, optimizer, counts, targets


# -- leaky loops --------------------------------------------------------------------------------------


def eval_total_loss(steps: int) -> object:
    """MLP: a validation loss computed with grad enabled and summed as a tensor."""
    model, optimizer, inputs, labels = mlp_job()
    val_x, val_y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    val_total = 0.0
    for step in range(steps):
        classify_step(model, optimizer, batch_at(inputs, step, 128), batch_at(labels, step, 128))
        val_loss = F.cross_entropy(model(batch_at(val_x, step, 128)), batch_at(val_y, step, 128))
        val_total += val_loss  # keeps: eval_total_loss
    return val_total


def outputs_list(steps: int) -> object:
    """CNN with BatchNorm: eval outputs that still carry grad_fn, appended to a list."""
    model, optimizer, images, labels = cnn_job()
    val_images = torch.randn(256, 3, 16, 16)
    outputs = []
    for step in range(steps):
        model.train()
        classify_step(model, optimizer, batch_at(images, step, 32), batch_at(labels, step, 32))
        model.eval()
        out = model(batch_at(val_images, step, 16))  # eval mode, but grad still enabled
        outputs.append(out)  # keeps: outputs_list
    return outputs


def loss_history(steps: int) -> object:
    """LSTM language model: the validation loss tensor kept in a history list for logging."""
    model, optimizer, tokens = lstm_job()
    val_tokens = torch.randint(0, 64, (256, 25))
    history = []
    for step in range(steps):
        lm_step(model, optimizer, batch_at(tokens, step, 16))
        loss = lm_loss(model, batch_at(val_tokens, step, 4))
        history.append(loss)  # keeps: loss_history
    return history


def hidden_carried(steps: int) -> object:
    """RNN: the hidden state carried into the next step without .detach(), so the graph chains on.

    Each step's graph holds that step's input frame (the drive layer saves it for its weight gradient),
    and every backward walks all the steps before it, so the steps slow down as the graph grows.
    """
    model, optimizer, counts, targets = rnn_job()
    hidden = torch.zeros(64, 8)
    for step in range(steps):
        frame = counts[step % len(counts)].float() / 1000  # allocates: hidden_carried
        optimizer.zero_grad()
        out, hidden = model(frame, hidden)  # keeps: hidden_carried
        loss = F.mse_loss(out, targets[step % len(targets)])
        loss.backward(retain_graph=True)  # needed, since the graph reaches back into older steps
        optimizer.step()
    return hidden


def detached_cache(steps: int) -> object:
    """VAE: detached reconstructions cached per step in a dict that is never evicted."""
    model, optimizer, images = vae_job()
    cache = {}
    for step in range(steps):
        recon = vae_step(model, optimizer, batch_at(images, step, 128))
        cache[step] = recon.detach()  # keeps: detached_cache
    return cache


def growing_tensor(steps: int) -> object:
    """Small GPT: every step's logits concatenated onto one tensor kept for an epoch-end metric."""
    model, optimizer, tokens = gpt_job()
    all_logits = torch.empty(0, 32, 288)
    for step in range(steps):
        out, _ = lm_step(model, optimizer, batch_at(tokens, step, 8))  # out: the logits
        all_logits = torch.cat([all_logits, out.detach()])  # allocates: growing_tensor; keeps: growing_tensor
    return all_logits


def attribute_history(steps: int) -> object:
    """GAN: a trainer method keeps the generator's samples for a progress grid, graphs and all."""
    trainer = GANTrainer()
    for step in range(steps):
        trainer.keep_samples()
        trainer.step(step)
    return trainer.fakes


SEEN: list[torch.Tensor] = []  # every batch seen, for a debugging dump that never comes


def global_list(steps: int) -> object:
    """MLP: a copy of every input batch appended to a module-level list."""
    SEEN.clear()
    model, optimizer, inputs, labels = mlp_job(features=784, wide=256)
    for step in range(steps):
        x, y = batch_at(inputs, step, 128), batch_at(labels, step, 128)
        SEEN.append(x.clone())  # allocates: global_list; keeps: global_list
        classify_step(model, optimizer, x, y)
    return SEEN


def module_outputs(steps: int) -> object:
    """A LightningModule-style loop: validation losses, graphs and all, collected on the module."""
    torch.manual_seed(0)
    module = LitClassifier()
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    inputs, labels = torch.randn(4096, 64), torch.randint(0, 10, (4096,))
    val_x, val_y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    for step in range(steps):
        optimizer.zero_grad()
        module.training_step((batch_at(inputs, step, 128), batch_at(labels, step, 128))).backward()
        optimizer.step()
        module.validation_step((batch_at(val_x, step, 128), batch_at(val_y, step, 128)))
    return module.val_outputs


def trainer_attribute(steps: int) -> object:
    """MLP under a trainer with many attributes: each step's hidden features, detached, kept on it."""
    model, optimizer, inputs, labels = mlp_job()
    trainer = Trainer(model, optimizer)
    for step in range(steps):
        trainer.training_step(batch_at(inputs, step, 128), batch_at(labels, step, 128))
    return trainer.running


def running_total(steps: int) -> object:
    """Small GPT, eight blocks deep: the training loss summed as a tensor for the epoch's mean, so every
    step's autograd graph (hundreds of nodes, freed of their saved tensors by backward) stays linked."""
    torch.manual_seed(0)
    model = TinyGPT(layers=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    tokens = torch.randint(0, 288, (2048, 33))
    total_loss = 0.0
    for step in range(steps):
        _, loss = lm_step(model, optimizer, batch_at(tokens, step, 4))
        total_loss += loss  # keeps: running_total
    return total_loss


def sliced_dataset(steps: int) -> object:
    """MLP on a 64 MiB dataset held in memory and sliced per batch (views, no copies), while a small
    copy of each batch is kept in a list for a debugging dump (256 KiB a step)."""
    torch.manual_seed(0)
    model = MLP(1024, wide=256)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    dataset, labels = torch.randn(16384, 1024), torch.randint(0, 10, (16384,))
    inspected = []
    for step in range(steps):
        x, y = batch_at(dataset, step, 64), batch_at(labels, step, 64)
        optimizer.zero_grad()
        out = model(x)
        F.cross_entropy(out, y).backward()
        optimizer.step()
        inspected.append(x.clone())  # allocates: sliced_dataset; keeps: sliced_dataset
    return inspected


# -- clean loops --------------------------------------------------------------------------------------


def clean_cnn(steps: int) -> object:
    """CNN with BatchNorm, trained plainly; the loss is logged as a float."""
    model, optimizer, images, labels = cnn_job()
    losses = []
    for step in range(steps):
        loss = classify_step(model, optimizer, batch_at(images, step, 32), batch_at(labels, step, 32))
        losses.append(loss.item())
    return losses


def warmup(steps: int) -> object:
    """MLP whose batch grows over the first four steps, then stays: memory rises, then is flat."""
    model, optimizer, inputs, labels = mlp_job()
    for step in range(steps):
        size = 128 * min(step + 1, 4) // 4
        loss = classify_step(model, optimizer, batch_at(inputs, step, size), batch_at(labels, step, size))
    return loss.item()


def bounded_cache(steps: int) -> object:
    """VAE: the last eight detached reconstructions kept for a preview, in a deque that drops the oldest."""
    model, optimizer, images = vae_job()
    recent = collections.deque(maxlen=8)
    for step in range(steps):
        recon = vae_step(model, optimizer, batch_at(images, step, 128))
        recent.append(recon.detach())
    return recent


def variable_length(steps: int) -> object:
    """LSTM language model on sequences of a random length each step: 8 to 32 tokens in steps of 4.

    Each round of seven steps visits every length once, in random order, so the shapes the CPU kernels
    cache (a few hundred KiB) are all seen within the first round.
    """
    model, optimizer, tokens = lstm_job(length=32)
    buckets = torch.arange(8, 33, 4)
    lengths = torch.cat([buckets[torch.randperm(len(buckets))] for _ in range(steps // len(buckets) + 1)])
    for step in range(steps):
        batch = batch_at(tokens, step, 16)[:, :int(lengths[step]) + 1]
        _, loss = lm_step(model, optimizer, batch)
    return loss.item()


class Snapshot:
    """Eval outputs with a back-reference to itself: a reference cycle only the collector frees."""

    def __init__(self, outputs: torch.Tensor):
        self.outputs = outputs
        self.meta = {"snapshot": self}


def gc_sawtooth(steps: int) -> object:
    """CNN with BatchNorm: graphs held in reference cycles, freed each time the collector runs."""
    model, optimizer, images, labels = cnn_job()
    val_images = torch.randn(256, 3, 16, 16)
    enabled = gc.isenabled()
    gc.disable()  # the collector runs every 10 steps, as it would now and then on its own
    try:
        for step in range(steps):
            classify_step(model, optimizer, batch_at(images, step, 32), batch_at(labels, step, 32))
            Snapshot(model(batch_at(val_images, step, 16)))  # carries its graph until collected
            if step % 10 == 9:
                gc.collect(0)  # the young generation, as the collector does (a full pass: ~60 ms)
    finally:
        if enabled:
            gc.enable()
    return step


def periodic_eval(steps: int) -> object:
    """MLP with an eval pass every 25 steps on a larger batch, under torch.no_grad, loss via .item()."""
    model, optimizer, inputs, labels = mlp_job()
    val_x, val_y = torch.randn(1024, 64), torch.randint(0, 10, (1024,))
    scores = []
    for step in range(steps):
        classify_step(model, optimizer, batch_at(inputs, step, 128), batch_at(labels, step, 128))
        if step % 25 == 0:
            model.eval()
            with torch.no_grad():
                scores.append(F.cross_entropy(model(val_x), val_y).item())
            model.train()
    return scores


def grad_accumulation(steps: int) -> object:
    """Small GPT with gradient accumulation: two micro-batches per optimizer step."""
    model, optimizer, tokens = gpt_job()
    for step in range(steps):
        optimizer.zero_grad()
        for micro in range(2):
            logits = model(batch_at(tokens, 2 * step + micro, 6)[:, :-1])
            target = batch_at(tokens, 2 * step + micro, 6)[:, 1:]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)) / 2
            loss.backward()
        optimizer.step()
    return loss.item()


def clean_gan(steps: int) -> object:
    """GAN: samples for the progress grid made under torch.no_grad, only the latest kept."""
    trainer = GANTrainer()
    latest = None
    for step in range(steps):
        with torch.no_grad():
            latest = trainer.generator(trainer.fixed_noise)
        trainer.step(step)
    return latest


def hidden_detached(steps: int) -> object:
    """RNN: the hidden state carried into the next step detached (truncated backpropagation)."""
    model, optimizer, counts, targets = rnn_job()
    hidden = torch.zeros(64, 8)
    for step in range(steps):
        frame = counts[step % len(counts)].float() / 1000
        optimizer.zero_grad()
        out, hidden = model(frame, hidden.detach())
        loss = F.mse_loss(out, targets[step % len(targets)])
        loss.backward()
        optimizer.step()
    return hidden


# -- loops whose verdict must hold over hundreds of steps ----------------------------------------------


def slow_leak(steps: int) -> object:
    """MLP: every 20 steps a 1 MiB detached copy of the hidden features is kept for a later plot."""
    model, optimizer, inputs, labels = mlp_job()
    kept = []
    for step in range(steps):
        x, y = batch_at(inputs, step, 128), batch_at(labels, step, 128)
        classify_step(model, optimizer, x, y)
        if step % 20 == 19:
            with torch.no_grad():
                features = torch.relu(model.wide(x)).repeat(2, 1)  # 256 x 1024 floats: 1 MiB  # allocates: slow_leak
                kept.append(features)  # keeps: slow_leak
    return kept


def warmup_plateau(steps: int) -> object:
    """MLP over 100 distinct batches, each normalised once and cached (256 KiB a step for 100 steps),
    then read from the cache: memory grows for 100 steps, then is flat."""
    model, optimizer, inputs, labels = mlp_job()
    cache: dict[int, torch.Tensor] = {}
    for step in range(steps):
        key = step % 100
        if key not in cache:
            raw = batch_at(inputs, key, 1024)  # 1024 x 64 floats: 256 KiB
            cache[key] = (raw - raw.mean(0)) / (raw.std(0) + 1e-6)
        x = cache[key][:128]
        classify_step(model, optimizer, x, batch_at(labels, key, 128))
    return cache


# -- registry -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    run: Callable[[int], object]
    leaks: bool
    category: str | None  # "activations" or "other" for leaks, None for clean
    model: str  # e.g. "CNN with BatchNorm"
    what: str  # one line: the mistake and its fix


PATTERNS: dict[str, Pattern] = {
    "eval_total_loss": Pattern(
        eval_total_loss, True, "activations", "MLP",
        "val_total += val_loss keeps every eval graph with its activations; use val_loss.item() "
        "(and torch.no_grad() for eval)"),
    "outputs_list": Pattern(
        outputs_list, True, "activations", "CNN with BatchNorm",
        "model.eval() does not turn off autograd: outputs appended with grad_fn keep their graphs; "
        "use torch.no_grad() or out.detach()"),
    "loss_history": Pattern(
        loss_history, True, "activations", "LSTM language model",
        "history.append(loss) keeps each validation graph alive; append loss.item()"),
    "hidden_carried": Pattern(
        hidden_carried, True, "activations", "RNN",
        "the hidden state carried without .detach() chains every step's graph (retain_graph=True hides "
        "the error); carry hidden.detach()"),
    "detached_cache": Pattern(
        detached_cache, True, "other", "VAE",
        "cache[step] = recon.detach() adds a tensor every step and never evicts one; bound the cache "
        "(a deque with maxlen) or keep only summaries"),
    "growing_tensor": Pattern(
        growing_tensor, True, "other", "small GPT",
        "torch.cat onto all_logits grows one tensor every step; compute the metric per step, or keep "
        "a bounded window"),
    "attribute_history": Pattern(
        attribute_history, True, "activations", "DCGAN",
        "self.fakes.append(fake) keeps each generator graph; sample under torch.no_grad() and keep "
        "a bounded number"),
    "global_list": Pattern(
        global_list, True, "other", "MLP",
        "SEEN.append(x.clone()) at module level keeps a copy of every batch; drop it or bound it"),
    "module_outputs": Pattern(
        module_outputs, True, "activations", "LightningModule-style MLP",
        "self.val_outputs.append(loss) on the module keeps each validation graph; append loss.detach() "
        "(or loss.item()) and clear the list at the epoch's end"),
    "trainer_attribute": Pattern(
        trainer_attribute, True, "other", "MLP",
        "self.running.append(features.detach()) on a trainer with many attributes keeps every step's "
        "features; keep a summary (.mean().item()) or a bounded window"),
    "running_total": Pattern(
        running_total, True, "other", "small GPT",
        "total_loss += loss links every step's autograd graph to the next; use loss.item()"),
    "sliced_dataset": Pattern(
        sliced_dataset, True, "other", "MLP",
        "inspected.append(x.clone()) keeps a copy of every batch; the 64 MiB dataset sliced per batch "
        "(views, no copies) is not the leak"),
    "clean_cnn": Pattern(
        clean_cnn, False, None, "CNN with BatchNorm", "clean: the loss is logged with .item()"),
    "warmup": Pattern(
        warmup, False, None, "MLP", "clean: the batch grows for four steps, then memory is flat"),
    "bounded_cache": Pattern(
        bounded_cache, False, None, "VAE",
        "clean: a deque(maxlen=8) of detached reconstructions fills, then drops the oldest"),
    "variable_length": Pattern(
        variable_length, False, None, "LSTM language model",
        "clean: memory follows the random sequence length up and down, without a trend"),
    "gc_sawtooth": Pattern(
        gc_sawtooth, False, None, "CNN with BatchNorm",
        "clean: graphs in reference cycles pile up until the garbage collector runs every 10 steps"),
    "periodic_eval": Pattern(
        periodic_eval, False, None, "MLP",
        "clean: every 25 steps an eval pass under torch.no_grad() on a larger batch, loss via .item()"),
    "grad_accumulation": Pattern(
        grad_accumulation, False, None, "small GPT",
        "clean: gradients accumulate over two micro-batches per optimizer step"),
    "clean_gan": Pattern(
        clean_gan, False, None, "DCGAN",
        "clean: samples made under torch.no_grad(), only the latest kept"),
    "hidden_detached": Pattern(
        hidden_detached, False, None, "RNN",
        "clean: the hidden state is carried detached (truncated backpropagation through time)"),
}

# Loops that take hundreds of steps to tell apart, whose verdict is asserted at every step: a leak too
# slow to call within 50 steps, and a warm-up longer than a leak's confirmation.
SLOW_PATTERNS: dict[str, Pattern] = {
    "slow_leak": Pattern(
        slow_leak, True, "other", "MLP",
        "kept.append(features) every 20 steps keeps 1 MiB each time: slow, but without end; keep a bounded "
        "window or write them out"),
    "warmup_plateau": Pattern(
        warmup_plateau, False, None, "MLP",
        "clean: 100 distinct batches normalised once and cached, 256 KiB a step for 100 steps, then flat"),
}

_MARKER = re.compile(r"#\s*((?:allocates|keeps): \w+(?:;\s*(?:allocates|keeps): \w+)*)\s*$")


def marked_line(name: str, what: str) -> int:
    """The 1-based number of the line in this file whose end comment marks ``what`` ("keeps" or
    "allocates") for the pattern ``name``; LookupError if there is none."""
    wanted = f"{what}: {name}"
    for number, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        found = _MARKER.search(line)
        if found and wanted in (part.strip() for part in found.group(1).split(";")):
            return number
    raise LookupError(f"no line of {Path(__file__).name} is marked '{wanted}'")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted({**PATTERNS, **SLOW_PATTERNS}))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    parser.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                        help="make each step last at least this long (sleeping at its end), as a bigger model would")
    parser.add_argument("--linger", type=float, default=0.0, metavar="SECONDS",
                        help="after the last step, hold what the loop kept this long (a monitor's last look)")
    parser.add_argument("--list", action="store_true", help="list the patterns and exit")
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for name, pattern in {**PATTERNS, **SLOW_PATTERNS}.items():
            kind = f"leaks {pattern.category}" if pattern.leaks else "clean"
            print(f"{name:<18} {kind:<17} {pattern.model:<20} {pattern.what}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.step_time > 0:
        pad_steps(args.step_time)
    started = time.perf_counter()
    kept = {**PATTERNS, **SLOW_PATTERNS}[args.name].run(args.steps)
    elapsed = time.perf_counter() - started
    print(f"{args.name}: {args.steps} steps in {elapsed:.1f} s ({1000 * elapsed / args.steps:.1f} ms/step), "
          f"kept {type(kept).__name__}", flush=True)
    time.sleep(args.linger)
    return 0


def pad_steps(seconds: float) -> None:
    """Make every optimizer step end at least ``seconds`` after the previous one ended, sleeping (a model
    that computes longer, without taking more of the CPU)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    last = [time.perf_counter()]

    def pad(optimizer, args, kwargs):
        left = last[0] + seconds - time.perf_counter()
        if left > 0:
            time.sleep(left)
        last[0] = time.perf_counter()

    register_optimizer_step_post_hook(pad)


if __name__ == "__main__":
    raise SystemExit(main())
