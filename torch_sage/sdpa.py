"""Route ``F.scaled_dot_product_attention`` to torch_sage.

Two ways, both opt-in (importing torch_sage changes nothing):

1. ``sdpa_mode()``: a ``TorchFunctionMode`` that sends every eligible
   ``F.scaled_dot_product_attention`` call to ``torch.ops.sage.attention`` and every other call to
   SDPA itself, counting both (``mode.stats``). It works on every supported torch (2.11 to 2.15) and
   device, in eager mode and inside ``torch.compile(fullgraph=True)``, without graph breaks::

       with torch_sage.sdpa_mode() as mode:
           out = model(x)
       print(mode.stats)        # SDPAStats(routed=24, fallback={'attn_mask': 2})

   ``enable_sdpa()`` / ``disable_sdpa()`` do the same for the rest of the program (this thread).

2. The flash-attention implementation registry of torch >= 2.11
   (``torch.nn.attention.register_flash_attention_impl``). torch_sage registers itself there as
   ``"SAGE"`` on import, without activating::

       torch.nn.attention.activate_flash_attention_impl("SAGE")
       ...
       torch.nn.attention.restore_flash_attention_impl()

   The registry only reaches SDPA's CUDA flash backend: activating replaces the CUDA kernels of
   ``aten::_scaled_dot_product_flash_attention`` (forward) and its backward, as torch's own FA3/FA4
   entries do. SDPA calls that torch sends elsewhere (attention masks, float32, the efficient, cuDNN or
   math backends, CPU) are unchanged; calls the flash op gets that torch_sage cannot compute (dropout, ...)
   run torch's own kernel. Inference only: while SAGE is active the flash backward raises.
   ``activate_flash_impl(devices=("cuda", "cpu"))`` additionally replaces the CPU flash kernel
   (``aten::_scaled_dot_product_flash_attention_for_cpu``): slow (the CPU kernels of torch_sage are exact
   reference code), meant for testing the path on a machine without a GPU.

Which calls are routed, and why the others fall back: ``sdpa_fallback_reason`` (the mode) and
``flash_fallback_reason`` (the flash impl) return ``None`` or the reason key used in the stats.
"""
import contextlib
import functools
import threading
import warnings
import weakref
from collections import Counter
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

__all__ = [
    "FLASH_IMPL_NAME",
    "SDPAStats",
    "SageSDPAMode",
    "sdpa_mode",
    "enable_sdpa",
    "disable_sdpa",
    "sdpa_fallback_reason",
    "flash_fallback_reason",
    "flash_impl_stats",
    "register_flash_impl",
    "activate_flash_impl",
    "deactivate_flash_impl",
    "flash_impl",
    "flash_impl_active",
    "sage_scaled_dot_product_flash_attention",
    "sage_scaled_dot_product_flash_attention_for_cpu",
]

FLASH_IMPL_NAME = "SAGE"
MAX_HEAD_DIM = 256
_HALF = (torch.float16, torch.bfloat16)
_DEVICES = ("cpu", "cuda")  # device types with sage kernels (a ROCm GPU is "cuda" to torch)


# ----------------------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------------------

class SDPAStats:
    """How many attention calls went to torch_sage and, for the others, why not.

    ``routed`` / ``fallback`` (a Counter keyed by reason) count calls made in eager mode, one per call.
    ``compiled_routed`` / ``compiled_fallback`` count decisions taken while torch.compile or torch.export
    traced a call: once per traced call site and compilation, not per run of the compiled graph (the
    decision is part of the graph and cannot change between runs).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.routed = 0
        self.fallback = Counter()
        self.compiled_routed = 0
        self.compiled_fallback = Counter()

    def _add(self, reason: Optional[str], compiled: bool) -> None:
        with self._lock:
            if compiled:
                if reason is None:
                    self.compiled_routed += 1
                else:
                    self.compiled_fallback[reason] += 1
            elif reason is None:
                self.routed += 1
            else:
                self.fallback[reason] += 1

    def as_dict(self) -> dict:
        return {"routed": self.routed, "fallback": dict(self.fallback), "compiled_routed": self.compiled_routed,
                "compiled_fallback": dict(self.compiled_fallback)}

    def __repr__(self):
        s = f"SDPAStats(routed={self.routed}, fallback={dict(self.fallback)}"
        if self.compiled_routed or self.compiled_fallback:
            s += f", compiled_routed={self.compiled_routed}, compiled_fallback={dict(self.compiled_fallback)}"
        return s + ")"


_STATS = weakref.WeakValueDictionary()  # id -> SDPAStats, so traced code can name a stats object by a constant


def _stats_key(stats: SDPAStats) -> int:
    key = id(stats)
    _STATS[key] = stats
    return key


def _note(stats_key: int, reason: Optional[str], compiled: bool) -> bool:
    # Under torch.compile this runs once, while tracing (its result is a constant of the graph): a counter
    # bumped inside traced code would otherwise be guarded on and recompile at every call.
    stats = _STATS.get(stats_key)
    if stats is not None:
        stats._add(reason, compiled)
    return True


# What torch.compiler.assume_constant_result sets; the decorator itself imports torch._dynamo (1-5 s) at import.
_note._dynamo_marked_constant = True


def _is_tracing() -> bool:
    return torch.compiler.is_compiling()


# ----------------------------------------------------------------------------------------------------------
# 1. The TorchFunctionMode
# ----------------------------------------------------------------------------------------------------------

def _extra_reason(extra) -> Optional[str]:
    # Arguments a later torch may add to the op's schema: torch_sage computes the call only while they are unset.
    for name, value in extra.items():
        if value is not None and value is not False and not (isinstance(value, (int, float)) and value == 0):
            return f"argument:{name}"
    return None


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
               **extra):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, extra


def sdpa_fallback_reason(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                         enable_gqa: bool = False, *, allow_fp32: bool = False) -> Optional[str]:
    """``None`` if ``sdpa_mode`` sends this ``F.scaled_dot_product_attention`` call to torch_sage, else
    the reason it calls SDPA instead (the key counted in ``SDPAStats.fallback``)."""
    if attn_mask is not None:
        return "attn_mask"
    if dropout_p != 0.0:
        return "dropout"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "grad"
    if query.is_nested or key.is_nested or value.is_nested:
        return "nested"
    if not (query.device == key.device == value.device) or query.device.type not in _DEVICES:
        return "device"
    if not (query.dtype == key.dtype == value.dtype):
        return "dtype"
    if query.dtype not in _HALF and not (allow_fp32 and query.dtype == torch.float32):
        return "dtype"
    nd = query.dim()
    if nd < 3 or key.dim() != nd or value.dim() != nd:
        return "shape"
    if query.shape[:-3] != key.shape[:-3] or key.shape[:-2] != value.shape[:-2]:
        return "shape"  # broadcast batch dimensions
    if nd == 3:
        hq = hk = 1
        if query.shape[0] != key.shape[0]:
            return "shape"
    else:
        hq, hk = query.shape[-3], key.shape[-3]
    d = query.shape[-1]
    if key.shape[-1] != d or key.shape[-2] != value.shape[-2]:
        return "shape"
    if value.shape[-1] != d:
        return "value_head_dim"
    if d < 1 or d > MAX_HEAD_DIM:
        return "head_dim"
    if hq != hk and not (enable_gqa and hk > 0 and hq % hk == 0):
        return "heads"
    return None


def _to_4d(t: Tensor) -> Tensor:
    if t.dim() == 3:
        return t.unsqueeze(1)
    if t.dim() > 4:
        return t.reshape((-1,) + tuple(t.shape[-3:]))
    return t


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _nhd_strided(t: Tensor) -> bool:
    """A [B, H, N, D] tensor laid out as a contiguous [B, N, H, D] one, and not also contiguous as it is."""
    b, h, n, d = t.shape
    s = t.stride()
    if h == 1 or n == 1:
        return False
    return s[3] == 1 and s[1] == d and s[2] == h * d and (b == 1 or s[0] == n * h * d)


def _sage_hnd(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: Optional[float], smooth_k: bool,
              pv_mode: str, with_lse: bool):
    """sage attention of [B, H, N, D] tensors, returning the output [B, H, N, D] (with NHD memory order when q
    has it, as SDPA's flash kernels return it) and, with ``with_lse``, lse [B, H, N] float32."""
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    nhd = _nhd_strided(q)
    if nhd:  # [B, H, N, D] views of [B, N, H, D] tensors: the usual case (q = x.view(B, N, H, D).transpose(1, 2))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    layout = "NHD" if nhd else "HND"
    if with_lse:
        out, lse = torch.ops.sage.attention_with_lse(q, k, v, layout, is_causal, scale, smooth_k, pv_mode)
    else:
        out, lse = torch.ops.sage.attention(q, k, v, layout, is_causal, scale, smooth_k, pv_mode), None
    return (out.transpose(1, 2) if nhd else out), lse


class SageSDPAMode(TorchFunctionMode):
    """Sends eligible ``F.scaled_dot_product_attention`` calls to ``torch.ops.sage.attention``.

    Eligible: no ``attn_mask`` (``is_causal`` is fine), ``dropout_p == 0``, no gradient needed (grad mode
    off, or no input requires grad), float16 / bfloat16 (float32 only with ``allow_fp32=True``: it is then
    computed as bfloat16, a precision an fp32 model may not expect), the same dtype and a CPU or CUDA/ROCm
    device for q, k and v, head_dim 1..256 and the same for q, k and v, equal batch dimensions (3-D inputs are one head; more than 4 dimensions are
    flattened into the batch), the same head count for q and k/v or ``enable_gqa=True`` with a multiple.
    ``scale`` and ``is_causal`` (upper-left aligned, as SDPA) are honoured. Everything else calls SDPA.

    ``smooth_k`` and ``pv_mode`` are passed to the op (docs/SEMANTICS.md). ``stats`` (an ``SDPAStats``,
    shareable between modes) counts routed calls and fallbacks by reason.
    """

    def __init__(self, *, smooth_k: bool = True, pv_mode: str = "auto", allow_fp32: bool = False,
                 stats: Optional[SDPAStats] = None):
        super().__init__()
        if pv_mode not in ("auto", "fp16", "fp8"):
            raise ValueError(f'pv_mode must be "auto", "fp16" or "fp8", got {pv_mode!r}')
        self.smooth_k = bool(smooth_k)
        self.pv_mode = pv_mode
        self.allow_fp32 = bool(allow_fp32)
        self.stats = stats if stats is not None else SDPAStats()
        self._stats_key = _stats_key(self.stats)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, extra = _sdpa_args(*args, **kwargs)
        reason = _extra_reason(extra) if extra else None  # an argument of a later torch: SDPA knows it
        if reason is None:
            reason = sdpa_fallback_reason(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                          allow_fp32=self.allow_fp32)
        _note(self._stats_key, reason, _is_tracing())
        if reason is not None:
            return func(*args, **kwargs)
        out, _ = _sage_hnd(_to_4d(q), _to_4d(k), _to_4d(v), bool(is_causal), scale, self.smooth_k, self.pv_mode,
                           False)
        return out if q.dim() == 4 else out.reshape(q.shape)


def sdpa_mode(*, smooth_k: bool = True, pv_mode: str = "auto", allow_fp32: bool = False,
              stats: Optional[SDPAStats] = None) -> SageSDPAMode:
    """``with torch_sage.sdpa_mode() as mode: ...``: route eligible SDPA calls to torch_sage inside the block
    (see ``SageSDPAMode``); ``mode.stats`` says what was routed."""
    return SageSDPAMode(smooth_k=smooth_k, pv_mode=pv_mode, allow_fp32=allow_fp32, stats=stats)


_GLOBAL = threading.local()


def enable_sdpa(**kwargs) -> SageSDPAMode:
    """Enter a ``SageSDPAMode`` until ``disable_sdpa()`` (in this thread; torch function modes are per
    thread). Calling it again replaces the active one. Returns the mode (its ``stats``)."""
    disable_sdpa()
    mode = SageSDPAMode(**kwargs)
    mode.__enter__()
    _GLOBAL.mode = mode
    return mode


def _top_function_mode():
    try:
        n = torch._C._len_torch_function_stack()
        return torch._C._get_function_stack_at(n - 1) if n > 0 else None
    except AttributeError:  # private API moved: trust the caller
        return getattr(_GLOBAL, "mode", None)


def disable_sdpa() -> None:
    """Leave the mode entered by ``enable_sdpa()``, if any. Torch function modes form a stack: modes entered
    after ``enable_sdpa()`` must be left first (otherwise this raises RuntimeError and changes nothing)."""
    mode = getattr(_GLOBAL, "mode", None)
    if mode is None:
        return
    if _top_function_mode() is not mode:
        raise RuntimeError("torch_sage.disable_sdpa(): another torch function mode entered after enable_sdpa() is "
                           "still active; leave it first")
    _GLOBAL.mode = None
    mode.__exit__(None, None, None)


# ----------------------------------------------------------------------------------------------------------
# 2. The flash-attention implementation registry
# ----------------------------------------------------------------------------------------------------------

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
    if query.dtype not in _HALF and not (cpu_op and query.dtype == torch.float32):
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
    if hk == 0 or hq % hk != 0:
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
    reason = flash_fallback_reason(query, key, value, dropout_p, is_causal, return_debug_mask)
    if reason is not None:
        raise ValueError(f"torch_sage flash impl: unsupported call ({reason})")
    out, lse = _sage_hnd(query, key, value, bool(is_causal), scale, smooth_k, pv_mode, True)
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
    reason = flash_fallback_reason(query, key, value, dropout_p, is_causal, False, attn_mask, cpu_op=True)
    if reason is not None:
        raise ValueError(f"torch_sage flash impl: unsupported call ({reason})")
    out, lse = _sage_hnd(query, key, value, bool(is_causal), scale, smooth_k, pv_mode, True)
    b, h, n, _ = query.shape
    lse_out = torch.empty((b, n, h), dtype=torch.float32, device=query.device).transpose(1, 2)
    lse_out.copy_(lse)
    return _like_query(out, query), lse_out


def _backward_error(*args, **kwargs):
    raise RuntimeError(
        "torch_sage: the SAGE flash attention impl is inference-only and has no backward. Run the model under "
        "torch.no_grad() / torch.inference_mode(), or call torch.nn.attention.restore_flash_attention_impl() "
        "(torch_sage.sdpa.deactivate_flash_impl()) before training.")


def _original_kernel(op: str, key: str):
    get_kernel = getattr(torch.library, "get_kernel", None)
    if get_kernel is None:
        return None
    try:
        return get_kernel(f"aten::{op}", key)
    except Exception:  # noqa: BLE001 - no kernel to fall back to: unsupported calls raise instead
        return None


def _fallback(original, reason, keyset, *args, **kwargs):
    if original is None:
        raise RuntimeError(f"torch_sage flash impl: unsupported call ({reason}) and torch has no kernel to fall "
                           "back to (torch.library.get_kernel is missing or found none)")
    return original.call_boxed(keyset, *args, **kwargs)


def _make_cuda_forward(original, options):
    def forward(keyset, query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None,
                **extra):
        reason = _extra_reason(extra) or flash_fallback_reason(query, key, value, dropout_p, is_causal,
                                                               return_debug_mask)
        flash_impl_stats._add(reason, False)
        if reason is not None:
            return _fallback(original, reason, keyset, query, key, value, dropout_p, is_causal, return_debug_mask,
                             scale=scale, **extra)
        return sage_scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask,
                                                       scale=scale, **options)
    return forward


def _make_cpu_forward(original, options):
    def forward(keyset, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None, **extra):
        reason = _extra_reason(extra) or flash_fallback_reason(query, key, value, dropout_p, is_causal, False,
                                                               attn_mask, cpu_op=True)
        flash_impl_stats._add(reason, False)
        if reason is not None:
            return _fallback(original, reason, keyset, query, key, value, dropout_p, is_causal, attn_mask=attn_mask,
                             scale=scale, **extra)
        return sage_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, scale=scale,
                                                               **options)
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

    def __init__(self, library, devices, options):
        self.library = library
        self.devices = devices
        self.options = options

    def remove(self) -> None:
        lib, self.library = self.library, None
        if lib is not None and hasattr(lib, "_destroy"):
            lib._destroy()


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
                lib.impl(fwd_op, make_forward(_original_kernel(fwd_op, dispatch_key), options), dispatch_key,
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
    return _FlashHandle(lib, devices, options)


def _registry():
    attn = torch.nn.attention
    names = ("register_flash_attention_impl", "activate_flash_attention_impl", "restore_flash_attention_impl",
             "current_flash_attention_impl", "list_flash_attention_impls")
    return attn if all(hasattr(attn, n) for n in names) else None


def register_flash_impl(name: str = FLASH_IMPL_NAME) -> bool:
    """Register torch_sage in torch's flash-attention impl registry (done on import). Activates nothing.
    Returns False on a torch without the registry."""
    reg = _registry()
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
    if pv_mode not in ("auto", "fp16", "fp8"):
        raise ValueError(f'pv_mode must be "auto", "fp16" or "fp8", got {pv_mode!r}')
    _SETTINGS.update(devices=tuple(devices), smooth_k=bool(smooth_k), pv_mode=pv_mode)
    try:
        reg = _registry()
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
    reg = _registry()
    if reg is not None and reg.current_flash_attention_impl() == FLASH_IMPL_NAME:
        reg.restore_flash_attention_impl()


def flash_impl_active() -> bool:
    """Whether the SAGE flash impl is active."""
    reg = _registry()
    return _OWN_ACTIVE is not None or (reg is not None and reg.current_flash_attention_impl() == FLASH_IMPL_NAME)


@contextlib.contextmanager
def flash_impl(devices: Sequence[str] = ("cuda",), **options):
    """``with torch_sage.sdpa.flash_impl(): ...``: SAGE active inside the block; afterwards torch's default
    kernels (or the impl that was active before, re-activated)."""
    reg = _registry()
    previous = reg.current_flash_attention_impl() if reg is not None else None
    activate_flash_impl(devices, **options)
    try:
        yield
    finally:
        deactivate_flash_impl()
        if previous is not None and previous != FLASH_IMPL_NAME:
            reg.activate_flash_attention_impl(previous)


register_flash_impl()
