"""``sageattn``: the call shape of SageAttention 2.2.0, so existing callers can switch by import."""
from typing import Optional

from torch import Tensor

from .ops import attention, attention_with_lse

# SageAttention's pv_accum_dtype values: "fp32" is its fp16-PV kernel; the "+"-forms are its fp8-PV kernels.
_PV_ACCUM_TO_MODE = {"fp32": "fp16", "fp16": "fp16", "fp16+fp32": "fp16", "fp32+fp32": "fp8", "fp32+fp16": "fp8"}


def reject_attn_mask(kwargs) -> None:
    """SageAttention silently ignores an ``attn_mask`` keyword, which gives a wrong answer: raise instead."""
    if kwargs.get("attn_mask") is not None:
        raise ValueError("sageattn: attn_mask is not supported; use F.scaled_dot_product_attention for masked calls")


def sageattn(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
             sm_scale: Optional[float] = None, return_lse: bool = False, **kwargs):
    """Drop-in for ``sageattention.sageattn``.

    q: [B, Hq, Nq, D] ("HND") or [B, Nq, Hq, D] ("NHD"); k, v: same with Hkv heads and Nk tokens.
    Returns the attention output shaped like q, and with ``return_lse=True`` also the natural-log
    log-sum-exp [B, Hq, Nq] (float32). Keyword arguments that SageAttention knows are honoured:
    ``smooth_k`` (default True) and ``pv_accum_dtype`` (selects the fp16 or fp8 P.V mode); others
    (``qk_quant_gran``, ``smooth_v``, ...) are accepted and ignored, as SageAttention ignores the ones
    its chosen kernel does not use. A non-None ``attn_mask`` raises (SageAttention would ignore it).
    """
    reject_attn_mask(kwargs)
    smooth_k = bool(kwargs.get("smooth_k", True))
    pv_mode = kwargs.get("pv_mode")
    if pv_mode is None:
        accum = kwargs.get("pv_accum_dtype")
        if accum is not None and accum not in _PV_ACCUM_TO_MODE:
            raise ValueError(f"pv_accum_dtype must be one of {sorted(_PV_ACCUM_TO_MODE)}, got {accum!r}")
        pv_mode = _PV_ACCUM_TO_MODE.get(accum, "auto")
    if return_lse:
        return attention_with_lse(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)
    return attention(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)
