"""Hugging Face models for ``gputui estimate``, built from a config (nothing downloaded), as they come:
the model computes its own loss from the batch's labels and returns it as ``output.loss``.

    pip install transformers
    gputui estimate examples/estimate_hf.py:gpt2 --device-memory 16GiB
    gputui estimate examples/estimate_hf.py:bert --precision bf16 --device-memory 16GiB
    gputui estimate examples/estimate_hf.py:llama --batch-size 8 --zero-gpus 4 --fsdp2 --device-memory 24GiB

The batch is a dict, given to the model as keyword arguments (``model(**batch)``).
"""

import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, BertConfig, GPT2Config, LlamaConfig

SEQUENCE = 128


def _batch(batch_size: int, vocab: int) -> dict:
    ids = torch.randint(0, vocab, (batch_size, SEQUENCE))
    return {"input_ids": ids, "labels": ids}  # the model shifts the labels itself


def gpt2(batch_size: int = 4):
    """A 2-layer GPT-2: the model and its batch (AdamW, gputui's default, steps it)."""
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=SEQUENCE,
                        bos_token_id=0, eos_token_id=0)
    return AutoModelForCausalLM.from_config(config), _batch(batch_size, config.vocab_size)


def bert(batch_size: int = 4):
    """A 2-layer BERT learning masked tokens (every position labelled): the model and its batch."""
    config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=256,
                        vocab_size=1000, max_position_embeddings=SEQUENCE)
    return AutoModelForMaskedLM.from_config(config), _batch(batch_size, config.vocab_size)


def llama(batch_size: int = 4):
    """A 4-layer Llama with grouped-query attention, with its own optimizer."""
    config = LlamaConfig(num_hidden_layers=4, hidden_size=256, intermediate_size=688, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=4000, max_position_embeddings=SEQUENCE)
    model = AutoModelForCausalLM.from_config(config)
    return model, _batch(batch_size, config.vocab_size), torch.optim.AdamW(model.parameters(), lr=1e-4)
