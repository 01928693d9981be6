"""A job for ``gputui estimate``: a small GPT, its batch, its optimizer and its loss.

    gputui estimate examples/estimate_gpt.py:build --device-memory 16GiB
    gputui estimate examples/estimate_gpt.py:build --batch-size 64 --gpu 0
    gputui estimate examples/estimate_gpt.py:gpt_850m --device-memory 16GB

gputui calls the function under ``torch.device("meta")``: the tensors it creates have shapes and
dtypes but no memory, so an 850M-parameter model is measured on a laptop in a second. Create tensors
on the default device (no ``device="cuda"``) so that they land there.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class GroupedQueryAttention(nn.Module):
    """Causal attention with a key and value head for every ``groups`` query heads (Llama's, Mistral's),
    through torch's scaled_dot_product_attention: its kernel, and what it keeps for backward, depend on
    the device (docs/estimate.md)."""

    def __init__(self, dim: int, heads: int, groups: int = 4):
        super().__init__()
        self.heads, self.kv_heads, self.width = heads, heads // groups, dim // heads
        self.q, self.proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * self.kv_heads * self.width)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.width).transpose(1, 2)
        k, v = (z.view(b, t, self.kv_heads, self.width).transpose(1, 2)
                for z in self.kv(x).split(self.kv_heads * self.width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, attention: type[nn.Module] = CausalSelfAttention):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(dim), attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT in miniature: token and position embeddings, blocks, a head tied to the embedding."""

    def __init__(self, vocab: int = 64, block_size: int = 16, dim: int = 32, heads: int = 2, layers: int = 2,
                 attention: type[nn.Module] = CausalSelfAttention):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block_size, dim)
        self.h = nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def job(model: GPT, batch_size: int, block_size: int, vocab: int):
    """The model, a batch of token ids, AdamW, and the next-token loss on that batch."""
    x = torch.randint(0, vocab, (batch_size, block_size))
    y = torch.randint(0, vocab, (batch_size, block_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    criterion = nn.CrossEntropyLoss()

    def loss(logits):
        return criterion(logits.view(-1, logits.size(-1)), y.view(-1))

    return model, x, optimizer, loss


def build(batch_size: int = 8):
    """A 0.8M-parameter GPT on 64-token blocks."""
    return job(GPT(vocab=512, block_size=64, dim=128, heads=4, layers=4), batch_size, 64, 512)


def gqa(batch_size: int = 8):
    """The same GPT with grouped-query attention: 8 query heads, 2 key/value heads."""
    model = GPT(vocab=512, block_size=64, dim=128, heads=8, layers=4, attention=GroupedQueryAttention)
    return job(model, batch_size, 64, 512)


def gpt_850m(batch_size: int = 1):
    """The rule of thumb's case: 850M parameters in fp32 (GPT-2 XL's width, 25 layers), one sequence
    of 256 tokens: Adam's model states alone are 16 bytes a parameter, 13.6 GB."""
    model = GPT(vocab=50304, block_size=256, dim=1600, heads=25, layers=25)
    return job(model, batch_size, 256, 50304)
