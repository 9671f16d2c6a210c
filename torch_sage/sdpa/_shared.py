"""What both SDPA routes share: the call counters (SDPAStats), the dtypes and devices torch_sage computes, and
the call of the sage op on [B, H, N, D] tensors."""
import threading
import weakref
from collections import Counter
from typing import Optional

import torch
from torch import Tensor

from .. import ops
from ._compat import mark_constant_result

HALF = (torch.float16, torch.bfloat16)
DEVICES = ("cpu", "cuda")  # device types with sage kernels (a ROCm GPU is "cuda" to torch)


class SDPAStats:
    """How many attention calls went to torch_sage and, for the others, why not.

    ``routed`` / ``fallback`` (a Counter keyed by reason) count calls made in eager mode, one per call.
    ``errors`` (a Counter keyed by exception type) counts eager calls that torch_sage took and that raised (a
    bad setting, an sm_scale out of range): they are not in ``routed``. A call sent to SDPA is in ``fallback``
    whether or not SDPA raised.
    ``compiled_routed`` / ``compiled_fallback`` count decisions taken while torch.compile or torch.export
    traced a call: once per traced call site and compilation, not per run of the compiled graph (the
    decision is part of the graph and cannot change between runs).
    ``unseen`` (a Counter keyed by function; in eager mode one per call, while tracing one per traced call site)
    counts attention that sdpa_mode saw computed without an SDPA call it could route. The one key so far,
    ``multi_head_attention_forward``, is ``F.multi_head_attention_forward``, which ``nn.MultiheadAttention`` and
    the ``nn.Transformer*`` layers call (an active mode turns their native fast path off): with
    ``need_weights=True``, MHA's default, it computes the softmax itself; otherwise it calls SDPA from within the
    mode's own handling of the outer call, and a torch function mode is off while it handles a call.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.routed = 0
        self.fallback = Counter()
        self.compiled_routed = 0
        self.compiled_fallback = Counter()
        self.errors = Counter()
        self.unseen = Counter()

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

    def _add_to(self, counter: Counter, key: str) -> None:
        with self._lock:
            counter[key] += 1

    def as_dict(self) -> dict:
        return {"routed": self.routed, "fallback": dict(self.fallback), "compiled_routed": self.compiled_routed,
                "compiled_fallback": dict(self.compiled_fallback), "errors": dict(self.errors),
                "unseen": dict(self.unseen)}

    def __repr__(self):
        s = f"SDPAStats(routed={self.routed}, fallback={dict(self.fallback)}"
        if self.compiled_routed or self.compiled_fallback:
            s += f", compiled_routed={self.compiled_routed}, compiled_fallback={dict(self.compiled_fallback)}"
        for name in ("errors", "unseen"):  # only when there are any, as the compiled counts
            if getattr(self, name):
                s += f", {name}={dict(getattr(self, name))}"
        return s + ")"


_STATS = weakref.WeakValueDictionary()  # id -> SDPAStats, so traced code can name a stats object by a constant


def stats_key(stats: SDPAStats) -> int:
    key = id(stats)
    _STATS[key] = stats
    return key


@mark_constant_result
def note(stats_key: int, reason: Optional[str], compiled: bool) -> bool:
    # Under torch.compile this runs once, while tracing (its result is a constant of the graph): a counter
    # bumped inside traced code would otherwise be guarded on and recompile at every call.
    stats = _STATS.get(stats_key)
    if stats is not None:
        stats._add(reason, compiled)
    return True


@mark_constant_result
def note_unseen(stats_key: int, name: str) -> bool:
    # As note: run once while tracing, so that a traced call site counts once per compilation.
    stats = _STATS.get(stats_key)
    if stats is not None:
        stats._add_to(stats.unseen, name)
    return True


def is_tracing() -> bool:
    return torch.compiler.is_compiling()


def extra_reason(extra) -> Optional[str]:
    # Arguments a later torch may add to the op's schema: torch_sage computes the call only while they are unset.
    for name, value in extra.items():
        if value is not None and value is not False and not (isinstance(value, (int, float)) and value == 0):
            return f"argument:{name}"
    return None


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _nhd_strided(t: Tensor) -> bool:
    """A [B, H, N, D] tensor laid out as a contiguous [B, N, H, D] one, and not also contiguous as it is."""
    b, h, n, d = t.shape
    s = t.stride()
    if h == 1 or n == 1:
        return False
    return s[3] == 1 and s[1] == d and s[2] == h * d and (b == 1 or s[0] == n * h * d)


def sage_hnd(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: Optional[float], smooth_k: bool,
             pv_mode: str, with_lse: bool):
    """sage attention of [B, H, N, D] tensors, returning the output [B, H, N, D] (with NHD memory order when q
    has it, as SDPA's flash kernels return it) and, with ``with_lse``, lse [B, H, N] float32."""
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    nhd = _nhd_strided(q)
    if nhd:  # [B, H, N, D] views of [B, N, H, D] tensors: the usual case (q = x.view(B, N, H, D).transpose(1, 2))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    layout = "NHD" if nhd else "HND"
    if with_lse:  # through ops.py, which also answers inputs without heads (the op refuses them)
        out, lse = ops.attention_with_lse(q, k, v, layout, is_causal, scale, smooth_k, pv_mode)
    else:
        out, lse = ops.attention(q, k, v, layout, is_causal, scale, smooth_k, pv_mode), None
    return (out.transpose(1, 2) if nhd else out), lse
