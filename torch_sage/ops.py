"""Typed Python entry points of the sage ops, and their fake kernels (shapes only, for tracing)."""
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from . import contract


def _check_one_device(op: str, **tensors) -> None:
    """The fake kernels also run for real calls in which one input is a meta tensor (the Meta dispatch key wins
    over CPU and CUDA): without this check such a call returned uninitialised memory on q's device."""
    given = {name: t for name, t in tensors.items() if t is not None}
    devices = {t.device for t in given.values()}
    if len(devices) > 1:
        names = ", ".join(f"{name} on {t.device}" for name, t in given.items())
        raise RuntimeError(f"sage::{op}: all tensor inputs must be on the same device, got {names}")


def _has_no_heads(q, k, v, tensor_layout) -> bool:
    """q, k and v of one batch size with no heads at all (H = 0), which SDPA answers with an empty result. The op
    refuses them (csrc/ops/input_checks.cpp wants at least one key/value head, so that query heads are a multiple
    of it), while B = 0 and N = 0 pass through it to kernels that return early on an empty output."""
    if tensor_layout not in contract.LAYOUTS or not all(isinstance(t, Tensor) and t.dim() == 4 for t in (q, k, v)):
        return False  # the op names what is wrong
    h = 1 if tensor_layout == "HND" else 2
    return q.shape[h] == 0 and k.shape[h] == 0 and v.shape[h] == 0 and q.shape[0] == k.shape[0] == v.shape[0]


def _call_without_heads(op, q, k, v, tensor_layout, *args):
    """op's outputs for inputs without heads: op runs on stand-ins with no batch and one head, so that all its
    other checks still apply (dtypes, devices, head_dim, k/v shape, layout, pv_mode, sm_scale, settings), then
    outputs of the right shape with no elements are made like its own."""
    def stand_in(t):
        _, _, n, d = contract.bhnd(t.shape, tensor_layout)
        return t.new_empty(contract.layout_shape(0, 1, n, d, tensor_layout))

    res = op(stand_in(q), stand_in(k), stand_in(v), tensor_layout, *args)
    b, _, nq, d = contract.bhnd(q.shape, tensor_layout)
    if isinstance(res, Tensor):
        return res.new_empty(contract.layout_shape(b, 0, nq, d, tensor_layout))
    out, lse = res
    return out.new_empty(contract.layout_shape(b, 0, nq, d, tensor_layout)), lse.new_empty((b, 0, nq))


def attention(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
              sm_scale: Optional[float] = None, smooth_k: bool = True, pv_mode: str = "auto") -> Tensor:
    """8-bit attention; returns a tensor shaped like q (see docs/SEMANTICS.md)."""
    # The op's schema would take None, 2 or 1.5 for a bool; tensor_layout and pv_mode the op checks itself.
    is_causal = contract.check_bool("torch_sage.attention", "is_causal", is_causal)
    smooth_k = contract.check_bool("torch_sage.attention", "smooth_k", smooth_k)
    if _has_no_heads(q, k, v, tensor_layout):
        return _call_without_heads(torch.ops.sage.attention, q, k, v, tensor_layout, is_causal, sm_scale, smooth_k,
                                   pv_mode)
    return torch.ops.sage.attention(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
                       sm_scale: Optional[float] = None, smooth_k: bool = True,
                       pv_mode: str = "auto") -> Tuple[Tensor, Tensor]:
    """Like attention, also returning lse: natural-log log-sum-exp of the scores, float32 [B, Hq, Nq]."""
    is_causal = contract.check_bool("torch_sage.attention_with_lse", "is_causal", is_causal)
    smooth_k = contract.check_bool("torch_sage.attention_with_lse", "smooth_k", smooth_k)
    if _has_no_heads(q, k, v, tensor_layout):
        return _call_without_heads(torch.ops.sage.attention_with_lse, q, k, v, tensor_layout, is_causal, sm_scale,
                                   smooth_k, pv_mode)
    return torch.ops.sage.attention_with_lse(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)


def guard_counts() -> Dict[str, int]:
    """How often the accuracy guard (SAGEATTN_SK1_GUARD=on, docs/SEMANTICS.md) acted in this process: the calls it
    changed and the query blocks (of 128 queries) it computed again."""
    calls, blocks = torch.ops.sage._guard_counts()
    return {"calls": calls, "blocks": blocks}


@torch.library.register_fake("sage::_quant_qk_int8_triton")
@torch.library.register_fake("sage::quant_qk_int8")
def _quant_qk_int8_fake(q, k, tensor_layout, sm_scale, smooth_k):
    _check_one_device("quant_qk_int8", q=q, k=k)
    q_int8, q_scale, k_int8, k_scale, k_mean = contract.quant_qk_shapes(
        contract.bhnd(q.shape, tensor_layout), contract.bhnd(k.shape, tensor_layout), smooth_k)
    return (q.new_empty(q_int8, dtype=torch.int8), q.new_empty(q_scale, dtype=torch.float32),
            k.new_empty(k_int8, dtype=torch.int8), k.new_empty(k_scale, dtype=torch.float32),
            k.new_empty(k_mean, dtype=torch.float32))


@torch.library.register_fake("sage::quant_v_fp8")
def _quant_v_fp8_fake(v, tensor_layout):
    b, h, _, d = contract.bhnd(v.shape, tensor_layout)
    return torch.empty_like(v, dtype=torch.float8_e4m3fn, memory_format=torch.contiguous_format), \
        v.new_empty((b, h, d), dtype=torch.float32)


def _attention_outputs(q_like: Tensor, b, hq, nq, d, layout, dtype):
    return (q_like.new_empty(contract.layout_shape(b, hq, nq, d, layout), dtype=dtype),
            q_like.new_empty((b, hq, nq), dtype=torch.float32))


def _kernel_outputs(op, q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, out_dtype):
    _check_one_device(op, q_int8=q_int8, q_scale=q_scale, k_int8=k_int8, k_scale=k_scale, v=v, v_scale=v_scale)
    b, _, _, d = contract.bhnd(v.shape, tensor_layout)
    return _attention_outputs(v, b, q_int8.shape[1], qo_len, d, tensor_layout, out_dtype)


@torch.library.register_fake("sage::qk_int8_attention")
def _qk_int8_attention_fake(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal,
                            out_dtype):
    return _kernel_outputs("qk_int8_attention", q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout,
                           out_dtype)


@torch.library.register_fake("sage::_qk_int8_attention_fast")
def _qk_int8_attention_fast_fake(q_int8, q_scale, k_int8, k_scale, v, qo_len, tensor_layout, is_causal, out_dtype):
    return _kernel_outputs("_qk_int8_attention_fast", q_int8, q_scale, k_int8, k_scale, v, None, qo_len,
                           tensor_layout, out_dtype)


def _attention_fake_outputs(q, tensor_layout):
    b, hq, nq, d = contract.bhnd(q.shape, tensor_layout)
    return _attention_outputs(q, b, hq, nq, d, tensor_layout, q.dtype)


@torch.library.register_fake("sage::attention")
def _attention_fake(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True, pv_mode="auto"):
    _check_one_device("attention", q=q, k=k, v=v)
    return _attention_fake_outputs(q, tensor_layout)[0]


@torch.library.register_fake("sage::attention_with_lse")
def _attention_with_lse_fake(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True,
                             pv_mode="auto"):
    _check_one_device("attention_with_lse", q=q, k=k, v=v)
    return _attention_fake_outputs(q, tensor_layout)

