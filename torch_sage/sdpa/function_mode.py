"""``sdpa_mode()``: a TorchFunctionMode that sends eligible ``F.scaled_dot_product_attention`` calls to
``torch.ops.sage.attention`` and the others to SDPA, counting both; ``enable_sdpa()`` / ``disable_sdpa()`` for the
rest of a thread."""
import threading
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..contract import MAX_HEAD_DIM, check_bool, check_pv_mode
from ._compat import top_function_mode
from ._shared import (DEVICES, HALF, SDPAStats, extra_reason, is_tracing, note, note_unseen, sage_hnd,
                      stats_key)


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
               **extra):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, extra


def sdpa_fallback_reason(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                         enable_gqa: bool = False, *, allow_fp32: bool = False) -> Optional[str]:
    """``None`` if ``sdpa_mode`` sends this ``F.scaled_dot_product_attention`` call to torch_sage, else
    the reason it calls SDPA instead (the key counted in ``SDPAStats.fallback``)."""
    # The mode passes bools (torch's parser checked SDPA's own); a direct caller may not.
    is_causal = check_bool("sdpa_fallback_reason", "is_causal", is_causal)
    enable_gqa = check_bool("sdpa_fallback_reason", "enable_gqa", enable_gqa)
    allow_fp32 = check_bool("sdpa_fallback_reason", "allow_fp32", allow_fp32)
    if attn_mask is not None:
        return "attn_mask"
    if dropout_p != 0.0:
        return "dropout"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "grad"
    if query.is_nested or key.is_nested or value.is_nested:
        return "nested"
    if not (query.device == key.device == value.device) or query.device.type not in DEVICES:
        return "device"
    if not (query.dtype == key.dtype == value.dtype):
        return "dtype"
    if query.dtype not in HALF and not (allow_fp32 and query.dtype == torch.float32):
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


class SageSDPAMode(TorchFunctionMode):
    """Sends eligible ``F.scaled_dot_product_attention`` calls to ``torch.ops.sage.attention``.

    Eligible: no ``attn_mask`` (``is_causal`` is fine), ``dropout_p == 0``, no gradient needed (grad mode
    off, or no input requires grad), float16 / bfloat16 (float32 only with ``allow_fp32=True``: it is then
    computed as bfloat16, a precision an fp32 model may not expect), the same dtype and a CPU or CUDA/ROCm
    device for q, k and v, head_dim 1..256 and the same for q, k and v, equal batch dimensions (3-D inputs are
    one head; more than 4 dimensions are flattened into the batch), the same head count for q and k/v or ``enable_gqa=True`` with a multiple.
    ``scale`` and ``is_causal`` (upper-left aligned, as SDPA) are honoured. Everything else calls SDPA.

    ``smooth_k`` and ``pv_mode`` are passed to the op (docs/SEMANTICS.md). ``stats`` (an ``SDPAStats``,
    shareable between modes) counts routed calls and fallbacks by reason.
    """

    def __init__(self, *, smooth_k: bool = True, pv_mode: str = "auto", allow_fp32: bool = False,
                 stats: Optional[SDPAStats] = None):
        super().__init__()
        check_pv_mode(pv_mode, "sdpa_mode")
        self.smooth_k = check_bool("sdpa_mode", "smooth_k", smooth_k)
        self.pv_mode = pv_mode
        self.allow_fp32 = check_bool("sdpa_mode", "allow_fp32", allow_fp32)
        self.stats = stats if stats is not None else SDPAStats()
        self._stats_key = stats_key(self.stats)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func is not F.scaled_dot_product_attention:
            if func is F.multi_head_attention_forward:
                # Its attention never reaches this mode as an SDPA call (SDPAStats.unseen says why): counted so
                # that routed=0 for an nn.MultiheadAttention model has a named cause.
                note_unseen(self._stats_key, "multi_head_attention_forward")
            return func(*args, **kwargs)
        q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, extra = _sdpa_args(*args, **kwargs)
        reason = extra_reason(extra) if extra else None  # an argument of a later torch: SDPA knows it
        if reason is None:
            reason = sdpa_fallback_reason(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                                          allow_fp32=self.allow_fp32)
        if is_tracing():  # a decision of the graph, counted once while tracing (the graph's runs are not seen)
            note(self._stats_key, reason, True)
            return func(*args, **kwargs) if reason is not None else self._sage(q, k, v, is_causal, scale)
        if reason is not None:
            self.stats._add(reason, False)
            return func(*args, **kwargs)
        try:
            out = self._sage(q, k, v, is_causal, scale)
        except Exception as e:
            # Routed only if computed: a call that raised (a bad setting, an sm_scale out of range) is an error.
            self.stats._add_to(self.stats.errors, type(e).__name__)
            raise
        self.stats._add(None, False)
        return out

    def _sage(self, q: Tensor, k: Tensor, v: Tensor, is_causal, scale) -> Tensor:
        out, _ = sage_hnd(_to_4d(q), _to_4d(k), _to_4d(v), bool(is_causal), scale, self.smooth_k, self.pv_mode,
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


def disable_sdpa() -> None:
    """Leave the mode entered by ``enable_sdpa()``, if any. Torch function modes form a stack: modes entered
    after ``enable_sdpa()`` must be left first (otherwise this raises RuntimeError and changes nothing)."""
    mode = getattr(_GLOBAL, "mode", None)
    if mode is None:
        return
    if top_function_mode(default=mode) is not mode:
        raise RuntimeError("torch_sage.disable_sdpa(): another torch function mode entered after enable_sdpa() is "
                           "still active; leave it first")
    _GLOBAL.mode = None
    mode.__exit__(None, None, None)
