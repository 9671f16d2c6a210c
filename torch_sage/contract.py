"""The numeric contract of docs/SEMANTICS.md, defined once for Python.

Block sizes, head-dim padding, the [B, H, N, D] view of either layout, the shapes of the ops' outputs, the fp8
maximum and log2(e). The C++ side defines the same rules once in csrc/contract.h; test/test_contract.py compiles
that header and checks that both agree. Torch-free, so the build (build_tools/aot_build.py) and the Triton kernels
read it too.
Also the checks of the public API's boolean and enum arguments (check_bool, check_choice), which every entry point
uses.
"""
import math
import numbers
from typing import Any, Sequence, Tuple

BLOCK_Q = 128  # query tokens per int8 block (one float32 scale each)
BLOCK_K = 64  # key tokens per int8 block
MAX_HEAD_DIM = 256
HEAD_DIMS_PAD = (64, 128, 256)  # the head_dim sizes the kernels are built for
FP8_MAX = 448.0  # largest finite float8_e4m3fn
LOG2_FP8_MAX = math.log2(FP8_MAX)  # the fast mode makes p * FP8_MAX as exp2(s - m + LOG2_FP8_MAX)
LOG2E = 1.4426950408889634  # scores are computed in base 2: q is scaled by sm_scale * log2(e)
MAX_SM_SCALE = 1e6  # |sm_scale| at most this: beyond it the float32 scores can overflow (csrc/contract.h says why)
LAYOUTS = ("HND", "NHD")


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def padded_head_dim(d: int) -> int:
    """head_dim zero-padded to the smallest size in HEAD_DIMS_PAD that holds it."""
    return 64 if d <= 64 else (128 if d <= 128 else 256)


def check_layout(layout: str) -> bool:
    """True for "HND", False for "NHD"; anything else raises ValueError."""
    if layout not in LAYOUTS:
        raise ValueError(f'tensor_layout must be "HND" or "NHD", got {layout!r}')
    return layout == "HND"


def bhnd(shape: Sequence[int], layout: str) -> Tuple[int, int, int, int]:
    """(batch, heads, tokens, head_dim) of a 4-D input shaped like shape in layout."""
    b, x, y, d = shape
    return (b, x, y, d) if check_layout(layout) else (b, y, x, d)


def bhnd_strides(strides: Sequence[int], layout: str) -> Tuple[int, int, int]:
    """Element strides (batch, heads, tokens) of the [B, H, N, D] view of a tensor with these strides."""
    return (strides[0], strides[1], strides[2]) if check_layout(layout) else (strides[0], strides[2], strides[1])


def layout_shape(b: int, h: int, n: int, d: int, layout: str) -> Tuple[int, int, int, int]:
    """The shape in layout of a [B, H, N, D] tensor: the attention output's shape."""
    return (b, h, n, d) if check_layout(layout) else (b, n, h, d)


def quant_qk_shapes(q_bhnd, k_bhnd, smooth_k: bool):
    """Shapes of sage::quant_qk_int8's outputs (q_int8, q_scale, k_int8, k_scale, k_mean) from q's and k's
    [B, H, N, D] sizes."""
    (bq, hq, nq, d), (bk, hk, nk, _) = q_bhnd, k_bhnd
    dp, nq_pad, nk_pad = padded_head_dim(d), round_up(nq, BLOCK_Q), round_up(nk, BLOCK_K)
    return ((bq, hq, nq_pad, dp), (bq, hq, nq_pad // BLOCK_Q), (bk, hk, nk_pad, dp), (bk, hk, nk_pad // BLOCK_K),
            (bk, hk, d) if smooth_k else (0,))


def check_sm_scale(sm_scale: float) -> None:
    """Raises RuntimeError, as the C++ ops do, for an sm_scale that is not finite or beyond MAX_SM_SCALE."""
    if not (math.isfinite(sm_scale) and abs(sm_scale) <= MAX_SM_SCALE):
        raise RuntimeError(f"sage: sm_scale must be finite with |sm_scale| <= 1e6 (beyond it the float32 scores can "
                           f"overflow), got {sm_scale}")


def check_bool(func: str, name: str, value: Any) -> bool:
    """``value`` as a bool if it is a bool or an integer 0 / 1; anything else raises TypeError naming the argument.
    Why: ``bool()`` of any non-empty string is True (``smooth_k="False"`` meant True) and of None False, and the
    ops' schemas take None, 2 or 1.5 for a bool, so a wrong setting silently changed the result."""
    if value is True or value is False:
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):  # 0 / 1, also numpy integers: unambiguous
        return bool(value)
    raise TypeError(f"{func}: {name} must be a bool (True or False; 1 or 0 also accepted), got {value!r} of type "
                    f"{type(value).__name__}")


def check_choice(func: str, name: str, value: Any, choices: Sequence[str]) -> None:
    """Raises ValueError naming the argument and the accepted values unless ``value`` is one of ``choices``."""
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"{func}: {name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")


PV_MODES = ("auto", "fp16", "fp8")  # P.V in V's 16-bit type (accurate), in e4m3 (fast), or the arch's choice


def check_pv_mode(pv_mode: str, func: str = "torch_sage") -> None:
    """Raises ValueError for a pv_mode the ops do not know (the C++ ops check it too, at call time)."""
    check_choice(func, "pv_mode", pv_mode, PV_MODES)
