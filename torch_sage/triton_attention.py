"""Triton kernel of ``sage::qk_int8_attention`` (docs/SEMANTICS.md, "Attention kernel").

``qk_int8_attention_triton`` takes the outputs of ``sage::quant_qk_int8`` (and, in fast mode, of
``sage::quant_v_fp8``) and returns ``(out, lse)`` exactly as the C++ op does:

- scores ``s = float(int32 q_int8 . k_int8) * q_scale[row // 128] * k_scale[key // 64]`` in base 2;
- online softmax with float32 running max ``m`` and sum ``l`` (``exp2``);
- accurate mode (V float16/bfloat16): ``acc += T(p) . v`` with float32 accumulation, ``out = acc / l``;
- fast mode (V float8_e4m3fn + v_scale): ``acc += e4m3(p * 448) . v_fp8``, ``out = acc * v_scale / 448 / l``;
- ``lse = (m + log2 l) * ln 2``; a query with no key gets ``out = 0`` and ``lse = -inf``.

The kernel orders its float32 sums differently from the CPU kernel (tile-wise dots, and key blocks of
BLOCK_N tokens for the online softmax): results agree within rounding, not bit for bit.

Configuration comes from a fixed table (torch_sage/attention_configs.py), never from autotuning in the call path.
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import arch as _arch
from .attention_configs import attention_config
from .contract import BLOCK_K, BLOCK_Q, LOG2_FP8_MAX, bhnd_strides, layout_shape


@triton.jit
def _round_rne(x, MANT_BITS: tl.constexpr):
    """float32 x rounded to nearest-even at MANT_BITS mantissa bits (normal range), still float32.

    Only for TRITON_INTERPRET runs (EMULATE): the interpreter's float32 -> bfloat16 cast truncates and its
    float32 -> float8 cast drops the carry of a rounded-up mantissa (7.9 -> 4.0), so the kernel rounds first
    and the cast that follows is exact. Compiled kernels cast directly (cvt.rn).
    """
    DROP: tl.constexpr = 23 - MANT_BITS
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + ((1 << (DROP - 1)) - 1) + ((bits >> DROP) & 1)) & (-(1 << DROP))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _to_e4m3(x, EMULATE: tl.constexpr):
    """float32 x in [0, 448] to float8_e4m3fn, round to nearest even."""
    if EMULATE:
        # normal e4m3 (x >= 2^-6): 3 mantissa bits; subnormal: multiples of 2^-9 (2^23 trick rounds to even)
        sub = ((x * 512.0 + 8388608.0) - 8388608.0) * (1.0 / 512.0)
        x = tl.where(x < 0.015625, sub, _round_rne(x, 3))
    return x.to(tl.float8e4nv)


@triton.jit
def _to_16bit(x, dtype: tl.constexpr, EMULATE: tl.constexpr):
    """float32 x to float16/bfloat16/float32, round to nearest even."""
    if EMULATE:
        if dtype == tl.bfloat16:
            x = _round_rne(x, 7)
    return x.to(dtype)


@triton.jit
def _attn_inner(acc, l_i, m_i, q, q_scale,
                k_head, ks_head, v_head, k_offs, v_offs, stride_vn,
                offs_m, offs_n, offs_d, kv_len, head_dim, lo, hi,
                BLOCK_N: tl.constexpr, KBLK: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, MASK_D: tl.constexpr,
                MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, FP8: tl.constexpr, P_SHIFT: tl.constexpr,
                EMULATE: tl.constexpr):
    """Key blocks [lo, hi): MASKED=False for blocks wholly inside kv_len and below the causal diagonal."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        keys = start_n + offs_n
        # 64-bit block base (scalar), 32-bit offsets inside the tile.
        k_ptrs = k_head + start_n.to(tl.int64) * HEAD_DIM_PAD + k_offs
        if MASKED:
            k = tl.load(k_ptrs, mask=keys[:, None] < kv_len, other=0)
        else:
            k = tl.load(k_ptrs)
        # k_scale per key: one scale per KBLK keys.
        if BLOCK_N <= KBLK:
            ks = tl.load(ks_head + start_n // KBLK)
            scale = q_scale * ks
        else:
            if MASKED:
                ks = tl.load(ks_head + keys // KBLK, mask=keys < kv_len, other=0.0)
            else:
                ks = tl.load(ks_head + keys // KBLK)
            scale = (q_scale * ks)[None, :]
        qk = tl.dot(q, tl.trans(k), out_dtype=tl.int32)
        # Scores in base 2, s = qk * scale. Scales are amax / 127 >= 0 (or NaN for a non-finite block, which
        # makes the rows NaN either way), so the row max of s is the row max of qk times the scale.
        # In fast mode P is produced already multiplied by 448 (= 2^P_SHIFT) and l sums it that way too.
        if BLOCK_N <= KBLK and not MASKED:
            # One scale per tile: the row max is taken on the int32 products (exact), then exp2(qk*scale - m)
            # is one FMA per score.
            m_new = tl.maximum(m_i, tl.max(qk, 1).to(tl.float32) * scale)
            p = tl.math.exp2(tl.fma(qk.to(tl.float32), scale, (P_SHIFT - m_new)[:, None]))
        else:
            s = qk.to(tl.float32) * scale
            if MASKED:
                keep = keys[None, :] < kv_len
                if IS_CAUSAL:
                    keep = keep & (keys[None, :] <= offs_m[:, None])
                s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - (m_new - P_SHIFT)[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]

        v_ptrs = v_head + start_n.to(tl.int64) * stride_vn + v_offs
        if MASKED:
            if MASK_D:
                v = tl.load(v_ptrs, mask=(keys[:, None] < kv_len) & (offs_d[None, :] < head_dim), other=0.0)
            else:
                v = tl.load(v_ptrs, mask=keys[:, None] < kv_len, other=0.0)
        else:
            if MASK_D:
                v = tl.load(v_ptrs, mask=offs_d[None, :] < head_dim, other=0.0)
            else:
                v = tl.load(v_ptrs)
        if FP8:
            # Fresh accumulator per key block, added in float32: Hopper's fp8 wgmma accumulates with reduced
            # precision, so it never sums more than BLOCK_N products (SageAttention2's two-level accumulation).
            acc += tl.dot(_to_e4m3(p, EMULATE), v, out_dtype=tl.float32)
        elif EMULATE and v.dtype == tl.bfloat16:
            # The interpreter multiplies bfloat16 dot operands as raw uint16: multiply the (exact) float32 values.
            acc = tl.dot(_round_rne(p, 7), v.to(tl.float32), acc, out_dtype=tl.float32)
        else:
            acc = tl.dot(_to_16bit(p, v.dtype, EMULATE), v, acc, out_dtype=tl.float32)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _qk_int8_attn_fwd(Q, QS, K, KS, V, VS, O, LSE,
                      stride_vb, stride_vh, stride_vn,
                      stride_ob, stride_oh, stride_on,
                      heads_q, heads_kv, qo_len, kv_len, nq_pad, nk_pad, head_dim,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QBLK: tl.constexpr, KBLK: tl.constexpr,
                      HEAD_DIM_PAD: tl.constexpr, MASK_D: tl.constexpr,
                      IS_CAUSAL: tl.constexpr, FP8: tl.constexpr, P_SHIFT: tl.constexpr, EMULATE: tl.constexpr):
    # The same source is JIT-compiled (the Triton fallback) and compiled ahead of time (build_tools/aot_build.py;
    # the argument list there is this one). head_dim is a run-time value so one image serves every head_dim of a
    # padded size; MASK_D=False (head_dim == HEAD_DIM_PAD) drops the column masks. V's last dimension is
    # contiguous. QBLK / KBLK: tokens per q / k scale (the prologue's blocks).
    # grid (query tiles, heads_q, batch): CUDA limits the y and z dimensions to 65535.
    pid_m = tl.program_id(0)
    if IS_CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # heaviest query tiles first
    h = tl.program_id(1).to(tl.int64)
    b = tl.program_id(2).to(tl.int64)
    bh = b * heads_q + h
    hk = h // (heads_q // heads_kv)  # GQA
    bhk = b * heads_kv + hk
    start_m = pid_m * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)

    # q: [B, Hq, nq_pad, Dp] contiguous, rows padded to a multiple of 128 with zeros: no mask needed.
    q_ptrs = Q + (bh * nq_pad + start_m) * HEAD_DIM_PAD \
        + tl.arange(0, BLOCK_M)[:, None] * HEAD_DIM_PAD + offs_d[None, :]
    q = tl.load(q_ptrs)
    q_scale = tl.load(QS + bh * (nq_pad // QBLK) + start_m // QBLK)  # BLOCK_M <= QBLK: one scale per tile

    k_head = K + bhk * nk_pad * HEAD_DIM_PAD
    ks_head = KS + bhk * (nk_pad // KBLK)
    v_head = V + b * stride_vb + hk * stride_vh
    k_offs = offs_n[:, None] * HEAD_DIM_PAD + offs_d[None, :]
    v_offs = offs_n[:, None] * stride_vn + offs_d[None, :]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)

    # Keys [0, lo_masked): full blocks inside kv_len and wholly at or below the diagonal of every row.
    # Keys [lo_masked, hi): the kv_len tail and the diagonal blocks, with masks.
    kv_full = (kv_len // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(kv_len, start_m + BLOCK_M)
        lo_masked = tl.minimum(kv_full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
    else:
        hi = kv_len
        lo_masked = kv_full
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, q_scale, k_head, ks_head, v_head, k_offs, v_offs, stride_vn,
                                offs_m, offs_n, offs_d, kv_len, head_dim, 0, lo_masked,
                                BLOCK_N, KBLK, HEAD_DIM_PAD, MASK_D, False, IS_CAUSAL, FP8, P_SHIFT, EMULATE)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, q_scale, k_head, ks_head, v_head, k_offs, v_offs, stride_vn,
                                offs_m, offs_n, offs_d, kv_len, head_dim, lo_masked, hi,
                                BLOCK_N, KBLK, HEAD_DIM_PAD, MASK_D, True, IS_CAUSAL, FP8, P_SHIFT, EMULATE)

    # Epilogue. l_i == 0 only when the row saw no key (kv_len == 0): out 0, lse -inf.
    empty = l_i == 0.0
    inv_l = 1.0 / tl.where(empty, 1.0, l_i)
    if FP8:
        vs = tl.load(VS + bhk * head_dim + offs_d, mask=offs_d < head_dim, other=0.0)
        out = acc * vs[None, :] * inv_l[:, None]  # l sums p * 448: acc * v_scale / 448 / l
    else:
        out = acc * inv_l[:, None]
    if FP8:
        log2_l = tl.math.log2(tl.where(empty, 1.0, l_i)) - P_SHIFT  # l sums p * 448
    else:
        log2_l = tl.math.log2(tl.where(empty, 1.0, l_i))
    lse = tl.where(empty, float("-inf"), (m_i + log2_l) * 0.6931471805599453)  # ln(2)
    row_ok = offs_m < qo_len
    tl.store(LSE + bh * qo_len + offs_m, lse, mask=row_ok)
    o_ptrs = O + b * stride_ob + h * stride_oh + start_m.to(tl.int64) * stride_on \
        + tl.arange(0, BLOCK_M)[:, None] * stride_on + offs_d[None, :]
    if MASK_D:
        o_mask = row_ok[:, None] & (offs_d[None, :] < head_dim)
    else:
        o_mask = row_ok[:, None]
    tl.store(o_ptrs, _to_16bit(out, O.dtype.element_ty, EMULATE), mask=o_mask)


def fast_variant(v: torch.Tensor, out: torch.Tensor, head_dim: int, head_dim_pad: int, layout: str) -> bool:
    """Whether the call may run the kernel variant without head_dim masks, with divisibility hints: the rule of the
    C++ launcher of the precompiled kernels (csrc/ops/triton_variant.h), through sage::_triton_unmasked_variant."""
    strides = list(bhnd_strides(v.stride(), layout) + bhnd_strides(out.stride(), layout))
    return torch.ops.sage._triton_unmasked_variant(head_dim, head_dim_pad, v.data_ptr(), strides)


def qk_int8_attention_triton(q_int8: torch.Tensor, q_scale: torch.Tensor, k_int8: torch.Tensor,
                             k_scale: torch.Tensor, v: torch.Tensor, v_scale: Optional[torch.Tensor],
                             qo_len: int, tensor_layout: str, is_causal: bool, out_dtype: torch.dtype,
                             config: Optional[Tuple[int, int, int, int]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """sage::qk_int8_attention in Triton: returns (out in tensor_layout, lse float32 [B, Hq, qo_len]).

    config: (BLOCK_M, BLOCK_N, num_warps, num_stages) instead of the table's (benchmarks/sweep_attention_configs.py).
    """
    qo_len = int(qo_len)
    # sage::qk_int8_attention's own checks (csrc/ops/attention.cpp), so that both kernels refuse the same inputs.
    b, hq, hkv, kv_len, d, fp8 = torch.ops.sage._check_attention_args(q_int8, q_scale, k_int8, k_scale, v, v_scale,
                                                                     qo_len, tensor_layout, out_dtype)
    fp8 = bool(fp8)
    dp = q_int8.size(3)
    out = torch.empty(layout_shape(b, hq, qo_len, d, tensor_layout), dtype=out_dtype, device=v.device)
    lse = torch.empty((b, hq, qo_len), dtype=torch.float32, device=v.device)
    if lse.numel() == 0:
        return out, lse
    arch = _arch.device_arch(v.device)
    aligned = fast_variant(v, out, d, dp, tensor_layout)
    block_m, block_n, num_warps, num_stages = config or attention_config(arch, dp, fp8, aligned)
    # Tile offsets are 32-bit (block bases are 64-bit): repack a V with a huge token stride.
    if bhnd_strides(v.stride(), tensor_layout)[2] * block_n >= 2**31:
        v = v.contiguous()
        aligned = fast_variant(v, out, d, dp, tensor_layout)
        block_m, block_n, num_warps, num_stages = config or attention_config(arch, dp, fp8, aligned)
    s_vb, s_vh, s_vn = bhnd_strides(v.stride(), tensor_layout)
    s_ob, s_oh, s_on = bhnd_strides(out.stride(), tensor_layout)
    grid = (triton.cdiv(qo_len, block_m), hq, b)
    _qk_int8_attn_fwd[grid](
        q_int8, q_scale, k_int8, k_scale, v, v_scale if fp8 else q_scale, out, lse,
        s_vb, s_vh, s_vn, s_ob, s_oh, s_on,
        hq, hkv, qo_len, kv_len, q_int8.size(2), k_int8.size(2), d,
        BLOCK_M=block_m, BLOCK_N=block_n, QBLK=BLOCK_Q, KBLK=BLOCK_K, HEAD_DIM_PAD=dp, MASK_D=not aligned,
        IS_CAUSAL=bool(is_causal), FP8=fp8, P_SHIFT=LOG2_FP8_MAX if fp8 else 0.0,  # fast mode: p * FP8_MAX
        EMULATE=not isinstance(_qk_int8_attn_fwd, triton.runtime.JITFunction),  # TRITON_INTERPRET: _round_rne
        num_warps=num_warps, num_stages=num_stages)
    return out, lse
