"""``gputui estimate``'s attention (gputui/estimate/attention.py): the kernel torch would pick on the
device the job trains on, what that kernel keeps for backward on the meta device, and the examples'
grouped-query GPT against a real CPU step, activation checkpointing's recomputed forward included."""

from __future__ import annotations

import contextlib
import math

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from cli_helpers import ROOT  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from gputui.estimate.attention import EFFICIENT, FLASH, MATH, Call, Kernels, cpu_kernel, cuda_kernel  # noqa: E402
from gputui.estimate.job import load  # noqa: E402
from gputui.estimate.ledger import Ledger  # noqa: E402
from gputui.estimate.step import Settings, measure  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GQA = f"{ROOT / 'examples' / 'estimate_models.py'}:gqa"
B, H, L = 2, 8, 64  # batch, query heads, sequence


def call(dtype=torch.float32, kv_heads=H, width=16, value_width=None, mask=None, **kwargs) -> Call:
    """Query, key and value (batch, heads, sequence, width) on the CPU, and the call's other arguments."""
    q = torch.randn(B, H, L, width, dtype=dtype)
    k = torch.randn(B, kv_heads, L, width, dtype=dtype)
    v = torch.randn(B, kv_heads, L, value_width or width, dtype=dtype)
    return Call(q, k, v, mask, **kwargs)


def torch_cpu_pick(c: Call) -> str:
    """What torch itself picks for these CPU tensors."""
    choice = torch._fused_sdp_choice(c.query, c.key, c.value, c.attn_mask, c.dropout_p, c.is_causal,
                                     scale=c.scale, enable_gqa=c.enable_gqa)
    return {int(SDPBackend.MATH): MATH, int(SDPBackend.FLASH_ATTENTION): FLASH}[choice]


CPU_CASES = {
    "fp32": (lambda: call(), FLASH),
    "bf16, causal": (lambda: call(torch.bfloat16, is_causal=True), FLASH),
    "fp16": (lambda: call(torch.float16), FLASH),
    "fp64": (lambda: call(torch.float64), FLASH),
    "dropout": (lambda: call(dropout_p=0.1), MATH),
    "grouped heads asked for": (lambda: call(kv_heads=2, enable_gqa=True), FLASH),
    "grouped heads not asked for": (lambda: call(kv_heads=2), MATH),
    "one key and value head, not asked for": (lambda: call(kv_heads=1), MATH),
    "boolean mask (queries, keys)": (lambda: call(mask=torch.ones(L, L, dtype=torch.bool).tril()), FLASH),
    "additive mask (batch, 1, queries, keys)": (lambda: call(mask=torch.zeros(B, 1, L, L)), FLASH),
    "3-D mask": (lambda: call(mask=torch.zeros(B, L, L)), MATH),
    "mask needing a gradient": (lambda: call(mask=torch.zeros(L, L, requires_grad=True)), MATH),
    "narrower value heads": (lambda: call(value_width=8), MATH),
    "query's last dimension strided": (
        lambda: Call(torch.randn(B, H, 16, L).transpose(-1, -2), torch.randn(B, H, L, 16), torch.randn(B, H, L, 16)),
        MATH),
    "3-D query, key and value": (lambda: Call(*(torch.randn(B, L, 16) for _ in range(3))), MATH),
}


@pytest.mark.parametrize("case", CPU_CASES)
def test_the_cpu_rule_picks_what_torch_picks_on_the_cpu(case):
    make, expected = CPU_CASES[case]
    c = make()
    assert torch_cpu_pick(c) == expected
    assert cpu_kernel(c) == expected


def test_a_kernel_switched_off_with_sdpa_kernel_stays_off():
    c = call(torch.bfloat16)
    with sdpa_kernel(SDPBackend.MATH):
        assert torch_cpu_pick(c) == cpu_kernel(c) == cuda_kernel(c) == MATH
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        assert cuda_kernel(c) == EFFICIENT


CUDA_CASES = {  # torch 2.13's rules for an sm80+ GPU (cuda/sdp_utils.cpp), read, not run: no GPU here
    "bf16": (lambda: call(torch.bfloat16), FLASH),
    "fp16, grouped heads": (lambda: call(torch.float16, kv_heads=2, enable_gqa=True), FLASH),
    "bf16, head width 256": (lambda: call(torch.bfloat16, width=256), FLASH),
    "bf16, head width 264: over flash's 256": (lambda: call(torch.bfloat16, width=264), EFFICIENT),
    "bf16 with a mask: flash takes none": (lambda: call(torch.bfloat16, mask=torch.zeros(L, L)), EFFICIENT),
    "bf16, causal, fewer keys than queries": (
        lambda: Call(torch.randn(B, H, L, 16).bfloat16(), *(torch.randn(B, H, L // 2, 16).bfloat16() for _ in "kv"),
                     is_causal=True), EFFICIENT),
    "fp32: flash is 16-bit only": (lambda: call(), EFFICIENT),
    "fp32 with dropout: the GPU kernels take it": (lambda: call(dropout_p=0.1), EFFICIENT),
    "fp32, grouped heads: the efficient kernel takes none": (lambda: call(kv_heads=2, enable_gqa=True), MATH),
    "fp32, head width 30: not a multiple of 4": (lambda: call(width=30), MATH),
    "bf16, head width 36, a mask: not a multiple of 8": (lambda: call(torch.bfloat16, width=36, mask=torch.zeros(L, L)),
                                                         MATH),
    "fp64": (lambda: call(torch.float64), MATH),
}


@pytest.mark.parametrize("case", CUDA_CASES)
def test_the_cuda_rule(case):
    make, expected = CUDA_CASES[case]
    assert cuda_kernel(make()) == expected


def saved(device: str | None, dtype: torch.dtype = torch.float32, kv_heads: int = H, width: int = 16,
          mask=None, **kwargs) -> tuple[str | None, int, torch.Tensor]:
    """The kernel one attention call ran on the meta device for ``device`` (None: on the real CPU, as
    torch picks), the bytes autograd kept for its backward (counted by the estimate's ledger), and its
    output. ``mask`` makes the mask, on the device the call runs on."""
    ledger, kernels = Ledger(), Kernels(device or "cpu")
    with contextlib.ExitStack() as stack:
        if device is not None:
            stack.enter_context(torch.device("meta"))
        stack.enter_context(ledger)
        if device is not None:
            stack.enter_context(kernels)
        q = torch.randn(B, H, L, width, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(B, kv_heads, L, width, dtype=dtype, requires_grad=True) for _ in "kv")
        with torch.autograd.graph.saved_tensors_hooks(ledger.saved, lambda t: t):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask and mask(), **kwargs)
    assert sum(kernels.chosen.values()) == (device is not None)
    return next(iter(kernels.chosen), None), ledger.activations, out


CPU_RUNS = {
    "fp32, grouped heads": dict(kv_heads=2, enable_gqa=True),
    "bf16, causal": dict(dtype=torch.bfloat16, is_causal=True),
    "boolean mask": dict(mask=lambda: torch.ones(L, L, dtype=torch.bool).tril()),
    "additive mask (batch, 1, queries, keys)": dict(mask=lambda: torch.zeros(B, 1, L, L)),
    "dropout: math": dict(dropout_p=0.1),
}


@pytest.mark.parametrize("case", CPU_RUNS)
def test_on_the_meta_device_the_cpus_kernel_keeps_what_it_keeps_on_the_cpu(case):
    kernel, estimated, _ = saved("cpu", **CPU_RUNS[case])
    assert kernel == (MATH if "dropout" in case else FLASH)
    assert estimated == saved(None, **CPU_RUNS[case])[1]


def test_the_kernels_keep_query_key_value_output_and_a_logsumexp_row_per_query():
    q = B * H * L * 16  # elements of the query (and of the output)
    kv = B * 2 * L * 16  # of the key, and of the value: 2 heads, grouped
    rows = B * H * L * 4  # the logsumexp: an fp32 per query row

    assert saved("cpu", kv_heads=2, enable_gqa=True)[:2] == (FLASH, 4 * (2 * q + 2 * kv) + rows)
    # CUDA's flash adds its random generator's seed and offset (3 uint64s)
    assert saved("cuda", torch.bfloat16, kv_heads=2, enable_gqa=True)[:2] == (FLASH, 2 * (2 * q + 2 * kv) + rows + 24)
    # the efficient kernel's logsumexp rows are padded to 32 queries; its seed and offset are 2 int64s
    assert saved("cuda")[:2] == (EFFICIENT, 4 * 4 * q + B * H * math.ceil(L / 32) * 32 * 4 + 16)


def test_cuda_flash_keeps_heads_padded_to_a_multiple_of_8_and_returns_them_unpadded():
    kernel, kept, out = saved("cuda", torch.bfloat16, width=36)
    padded = B * H * L * 40 * 2  # bf16, 36 wide padded to 40
    assert kernel == FLASH and kept == 4 * padded + B * H * L * 4 + 24
    assert out.shape == (B, H, L, 36)


def test_the_efficient_kernel_keeps_the_mask_over_every_head_padded_to_16_keys():
    keys = 60  # padded to 64
    mask = torch.ones(L, keys, dtype=torch.bool, device="meta")
    ledger, kernels = Ledger(), Kernels("cuda")
    with torch.device("meta"), ledger, kernels:
        q = torch.empty(B, H, L, 16, requires_grad=True)
        k, v = (torch.empty(B, H, keys, 16, requires_grad=True) for _ in "kv")
        with torch.autograd.graph.saved_tensors_hooks(ledger.saved, lambda t: t):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert dict(kernels.chosen) == {EFFICIENT: 1}
    tensors = 4 * (2 * B * H * L * 16 + 2 * B * H * keys * 16)
    assert ledger.activations == tensors + B * H * L * 64 * 4 + B * H * L * 4 + 16  # q k v out, mask, lse, seed


def test_the_math_kernel_keeps_the_attention_matrix():
    kernel, kept, _ = saved("cuda", kv_heads=2, enable_gqa=True)
    assert kernel == MATH
    assert kept >= B * H * L * L * 4  # the softmaxed attention, fp32


@pytest.mark.parametrize("settings", [
    Settings(device="cpu"),
    Settings(device="cpu", checkpointing=True),  # the forward recomputed during backward runs flash again
], ids=["fp32", "checkpointed"])
def test_the_grouped_query_gpt_is_estimated_as_a_real_cpu_step_runs_it(settings):
    """Flash on the CPU keeps query, key, value, output and logsumexp; the meta device's math kernel kept
    the attention matrix and the repeated key and value heads, 21 % too much for this GPT's phases."""
    estimated = measure(load(GQA), settings)
    real = measure(load(GQA), Settings(precision=settings.precision, checkpointing=settings.checkpointing, real=True))
    assert estimated.attention == {FLASH: 8 * (2 if settings.checkpointing else 1)}  # 4 layers, 2 steps
    assert [p.total for p in estimated.phases] == [p.total for p in real.phases]
    assert estimated.activations_peak == real.activations_peak


def test_a_checkpoint_of_the_users_own_recomputes_with_the_same_kernel(tmp_path):
    """Reentrant and not: each recomputes its blocks' forward during backward, where torch runs with no
    function mode on; without the same kernel there, the non-reentrant one refuses the step."""
    script = tmp_path / "own.py"
    script.write_text(
        f"import functools, sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\n"
        "import estimate_gpt, torch\nfrom torch.utils.checkpoint import checkpoint\n\n"
        "def job(reentrant, batch_size=8):\n"
        "    model, x, optimizer, loss = estimate_gpt.gqa(batch_size)\n"
        "    for block in model.h:\n"
        "        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=reentrant)\n"
        "    return model, x, optimizer, loss\n\n"
        "def reentrant(batch_size=8):\n    return job(True, batch_size)\n\n"
        "def non_reentrant(batch_size=8):\n    return job(False, batch_size)\n")
    for kind in ("reentrant", "non_reentrant"):
        estimated = measure(load(f"{script}:{kind}"), Settings(device="cpu"))
        real = measure(load(f"{script}:{kind}"), Settings(real=True))
        assert estimated.attention == {FLASH: 16}, kind
        assert [p.total for p in estimated.phases] == [p.total for p in real.phases], kind


def test_a_gpu_runs_the_grouped_query_gpt_in_fp32_on_the_math_kernel_and_in_bf16_on_flash():
    fp32 = measure(load(GQA), Settings())
    bf16 = measure(load(GQA), Settings(precision="bf16"))
    cpu_bf16 = measure(load(GQA), Settings(precision="bf16", device="cpu"))
    assert fp32.attention == {MATH: 8} and bf16.attention == {FLASH: 8}
    # the GPU's flash keeps what the CPU's does, and its seed and offset: 24 bytes a layer
    assert bf16.activations_peak == cpu_bf16.activations_peak + 4 * 24
