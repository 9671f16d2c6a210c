"""``sageattn``: the call shape of SageAttention 2.2.0, so existing callers can switch by import."""
import difflib
from typing import Iterable, Optional

from torch import Tensor

from .contract import check_bool, check_choice
from .ops import attention, attention_with_lse

# SageAttention's pv_accum_dtype values: "fp32" is its fp16-PV kernel; the "+"-forms are its fp8-PV kernels.
_PV_ACCUM_TO_MODE = {"fp32": "fp16", "fp16": "fp16", "fp16+fp32": "fp16", "fp32+fp32": "fp8", "fp32+fp16": "fp8"}

# The keyword arguments of SageAttention 2.0-2.2's sageattn and of the kernel functions it dispatches to
# (sageattn_qk_int8_pv_fp16_triton, sageattn_qk_int8_pv_fp16_cuda, sageattn_qk_int8_pv_fp8_cuda,
# sageattn_qk_int8_pv_fp8_cuda_sm90). Each of them also takes **kwargs and drops whatever else it is given, so a
# misspelt keyword (is_casual=True) ran the call without it; torch_sage raises TypeError instead.
SAGEATTENTION_KEYWORDS = frozenset({"tensor_layout", "is_causal", "sm_scale", "return_lse", "smooth_k", "smooth_v",
                                    "qk_quant_gran", "pv_accum_dtype", "quantization_backend"})
# sageattn_varlen's own parameters: given to a dense function they would be dropped, and the packed batch
# attended as one sequence.
VARLEN_KEYWORDS = frozenset({"cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"})
# Keywords of F.scaled_dot_product_attention that callers pass to sageattn (ComfyUI passes attn_mask):
# accepted at the values that change nothing (None, 0), otherwise ValueError, since SageAttention ignores them.
SDPA_KEYWORDS = frozenset({"attn_mask", "dropout_p"})
# torch_sage's own: pv_mode ("auto", "fp16", "fp8") instead of pv_accum_dtype.
TORCH_SAGE_KEYWORDS = frozenset({"pv_mode"})
_KNOWN = SAGEATTENTION_KEYWORDS | SDPA_KEYWORDS | TORCH_SAGE_KEYWORDS
# The boolean keywords, and the values of the string ones (tensor_layout and pv_mode the op checks). SageAttention's
# tuning settings torch_sage ignores are checked too: a wrong value there is a caller's mistake all the same.
_BOOL_KEYWORDS = ("is_causal", "return_lse", "smooth_k", "smooth_v")
_CHOICE_KEYWORDS = {"qk_quant_gran": ("per_warp", "per_thread"), "quantization_backend": ("triton", "cuda"),
                    "pv_accum_dtype": tuple(_PV_ACCUM_TO_MODE)}


def check_kwargs(func: str, kwargs, known: Iterable[str] = _KNOWN) -> None:
    """Raise for what SageAttention would silently drop: an unknown keyword (TypeError naming the nearest known
    one), a varlen keyword given to a dense function (TypeError), a value ``check_values`` refuses, a non-None
    ``attn_mask`` or a non-zero ``dropout_p`` (ValueError)."""
    known = frozenset(known)
    for name in kwargs:
        if name in known:
            continue
        if name in VARLEN_KEYWORDS:
            raise TypeError(f"{func}() got the keyword argument {name!r} of sageattn_varlen; packed sequences go to "
                            "sageattn_varlen")
        close = difflib.get_close_matches(name, sorted(known | {"q", "k", "v"}), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{func}() got an unexpected keyword argument {name!r} (no SageAttention 2.x version knows "
                        f"it){hint}")
    check_values(func, kwargs)
    if kwargs.get("attn_mask") is not None:
        raise ValueError(f"{func}: attn_mask is not supported; use F.scaled_dot_product_attention for masked calls")
    dropout_p = kwargs.get("dropout_p")
    if dropout_p is not None and dropout_p != 0:
        raise ValueError(f"{func}: dropout_p={dropout_p} is not supported (inference only); use "
                         "F.scaled_dot_product_attention for dropout")


def check_values(func: str, settings) -> None:
    """TypeError naming the argument for a boolean SageAttention setting that is not a bool or 0 / 1, ValueError
    naming it and the accepted values for a string setting outside them (pv_accum_dtype=None means unset)."""
    for name in _BOOL_KEYWORDS:
        if name in settings:
            check_bool(func, name, settings[name])
    for name, choices in _CHOICE_KEYWORDS.items():
        if name in settings and not (name == "pv_accum_dtype" and settings[name] is None):
            check_choice(func, name, settings[name], choices)


def sageattn(q: Tensor, k: Tensor, v: Tensor, tensor_layout: str = "HND", is_causal: bool = False,
             sm_scale: Optional[float] = None, return_lse: bool = False, **kwargs):
    """Drop-in for ``sageattention.sageattn``.

    q: [B, Hq, Nq, D] ("HND") or [B, Nq, Hq, D] ("NHD"); k, v: same with Hkv heads and Nk tokens.
    Returns the attention output shaped like q, and with ``return_lse=True`` also the natural-log
    log-sum-exp [B, Hq, Nq] (float32). Keyword arguments that SageAttention knows are honoured:
    ``smooth_k`` (default True) and ``pv_accum_dtype`` (selects the fp16 or fp8 P.V mode), and torch_sage's
    ``pv_mode``; the others of SageAttention 2.x (``qk_quant_gran``, ``smooth_v``, ``quantization_backend``)
    only tune SageAttention's own kernels and are accepted and ignored. A keyword that no SageAttention 2.x
    function knows raises TypeError (SageAttention would drop it: ``is_casual=True`` ran non-causal), and so
    does a keyword of ``sageattn_varlen``; a non-None ``attn_mask`` or a non-zero ``dropout_p`` raises
    ValueError (SageAttention would ignore them). A boolean argument that is not a bool or 0 / 1 raises
    TypeError (``smooth_k="False"`` would have meant True), a string setting outside SageAttention's values
    ValueError. float32 inputs are accepted (see docs/SEMANTICS.md).
    """
    return sageattn_as("sageattn", q, k, v, tensor_layout, is_causal, sm_scale, return_lse, kwargs)


def sageattn_as(func: str, q: Tensor, k: Tensor, v: Tensor, tensor_layout: str, is_causal, sm_scale: Optional[float],
                return_lse, kwargs):
    """The body of ``sageattn``, its errors naming ``func``: the sageattention alias's functions run it under
    their own names."""
    check_kwargs(func, kwargs)
    is_causal = check_bool(func, "is_causal", is_causal)
    return_lse = check_bool(func, "return_lse", return_lse)  # a truthy non-bool returned a tuple
    smooth_k = check_bool(func, "smooth_k", kwargs.get("smooth_k", True))
    pv_mode = kwargs.get("pv_mode")
    if pv_mode is None:
        pv_mode = _PV_ACCUM_TO_MODE.get(kwargs.get("pv_accum_dtype"), "auto")
    if return_lse:
        return attention_with_lse(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)
    return attention(q, k, v, tensor_layout, is_causal, sm_scale, smooth_k, pv_mode)
