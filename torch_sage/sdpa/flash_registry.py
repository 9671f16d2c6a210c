"""The "SAGE" entry of torch's flash-attention impl registry (torch >= 2.11): while active, the kernels of
``aten::_scaled_dot_product_flash_attention`` (CUDA; with ``devices=("cuda", "cpu")`` also the CPU op) run
torch_sage, and their backward raises (inference only). Registered on import, activated only when asked."""
import contextlib
import functools
import warnings
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..contract import MAX_HEAD_DIM, check_bool, check_pv_mode
from ._compat import destroy_library, impl_registry, original_kernel
from ._shared import HALF, SDPAStats, extra_reason, sage_hnd

FLASH_IMPL_NAME = "SAGE"

flash_impl_stats = SDPAStats()
"""Counts of the registered flash impl. Its kernels run in the dispatcher, below torch.compile, so a
compiled graph's calls are counted at every run (``routed`` / ``fallback``); replays of a CUDA graph are not
(its Python does not run)."""


def flash_fallback_reason(query: Tensor, key: Tensor, value: Tensor, dropout_p: float = 0.0,
                          is_causal: bool = False, return_debug_mask: bool = False,
                          attn_mask: Optional[Tensor] = None, *, cpu_op: bool = False) -> Optional[str]:
    """``None`` if the SAGE flash impl computes this call of the flash op itself, else the reason it calls
    torch's own kernel (``aten::_scaled_dot_product_flash_attention`` on CUDA, or
    ``..._for_cpu`` with ``cpu_op=True``)."""
    is_causal = check_bool("flash_fallback_reason", "is_causal", is_causal)
    return_debug_mask = check_bool("flash_fallback_reason", "return_debug_mask", return_debug_mask)
    cpu_op = check_bool("flash_fallback_reason", "cpu_op", cpu_op)
    if dropout_p != 0.0:
        return "dropout"
    if return_debug_mask:
        return "debug_mask"
    if attn_mask is not None:
        return "attn_mask"
    if query.is_nested or key.is_nested or value.is_nested:
        return "nested"
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return "shape"
    if not (query.dtype == key.dtype == value.dtype):
        return "dtype"
    if query.dtype not in HALF and not (cpu_op and query.dtype == torch.float32):
        return "dtype"
    b, hq, nq, d = query.shape
    if key.shape[0] != b or value.shape[0] != b or key.shape[1] != value.shape[1] or key.shape[2] != value.shape[2]:
        return "shape"
    if key.shape[3] != d:
        return "shape"
    if value.shape[3] != d:
        return "value_head_dim"
    if d < 1 or d > MAX_HEAD_DIM:
        return "head_dim"
    hk = key.shape[1]
    if (hq % hk != 0) if hk else hq != 0:  # hq = hk = 0 (no heads at all): an empty result (torch_sage.ops)
        return "heads"
    if is_causal and nq != key.shape[2] and not cpu_op:
        # The CUDA flash kernel aligns a non-square causal mask to the lower right, torch_sage (and SDPA's
        # is_causal) to the upper left. SDPA never sends such a call to flash; a direct call keeps its meaning.
        return "causal_lower_right"
    return None


@functools.lru_cache(maxsize=None)
def _flash_rng_spec():
    """(shape, dtype) of the philox seed and offset outputs, as this torch's meta kernel of the op gives them
    (they changed between releases and differ on ROCm), so that compiled graphs see what they were traced with."""
    try:
        t = torch.empty((1, 1, 1, 8), dtype=torch.float16, device="meta")
        res = torch.ops.aten._scaled_dot_product_flash_attention.default(t, t, t)
        return (tuple(res[6].shape), res[6].dtype), (tuple(res[7].shape), res[7].dtype)
    except Exception:  # noqa: BLE001 - no meta kernel: torch 2.11's layout
        if torch.version.hip:
            return ((), torch.long), ((), torch.long)
        return ((2,), torch.uint64), ((), torch.uint64)


def _flash_rng_outputs(device):
    (seed_shape, seed_dtype), (offset_shape, offset_dtype) = _flash_rng_spec()
    return (torch.zeros(seed_shape, dtype=seed_dtype, device=device),
            torch.zeros(offset_shape, dtype=offset_dtype, device=device))


def _like_query(out: Tensor, query: Tensor) -> Tensor:
    res = torch.empty_like(query)
    if res.stride() == out.stride():
        return out
    res.copy_(out)
    return res


def sage_scaled_dot_product_flash_attention(query: Tensor, key: Tensor, value: Tensor, dropout_p: float = 0.0,
                                            is_causal: bool = False, return_debug_mask: bool = False, *,
                                            scale: Optional[float] = None, smooth_k: bool = True,
                                            pv_mode: str = "auto"):
    """torch_sage in the contract of ``aten::_scaled_dot_product_flash_attention`` (the op that SDPA's
    flash backend calls on CUDA): q [B, Hq, Nq, D], k/v [B, Hkv, Nk, D] (GQA: Hq a multiple of Hkv).

    Returns the op's 9 outputs: output (shaped like q, strides of ``empty_like(query)``), logsumexp
    (float32 [B, Hq, Nq], natural log of the true scores ``scale * q @ k^T``), cum_seq_q / cum_seq_k
    (None), max_q = Nq, max_k = Nk, rng_state and unused (the philox seed and offset: unused without
    dropout, shaped as torch's meta kernel says), debug_attn_mask (empty). Any device with sage kernels.
    Raises ValueError for a call outside ``flash_fallback_reason``.
    """
    smooth_k = check_bool("sage_scaled_dot_product_flash_attention", "smooth_k", smooth_k)
    reason = flash_fallback_reason(query, key, value, dropout_p, is_causal, return_debug_mask)
    if reason is not None:
        raise ValueError(f"torch_sage flash impl: unsupported call ({reason})")
    out, lse = sage_hnd(query, key, value, bool(is_causal), scale, smooth_k, pv_mode, True)
    seed, offset = _flash_rng_outputs(query.device)
    debug_mask = query.new_empty((0,))
    return (_like_query(out, query), lse.contiguous(), None, None, query.shape[2], key.shape[2], seed, offset,
            debug_mask)


def sage_scaled_dot_product_flash_attention_for_cpu(query: Tensor, key: Tensor, value: Tensor,
                                                    dropout_p: float = 0.0, is_causal: bool = False, *,
                                                    attn_mask: Optional[Tensor] = None,
                                                    scale: Optional[float] = None, smooth_k: bool = True,
                                                    pv_mode: str = "auto") -> Tuple[Tensor, Tensor]:
    """torch_sage in the contract of ``aten::_scaled_dot_product_flash_attention_for_cpu`` (SDPA's CPU flash
    backend): returns (output shaped like q with ``empty_like(query)`` strides, logsumexp [B, Hq, Nq] float32
    with the strides of a transposed [B, Nq, Hq] tensor, as torch's CPU kernel). float32 is accepted (computed
    as bfloat16). Raises ValueError for a call outside ``flash_fallback_reason(..., cpu_op=True)``."""
    smooth_k = check_bool("sage_scaled_dot_product_flash_attention_for_cpu", "smooth_k", smooth_k)
    reason = flash_fallback_reason(query, key, value, dropout_p, is_causal, False, attn_mask, cpu_op=True)
    if reason is not None:
        raise ValueError(f"torch_sage flash impl: unsupported call ({reason})")
    out, lse = sage_hnd(query, key, value, bool(is_causal), scale, smooth_k, pv_mode, True)
    b, h, n, _ = query.shape
    lse_out = torch.empty((b, n, h), dtype=torch.float32, device=query.device).transpose(1, 2)
    lse_out.copy_(lse)
    return _like_query(out, query), lse_out


def _backward_error(*args, **kwargs):
    raise RuntimeError(
        "torch_sage: the SAGE flash attention impl is inference-only and has no backward. Run the model under "
        "torch.no_grad() / torch.inference_mode(), or call torch.nn.attention.restore_flash_attention_impl() "
        "(torch_sage.sdpa.deactivate_flash_impl()) before training.")


def _fallback(original, reason, keyset, *args, **kwargs):
    if original is None:
        raise RuntimeError(f"torch_sage flash impl: unsupported call ({reason}) and torch has no kernel to fall "
                           "back to (torch.library.get_kernel is missing or found none)")
    return original.call_boxed(keyset, *args, **kwargs)


def _counted(compute, *args, **kwargs):
    """compute's result, counted as routed; a call that raised is counted in ``errors`` instead, as sdpa_mode does."""
    try:
        res = compute(*args, **kwargs)
    except Exception as e:
        flash_impl_stats._add_to(flash_impl_stats.errors, type(e).__name__)
        raise
    flash_impl_stats._add(None, False)
    return res


def _make_cuda_forward(original, options):
    def forward(keyset, query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None,
                **extra):
        reason = extra_reason(extra) or flash_fallback_reason(query, key, value, dropout_p, is_causal,
                                                               return_debug_mask)
        if reason is not None:
            flash_impl_stats._add(reason, False)
            return _fallback(original, reason, keyset, query, key, value, dropout_p, is_causal, return_debug_mask,
                             scale=scale, **extra)
        return _counted(sage_scaled_dot_product_flash_attention, query, key, value, dropout_p, is_causal,
                        return_debug_mask, scale=scale, **options)
    return forward


def _make_cpu_forward(original, options):
    def forward(keyset, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, **extra):
        reason = extra_reason(extra) or flash_fallback_reason(query, key, value, dropout_p, is_causal, False,
                                                               attn_mask, cpu_op=True)
        if reason is not None:
            flash_impl_stats._add(reason, False)
            return _fallback(original, reason, keyset, query, key, value, dropout_p, is_causal, attn_mask=attn_mask,
                             scale=scale, **extra)
        return _counted(sage_scaled_dot_product_flash_attention_for_cpu, query, key, value, dropout_p, is_causal,
                        scale=scale, **options)
    return forward


# (forward op, backward op, forward kernel factory) per device the impl can take over.
_FLASH_OPS = {
    "cuda": ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
             _make_cuda_forward),
    "cpu": ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
            _make_cpu_forward),
}


class _FlashHandle:
    """What the registry keeps while SAGE is active (its ``remove()`` undoes the registration)."""

    def __init__(self, library):
        self.library = library

    def remove(self) -> None:
        lib, self.library = self.library, None
        destroy_library(lib)


def _register_kernels(registrations: Sequence[Tuple[str, str, str]], smooth_k: bool = True,
                      pv_mode: str = "auto") -> "torch.library.Library":
    """registrations: (device kind of _FLASH_OPS, dispatch key, "forward" / "backward" / "both")."""
    options = {"smooth_k": bool(smooth_k), "pv_mode": pv_mode}
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        for kind, dispatch_key, which in registrations:
            fwd_op, bwd_op, make_forward = _FLASH_OPS[kind]
            if which in ("forward", "both"):
                lib.impl(fwd_op, make_forward(original_kernel(fwd_op, dispatch_key), options), dispatch_key,
                         with_keyset=True)
            if which in ("backward", "both"):
                lib.impl(bwd_op, _backward_error, dispatch_key)
    return lib


# What the next activation registers: activate_flash_impl sets it for the duration of its call, a plain
# torch.nn.attention.activate_flash_attention_impl("SAGE") gets these defaults.
_DEFAULT_SETTINGS = {"devices": ("cuda",), "smooth_k": True, "pv_mode": "auto"}
_SETTINGS = dict(_DEFAULT_SETTINGS)


def _register_fn(devices: Optional[Sequence[str]] = None) -> _FlashHandle:
    """The registry's register_fn: replaces the flash kernels (forward and backward) of ``devices``."""
    devices = tuple(devices if devices is not None else _SETTINGS["devices"])
    for d in devices:
        if d not in _FLASH_OPS:
            raise ValueError(f"devices must be among {sorted(_FLASH_OPS)}, got {d!r}")
    options = {"smooth_k": _SETTINGS["smooth_k"], "pv_mode": _SETTINGS["pv_mode"]}
    lib = _register_kernels([(d, d.upper(), "both") for d in devices], **options)
    return _FlashHandle(lib)


def register_flash_impl(name: str = FLASH_IMPL_NAME) -> bool:
    """Register torch_sage in torch's flash-attention impl registry (done on import). Activates nothing.
    Returns False on a torch without the registry."""
    reg = impl_registry()
    if reg is None:
        return False
    try:
        reg.register_flash_attention_impl(name, register_fn=_register_fn)
    except TypeError:  # a registry whose register function takes register_fn positionally
        reg.register_flash_attention_impl(name, _register_fn)
    return True


_OWN_ACTIVE = None  # the handle when the registry is missing and activate_flash_impl registered by itself


def activate_flash_impl(devices: Sequence[str] = ("cuda",), *, smooth_k: bool = True,
                        pv_mode: str = "auto") -> None:
    """``torch.nn.attention.activate_flash_attention_impl("SAGE")`` with options: ``devices`` whose flash
    kernels torch_sage takes over (default CUDA only, as the registry does; add "cpu" to route SDPA's CPU
    flash backend too), and the ``smooth_k`` / ``pv_mode`` of the op. Works on a torch without the registry
    too (then torch_sage registers the kernels itself)."""
    global _OWN_ACTIVE
    check_pv_mode(pv_mode, "activate_flash_impl")
    smooth_k = check_bool("activate_flash_impl", "smooth_k", smooth_k)
    _SETTINGS.update(devices=tuple(devices), smooth_k=smooth_k, pv_mode=pv_mode)
    try:
        reg = impl_registry()
        if reg is None:
            deactivate_flash_impl()
            _OWN_ACTIVE = _register_fn()
            return
        if FLASH_IMPL_NAME not in reg.list_flash_attention_impls():
            register_flash_impl()
        reg.activate_flash_attention_impl(FLASH_IMPL_NAME)
    finally:
        _SETTINGS.update(_DEFAULT_SETTINGS)


def deactivate_flash_impl() -> None:
    """Restore torch's own flash kernels if SAGE is the active impl (otherwise do nothing)."""
    global _OWN_ACTIVE
    if _OWN_ACTIVE is not None:
        _OWN_ACTIVE.remove()
        _OWN_ACTIVE = None
    reg = impl_registry()
    if reg is not None and reg.current_flash_attention_impl() == FLASH_IMPL_NAME:
        reg.restore_flash_attention_impl()


def flash_impl_active() -> bool:
    """Whether the SAGE flash impl is active."""
    reg = impl_registry()
    return _OWN_ACTIVE is not None or (reg is not None and reg.current_flash_attention_impl() == FLASH_IMPL_NAME)


@contextlib.contextmanager
def flash_impl(devices: Sequence[str] = ("cuda",), **options):
    """``with torch_sage.sdpa.flash_impl(): ...``: SAGE active inside the block; afterwards torch's default
    kernels (or the impl that was active before, re-activated)."""
    reg = impl_registry()
    previous = reg.current_flash_attention_impl() if reg is not None else None
    activate_flash_impl(devices, **options)
    try:
        yield
    finally:
        deactivate_flash_impl()
        if previous is not None and previous != FLASH_IMPL_NAME:
            reg.activate_flash_attention_impl(previous)


register_flash_impl()
