"""SageAttention 2.2.0's public functions, run by torch_sage: what ``from sageattention import ...`` gives under
the alias (torch_sage.sageattention_alias), importable from here without it.

``sageattn``, ``sageattn_varlen``, ``sageattn_qk_int8_pv_fp16_triton``, ``sageattn_qk_int8_pv_fp16_cuda``,
``sageattn_qk_int8_pv_fp8_cuda``, ``sageattn_qk_int8_pv_fp8_cuda_sm90``: the fp16 ones run torch_sage's accurate mode
(fp16 P.V), the fp8 ones its fast mode (fp8 P.V), ``sageattn`` follows ``pv_accum_dtype`` as ``torch_sage.sageattn``
does (accurate mode by default). Like SageAttention they take float16 and bfloat16 only: float32 (or any other dtype)
raises ``TypeError``, so a caller that falls back to exact attention on an error (ComfyUI does) computes float32
models exactly; ``torch_sage.sageattn`` itself accepts float32.

Deliberate differences, each where SageAttention silently drops something and gives a wrong answer: an
``attn_mask`` that is not None (older ComfyUI passes one) and a non-zero ``dropout_p`` raise ``ValueError``, so a
caller that catches errors falls back to exact attention instead of getting an unmasked result; a keyword that
no SageAttention 2.x function knows (``is_casual=True``) raises ``TypeError``, as a Python function without
``**kwargs`` would. The signatures have no ``attn_mask`` parameter, so current ComfyUI (which inspects the
signature) sends masked calls to PyTorch attention itself.
"""
from typing import Any, Optional

import torch
from torch import Tensor

from .api import SAGEATTENTION_KEYWORDS, SDPA_KEYWORDS
from .api import check_kwargs as _check_kwargs
from .api import check_values as _check_values
from .api import sageattn_as as _sageattn_as
from .contract import check_choice as _check_choice

SAGEATTENTION_API_VERSION = "2.2.0"  # the release whose signatures and checks these follow
_HALF = (torch.float16, torch.bfloat16)


def _check_dtype(func: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in _HALF:
            raise TypeError(f"{func}: {name} is {t.dtype}; SageAttention takes float16 or bfloat16 only, and so does "
                            "this sageattention alias, so that the caller's fallback runs (torch_sage.sageattn "
                            "accepts float32)")


# What SageAttention's kernel functions and sageattn_varlen accept in **kwargs (torch_sage's pv_mode is for
# sageattn only: the kernel functions choose the mode by their name).
_KERNEL_KEYWORDS = SAGEATTENTION_KEYWORDS | SDPA_KEYWORDS


def _check(func: str, q: Tensor, k: Tensor, v: Tensor, kwargs) -> None:
    _check_kwargs(func, kwargs, _KERNEL_KEYWORDS)
    _check_dtype(func, q, k, v)


def sageattn(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
             sm_scale: Optional[float] = None, return_lse: bool = False, **kwargs: Any):
    """SageAttention 2.2.0's ``sageattn`` (see ``torch_sage.sageattn``); raises for float32, a non-None attn_mask
    and an unknown keyword."""
    _check_dtype("sageattn", q, k, v)
    return _sageattn_as("sageattn", q, k, v, tensor_layout, is_causal, sm_scale, return_lse, kwargs)


def sageattn_qk_int8_pv_fp16_triton(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND",
                                    quantization_backend: str = "triton", is_causal: bool = False,
                                    sm_scale: Optional[float] = None, smooth_k: bool = True,
                                    return_lse: bool = False, **kwargs: Any):
    """INT8 Q.K, fp16 P.V: torch_sage's accurate mode."""
    func = "sageattn_qk_int8_pv_fp16_triton"
    _check(func, q, k, v, kwargs)
    return _sageattn_as(func, q, k, v, tensor_layout, is_causal, sm_scale, return_lse,
                        dict(kwargs, quantization_backend=quantization_backend, smooth_k=smooth_k, pv_mode="fp16"))


def _cuda_kernel(func: str, accum_dtypes, pv_mode: str, q: Tensor, k: Tensor, v: Tensor, tensor_layout: str,
                 is_causal: bool, qk_quant_gran: str, sm_scale: Optional[float], pv_accum_dtype: str,
                 smooth_k: bool, smooth_v: bool, return_lse: bool, kwargs):
    """The body of SageAttention's CUDA kernel functions: their checks, then torch_sage in the named mode."""
    _check(func, q, k, v, kwargs)
    _check_choice(func, "pv_accum_dtype", pv_accum_dtype, accum_dtypes)  # each kernel function has its own values
    return _sageattn_as(func, q, k, v, tensor_layout, is_causal, sm_scale, return_lse,
                        dict(kwargs, qk_quant_gran=qk_quant_gran, smooth_k=smooth_k, smooth_v=smooth_v,
                             pv_mode=pv_mode))


def sageattn_qk_int8_pv_fp16_cuda(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND",
                                  is_causal: bool = False, qk_quant_gran: str = "per_thread",
                                  sm_scale: Optional[float] = None, pv_accum_dtype: str = "fp32",
                                  smooth_k: bool = True, smooth_v: bool = False, return_lse: bool = False,
                                  **kwargs: Any):
    """INT8 Q.K, fp16 P.V: torch_sage's accurate mode (``pv_accum_dtype`` and ``smooth_v`` only tune
    SageAttention's CUDA kernel; torch_sage always accumulates in float32)."""
    return _cuda_kernel("sageattn_qk_int8_pv_fp16_cuda", ("fp16", "fp16+fp32", "fp32"), "fp16", q, k, v,
                        tensor_layout, is_causal, qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, smooth_v,
                        return_lse, kwargs)


def sageattn_qk_int8_pv_fp8_cuda(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND",
                                 is_causal: bool = False, qk_quant_gran: str = "per_thread",
                                 sm_scale: Optional[float] = None, pv_accum_dtype: str = "fp32+fp16",
                                 smooth_k: bool = True, smooth_v: bool = False, return_lse: bool = False,
                                 **kwargs: Any):
    """INT8 Q.K, fp8 P.V: torch_sage's fast mode."""
    return _cuda_kernel("sageattn_qk_int8_pv_fp8_cuda", ("fp32", "fp32+fp32", "fp32+fp16"), "fp8", q, k, v,
                        tensor_layout, is_causal, qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, smooth_v,
                        return_lse, kwargs)


def sageattn_qk_int8_pv_fp8_cuda_sm90(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND",
                                      is_causal: bool = False, qk_quant_gran: str = "per_thread",
                                      sm_scale: Optional[float] = None, pv_accum_dtype: str = "fp32+fp32",
                                      smooth_k: bool = True, return_lse: bool = False, **kwargs: Any):
    """INT8 Q.K, fp8 P.V: torch_sage's fast mode."""
    # smooth_v is not a parameter of this one (SageAttention drops it): its value is checked all the same
    smooth_v = kwargs.pop("smooth_v", False)
    return _cuda_kernel("sageattn_qk_int8_pv_fp8_cuda_sm90", ("fp32", "fp32+fp32", "fp32+fp16"), "fp8", q, k, v,
                        tensor_layout, is_causal, qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, smooth_v,
                        return_lse, kwargs)


def sageattn_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                    max_seqlen_q: int, max_seqlen_k: int, is_causal: bool = False,
                    sm_scale: Optional[float] = None, smooth_k: bool = True, **kwargs: Any) -> Tensor:
    """Packed sequences: q [total_q, Hq, D], k/v [total_k, Hkv, D], sequence i at rows
    ``cu_seqlens[i]:cu_seqlens[i+1]``. Runs one torch_sage call per sequence (reads cu_seqlens on the host).
    Unlike SageAttention, which subtracts one key mean over all sequences, smooth_k uses each sequence's own
    mean; the result is the same attention either way."""
    func = "sageattn_varlen"
    _check(func, q, k, v, kwargs)
    _check_values(func, dict(is_causal=is_causal, smooth_k=smooth_k))  # here too if every sequence is empty
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError("sageattn_varlen: q, k, v must be [total_tokens, heads, head_dim]")
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if len(cq) != len(ck) or len(cq) < 1:
        raise ValueError("sageattn_varlen: cu_seqlens_q and cu_seqlens_k must have batch_size + 1 entries")
    out = torch.empty_like(q)
    for i in range(len(cq) - 1):
        qs, ks = q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]]
        if qs.shape[0] == 0:
            continue
        o = _sageattn_as(func, qs.unsqueeze(0), ks.unsqueeze(0), v[ck[i]:ck[i + 1]].unsqueeze(0), "NHD", is_causal,
                         sm_scale, False, dict(smooth_k=smooth_k))
        out[cq[i]:cq[i + 1]] = o[0]
    return out


# What the alias module offers, and this module's star-import.
FUNCTIONS = ("sageattn", "sageattn_varlen", "sageattn_qk_int8_pv_fp16_triton", "sageattn_qk_int8_pv_fp16_cuda",
             "sageattn_qk_int8_pv_fp8_cuda", "sageattn_qk_int8_pv_fp8_cuda_sm90")
__all__ = list(FUNCTIONS)
