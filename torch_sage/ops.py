"""Typed Python entry points of the sage ops, and their fake kernels (shapes only, for tracing)."""
from typing import Optional, Tuple

import torch
from torch import Tensor

BLOCK_Q = 128  # query tokens per int8 block (docs/SEMANTICS.md)
BLOCK_K = 64  # key tokens per int8 block


def _padded_head_dim(d):
    return 64 if d <= 64 else (128 if d <= 128 else 256)


def _bhnd(t: Tensor, layout: str):
    """(batch, heads, tokens, head_dim) of an input in either layout."""
    if layout not in ("HND", "NHD"):
        raise ValueError(f'tensor_layout must be "HND" or "NHD", got {layout!r}')
    b, x, y, d = t.shape
    return (b, x, y, d) if layout == "HND" else (b, y, x, d)


def _check_one_device(op: str, **tensors) -> None:
    """The fake kernels also run for real calls in which one input is a meta tensor (the Meta dispatch key wins
    over CPU and CUDA): without this check such a call returned uninitialised memory on q's device."""
    given = {name: t for name, t in tensors.items() if t is not None}
    devices = {t.device for t in given.values()}
    if len(devices) > 1:
        names = ", ".join(f"{name} on {t.device}" for name, t in given.items())
        raise RuntimeError(f"sage::{op}: all tensor inputs must be on the same device, got {names}")


def attention(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
              sm_scale: Optional[float] = None, smooth_k: bool = True, pv_mode: str = "auto") -> Tensor:
    """8-bit attention; returns a tensor shaped like q (see docs/SEMANTICS.md)."""
    return torch.ops.sage.attention(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)


def attention_with_lse(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
                       sm_scale: Optional[float] = None, smooth_k: bool = True,
                       pv_mode: str = "auto") -> Tuple[Tensor, Tensor]:
    """Like attention, also returning lse: natural-log log-sum-exp of the scores, float32 [B, Hq, Nq]."""
    return torch.ops.sage.attention_with_lse(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)


@torch.library.register_fake("sage::_quant_qk_int8_triton")
@torch.library.register_fake("sage::quant_qk_int8")
def _quant_qk_int8_fake(q, k, tensor_layout, sm_scale, smooth_k):
    _check_one_device("quant_qk_int8", q=q, k=k)
    bq, hq, nq, d = _bhnd(q, tensor_layout)
    bk, hk, nk, _ = _bhnd(k, tensor_layout)
    dp = _padded_head_dim(d)
    nq_blocks, nk_blocks = (nq + BLOCK_Q - 1) // BLOCK_Q, (nk + BLOCK_K - 1) // BLOCK_K
    return (
        q.new_empty((bq, hq, nq_blocks * BLOCK_Q, dp), dtype=torch.int8),
        q.new_empty((bq, hq, nq_blocks), dtype=torch.float32),
        k.new_empty((bk, hk, nk_blocks * BLOCK_K, dp), dtype=torch.int8),
        k.new_empty((bk, hk, nk_blocks), dtype=torch.float32),
        k.new_empty((bk, hk, d) if smooth_k else (0,), dtype=torch.float32),
    )


@torch.library.register_fake("sage::quant_v_fp8")
def _quant_v_fp8_fake(v, tensor_layout):
    b, h, _, d = _bhnd(v, tensor_layout)
    return torch.empty_like(v, dtype=torch.float8_e4m3fn, memory_format=torch.contiguous_format), \
        v.new_empty((b, h, d), dtype=torch.float32)


def _attention_outputs(q_like: Tensor, b, hq, nq, d, layout, dtype):
    shape = (b, hq, nq, d) if layout == "HND" else (b, nq, hq, d)
    return q_like.new_empty(shape, dtype=dtype), q_like.new_empty((b, hq, nq), dtype=torch.float32)


@torch.library.register_fake("sage::qk_int8_attention")
def _qk_int8_attention_fake(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, tensor_layout, is_causal,
                            out_dtype):
    _check_one_device("qk_int8_attention", q_int8=q_int8, q_scale=q_scale, k_int8=k_int8, k_scale=k_scale, v=v,
                      v_scale=v_scale)
    b, _, _, d = _bhnd(v, tensor_layout)
    return _attention_outputs(v, b, q_int8.shape[1], qo_len, d, tensor_layout, out_dtype)


def _attention_fake_outputs(q, tensor_layout):
    b, hq, nq, d = _bhnd(q, tensor_layout)
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

