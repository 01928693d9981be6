"""Six kinds of job for ``gputui estimate``, the ones its accuracy is measured on (docs/estimate.md):
an MLP, a CNN with BatchNorm, an LSTM language model, a small GPT, the GPT with grouped-query attention
(torch's scaled_dot_product_attention) and a model with frozen parameters.

    gputui estimate examples/estimate_models.py:cnn_batchnorm --batch-size 256 --device-memory 8GiB

Each loss is a criterion module, so that the probe, which watches the tensors saved inside modules'
forward passes, sees what the loss saves too, as the estimate does.
"""

import estimate_gpt
import torch
from torch import nn


def mlp(batch_size: int = 64):
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return classifier(model, torch.randn(batch_size, 256), torch.optim.Adam(model.parameters()))


def cnn_batchnorm(batch_size: int = 16):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )
    return classifier(model, torch.randn(batch_size, 3, 32, 32), torch.optim.Adam(model.parameters()))


def frozen(batch_size: int = 16):
    """A frozen backbone (BatchNorm still in train mode) and a trained head: SGD with momentum holds
    state for the head only."""
    backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(4), nn.Flatten())
    backbone.requires_grad_(False)
    head = nn.Sequential(nn.Linear(16 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))
    model = nn.Sequential(backbone, head)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
    return classifier(model, torch.randn(batch_size, 3, 32, 32), optimizer)


def classifier(model, x, optimizer):
    y = torch.randint(0, 10, (x.size(0),))
    criterion = nn.CrossEntropyLoss()
    return model, x, optimizer, lambda out: criterion(out, y)


class WordLM(nn.Module):
    """word_language_model's LSTM: embedding, a two-layer LSTM, a decoder."""

    def __init__(self, vocab=1000, dim=128):
        super().__init__()
        self.encoder = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, num_layers=2)
        self.decoder = nn.Linear(dim, vocab)

    def forward(self, tokens):
        output, _ = self.rnn(self.encoder(tokens))
        return self.decoder(output).view(-1, self.decoder.out_features)


def lstm(batch_size: int = 16):
    model = WordLM()
    tokens = torch.randint(0, 1000, (35, batch_size))  # (sequence, batch), as the example batchifies
    targets = torch.randint(0, 1000, (35 * batch_size,))
    criterion = nn.CrossEntropyLoss()
    return model, tokens, torch.optim.SGD(model.parameters(), lr=1.0), lambda out: criterion(out, targets)


def gpt(batch_size: int = 8):
    return estimate_gpt.build(batch_size)


def gqa(batch_size: int = 8):
    return estimate_gpt.gqa(batch_size)
