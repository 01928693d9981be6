"""Scaled dot-product attention run with the kernel the training device would pick, not the meta device's.

``F.scaled_dot_product_attention`` picks its kernel by its tensors' device. On the meta device (and on
fake CPU tensors asked for a GPU) that is not the device the job trains on: the meta device always runs
the math kernel, which keeps the softmaxed attention matrix (and the dropout mask) for backward and, for
grouped-query attention, repeats the key and value heads; a real CPU runs its flash kernel, which keeps
query, key, value, the output and a logsumexp row per query, and a GPU flash, memory-efficient or cuDNN
kernels, which keep about the same. ``Kernels``, a TorchFunctionMode (torch's public way to see a
function called), picks the kernel by torch's own rules for the training device and calls its operator,
whose meta version returns and saves what the real kernel does; the ledger counts those.

The rules are torch 2.13's (aten/src/ATen/native/transformers/sdp_utils_cpp.cpp for the CPU,
cuda/sdp_utils.cpp for CUDA), for a GPU of compute capability 8.0 or newer (A100, H100, L4 ...) at
torch's default priority: flash, then memory-efficient, then math. Kernels switched off with
``torch.nn.attention.sdpa_kernel`` stay off. Not followed (docs/estimate.md): cuDNN attention, which
torch prefers on sm90/sm100 with cuDNN newer than 9.15 (it keeps what flash keeps; a mask unpadded),
and older GPUs' narrower dtype and head-size limits. Not seen: attention called inside another torch
function (``nn.MultiheadAttention``'s ``F.multi_head_attention_forward``), which torch runs with every
function mode off: the meta device's math kernel is counted there.
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode

FLASH, EFFICIENT, MATH = "flash", "efficient", "math"
DEVICES = ("cuda", "cpu")
HALF = (torch.float16, torch.bfloat16)
WATCHED = frozenset({F.scaled_dot_product_attention,  # and where backward starts:
                     torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
aten = torch.ops.aten


@dataclass(frozen=True)
class Call:
    """One ``F.scaled_dot_product_attention`` call's arguments."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None = None
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False


# -- which kernel


def cpu_kernel(call: Call) -> str:
    """The CPU's: flash where it can run (no dropout, a mask it takes, one head size), else math."""
    q, k, v = call.query, call.key, call.value
    if (torch.backends.cuda.flash_sdp_enabled() and call.dropout_p == 0.0 and _dense(call, grouped=True)
            and _cpu_mask_fits(call) and q.size(-1) == k.size(-1) == v.size(-1)
            and _dtype_in(call, (torch.float32, torch.float64, *HALF))):
        return FLASH
    return MATH


def cuda_kernel(call: Call) -> str:
    """A GPU's (sm80 or newer): flash for 16-bit tensors without a mask and heads up to 256 wide
    (grouped key/value heads included), else memory-efficient (32-bit too, a mask, one head count,
    head sizes a multiple of 4, of 8 in 16 bits), else math."""
    q, k, v = call.query, call.key, call.value
    if (torch.backends.cuda.flash_sdp_enabled() and _dtype_in(call, HALF) and call.attn_mask is None
            and q.size(-1) == k.size(-1) == v.size(-1) <= 256 and _dense(call, grouped=True)
            and not (call.is_causal and q.size(-2) != k.size(-2))):
        return FLASH
    align = 8 if q.dtype in HALF else 4  # the kernel's matrix tiles, in elements
    # grouped=False: torch 2.13's memory-efficient kernel takes no grouped heads (its backward returns
    # a gradient for every query head), so torch sends those to math
    if (torch.backends.cuda.mem_efficient_sdp_enabled() and _dtype_in(call, (torch.float32, *HALF))
            and _dense(call, grouped=False) and q.size(-1) == k.size(-1)
            and all(size > 0 and size % align == 0 for size in (q.size(-1), v.size(-1)))
            and all(t.storage_offset() % align == 0 for t in (q, k, v))):
        return EFFICIENT
    return MATH


def _dense(call: Call, grouped: bool) -> bool:
    """What every fused kernel asks: query, key and value 4-D, of one batch size, no sequence of length 0,
    the last dimension's stride 1, and one head count, or (``grouped``: the kernel takes grouped-query
    attention, and the call asks for it) key and value heads that divide the query's."""
    q, k, v, mask = call.query, call.key, call.value, call.attn_mask
    if any(t.is_nested for t in (q, k, v)) or not q.dim() == k.dim() == v.dim() == 4:
        return False
    if not q.size(0) == k.size(0) == v.size(0) or q.size(2) == 0 or k.size(2) == 0:
        return False
    if any(t.stride(-1) != 1 for t in (q, k, v)) or (mask is not None and mask.stride(-1) != 1):
        return False
    if grouped and call.enable_gqa:
        return k.size(1) == v.size(1) and q.size(1) % k.size(1) == 0
    return q.size(1) == k.size(1) == v.size(1)


def _cpu_mask_fits(call: Call) -> bool:
    """The CPU flash kernel's masks: none, or one that broadcasts over (batch, heads, queries, keys),
    2-D or 4-D, needing no gradient."""
    mask, q, k = call.attn_mask, call.query, call.key
    if mask is None:
        return True
    if mask.requires_grad or mask.size(-2) not in (q.size(2), 1) or mask.size(-1) not in (k.size(2), 1):
        return False
    return mask.dim() == 2 or (mask.dim() == 4 and mask.size(0) in (1, q.size(0)) and mask.size(1) in (1, q.size(1)))


def _dtype_in(call: Call, dtypes: tuple[torch.dtype, ...]) -> bool:
    return call.query.dtype in dtypes and call.query.dtype == call.key.dtype == call.value.dtype


# -- the kernel run


def flash_cpu(call: Call) -> torch.Tensor:
    return aten._scaled_dot_product_flash_attention_for_cpu(
        call.query, call.key, call.value, call.dropout_p, call.is_causal,
        attn_mask=_additive(call.attn_mask, call.query.dtype), scale=call.scale)[0]


def flash_cuda(call: Call) -> torch.Tensor:
    """CUDA's flash kernel, given heads padded to a multiple of 8 wide as torch pads them (the padded
    copies are what it keeps for backward)."""
    width = call.query.size(-1)
    pad = -width % 8
    q, k, v = (F.pad(t, (0, pad)) if pad else t for t in (call.query, call.key, call.value))
    scale = call.scale if call.scale is not None else 1 / math.sqrt(width)  # the unpadded width's
    out = aten._scaled_dot_product_flash_attention(q, k, v, call.dropout_p, call.is_causal, scale=scale)[0]
    return out[..., :width] if pad else out


def efficient_cuda(call: Call) -> torch.Tensor:
    """The memory-efficient kernel, given the mask as torch gives it: additive, over every (batch, head)
    and padded to a multiple of 16 keys (a copy it keeps for backward)."""
    q, k, v = call.query, call.key, call.value
    mask = _additive(call.attn_mask, q.dtype)
    if mask is not None:
        mask = _aligned_bias(mask.expand(q.size(0), q.size(1), q.size(2), k.size(2)))
    logsumexp = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, mask, logsumexp, call.dropout_p, call.is_causal, scale=call.scale)[0]


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as the fused kernels take it: 0 where attended, -inf elsewhere, in ``dtype``."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, 0.0, torch.full((), -math.inf, dtype=dtype, device=mask.device))


def _aligned_bias(mask: torch.Tensor) -> torch.Tensor:
    keys = mask.size(-1)
    if keys % 16:
        return F.pad(mask, (0, -keys % 16))[..., :keys]
    if any(stride % 16 for stride in mask.stride()[:3]):
        return mask.contiguous()
    return mask


RULES: dict[str, Callable[[Call], str]] = {"cuda": cuda_kernel, "cpu": cpu_kernel}
RUNS: dict[tuple[str, str], Callable[[Call], torch.Tensor]] = {
    ("cpu", FLASH): flash_cpu, ("cuda", FLASH): flash_cuda, ("cuda", EFFICIENT): efficient_cuda}


class Kernels(TorchFunctionMode):
    """While entered, ``F.scaled_dot_product_attention`` runs the kernel ``device`` ("cuda" or "cpu")
    would pick; ``chosen`` counts the calls by kernel."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device
        self.chosen: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func not in WATCHED:  # nearly every call: as quick as can be
            return func(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return self._attend(func, args, kwargs)
        with self._in_recomputed_forwards():  # backward starts
            return func(*args, **kwargs)

    def _attend(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        call = _autocast(Call(*args, **kwargs))
        kernel = RULES[self.device](call)
        self.chosen[kernel] += 1
        if kernel == MATH:
            with sdpa_kernel(SDPBackend.MATH):  # fake CPU tensors would get the CPU's flash kernel
                return func(*args, **kwargs)
        return RUNS[self.device, kernel](call)

    @contextlib.contextmanager
    def _in_recomputed_forwards(self) -> Iterator[None]:
        """Backward runs with every function mode off (torch takes each off the stack to call it), so the
        forward an activation checkpoint recomputes there would run the meta device's math kernel where
        the first forward ran another, a difference torch's checkpoint refuses: while backward runs, each
        module called (outermost first) puts this mode back on for its forward."""
        depth = 0

        def enter(module: nn.Module, args: Any) -> None:
            nonlocal depth
            depth += 1
            if depth == 1:
                self.__enter__()

        def leave(module: nn.Module, args: Any, output: Any) -> None:
            nonlocal depth
            depth -= 1
            if depth == 0:
                self.__exit__(None, None, None)

        before = register_module_forward_pre_hook(enter)
        after = register_module_forward_hook(leave, always_call=True)
        try:
            yield
        finally:
            before.remove()
            after.remove()


def _autocast(call: Call) -> Call:
    """The call as autocast (amp) makes it: attention runs in the autocast dtype, on CPU and GPU alike."""
    device = call.query.device.type
    if device not in DEVICES or not torch.is_autocast_enabled(device):
        return call
    dtype = torch.get_autocast_dtype(device)

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype) if t.is_floating_point() else t

    mask = call.attn_mask
    return replace(call, query=cast(call.query), key=cast(call.key), value=cast(call.value),
                   attn_mask=None if mask is None else cast(mask))
