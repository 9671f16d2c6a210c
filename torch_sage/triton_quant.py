"""Triton quantization kernels: the alternate prologue (selected with SAGEATTN_SK1_PROLOGUE=triton), bit for
bit the rules of docs/SEMANTICS.md, and the per-channel FP8 quantization of V for the fast mode."""
import torch
import triton
import triton.language as tl

from .contract import BLOCK_K, BLOCK_Q, FP8_MAX, LOG2E, bhnd, bhnd_strides, padded_head_dim, quant_qk_shapes

MEAN_CHUNKS = 16  # token chunks whose float64 partial sums make the key mean
V_AMAX_ROWS = 32  # tokens per step of the channel-amax kernel
V_QUANT_ROWS = 64  # tokens per program of the V quantization kernel


def v_quant_warps(dp):
    """Warps of the two V kernels: 8 at a padded head_dim of 256, whose 64-token tile spills with 4."""
    return 8 if dp == 256 else 4


@triton.jit
def _round_half_even(y):
    # Exact rint for |y| < 2**22 (round-to-nearest-even addition); core ops only, so it also runs interpreted.
    return (y + 12582912.0) - 12582912.0


@triton.jit
def _round_to_e4m3_grid(y):
    """Rounds |y| <= 448 to the nearest float8_e4m3fn value (ties to even) in float32, so the cast after it is
    exact on every backend (Triton's interpreter does not round the cast to nearest)."""
    bits = y.to(tl.int32, bitcast=True)
    exp = ((bits >> 23) & 0xFF) - 127
    ulp = ((tl.maximum(exp, -6) - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits; subnormals 2^-9
    r = _round_half_even(y / ulp) * ulp  # power-of-two scaling: exact
    # The magic-number rint gives +0 for a negative y that rounds to zero: y's sign back, as the CPU kernel keeps it.
    return (r.to(tl.int32, bitcast=True) | ((bits >> 31) << 31)).to(tl.float32, bitcast=True)


@triton.jit
def _chunk_program(x_ptr, heads, stride_b, stride_h, DP: tl.constexpr):
    """The (chunk, batch*head) program of the two per-channel reduction kernels: its chunk, bh, the base pointer of
    its (batch, head) and the column offsets."""
    chunk = tl.program_id(0).to(tl.int64)
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // heads, bh % heads
    return chunk, bh, x_ptr + b * stride_b + h * stride_h, tl.arange(0, DP)


@triton.jit
def _column_sums_kernel(x_ptr, part_ptr, n_tokens, heads, stride_b, stride_h, stride_n, head_dim,
                        CHUNKS: tl.constexpr, ROWS: tl.constexpr, DP: tl.constexpr):
    """part[bh, chunk, :] = float64 sum of x over the chunk's tokens (chunk c takes row tiles c, c+CHUNKS, ...)."""
    chunk, bh, base, cols = _chunk_program(x_ptr, heads, stride_b, stride_h, DP)
    acc = tl.zeros((DP,), dtype=tl.float64)
    for start in range(chunk * ROWS, n_tokens, CHUNKS * ROWS):
        rows = start + tl.arange(0, ROWS).to(tl.int64)
        mask = (rows[:, None] < n_tokens) & (cols[None, :] < head_dim)
        x = tl.load(base + rows[:, None] * stride_n + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32).to(tl.float64), axis=0)
    tl.store(part_ptr + (bh * CHUNKS + chunk) * DP + cols, acc)


@triton.jit
def _quant_blocks_kernel(x_ptr, out_ptr, scale_ptr, part_ptr, mean_ptr, mult, n_tokens, n_blocks, heads,
                         stride_b, stride_h, stride_n, head_dim,
                         BLOCK: tl.constexpr, DP: tl.constexpr, USE_MULT: tl.constexpr, SMOOTH: tl.constexpr,
                         CHUNKS: tl.constexpr):
    """One program quantizes one block of BLOCK tokens of one (batch, head) into int8 with one float32 scale."""
    pid = tl.program_id(0).to(tl.int64)
    blk, bh = pid % n_blocks, pid // n_blocks
    b, h = bh // heads, bh % heads
    rows = blk * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    cols = tl.arange(0, DP)
    mask = (rows[:, None] < n_tokens) & (cols[None, :] < head_dim)
    x = tl.load(x_ptr + b * stride_b + h * stride_h + rows[:, None] * stride_n + cols[None, :], mask=mask,
                other=0.0).to(tl.float32)
    if USE_MULT:
        x = x * mult
    if SMOOTH:
        parts = tl.load(part_ptr + (bh * CHUNKS + tl.arange(0, CHUNKS)[:, None]) * DP + cols[None, :])
        mean = (tl.sum(parts, axis=0) / tl.full((), n_tokens, tl.float64)).to(tl.float32)  # float64 division is IEEE
        x = tl.where(mask, x - mean[None, :], 0.0)
        if blk == 0:
            tl.store(mean_ptr + bh * head_dim + cols, mean, mask=cols < head_dim)
    amax = tl.max(tl.max(tl.abs(x), axis=1), axis=0)
    # Not "x - x != 0": after x * mult the compiler may contract that into an fma that leaves the product's
    # rounding error. |x| < inf is false exactly for NaN and +-inf.
    non_finite = tl.max(tl.max(((tl.abs(x) < float("inf")) == 0).to(tl.int32), axis=1), axis=0)
    scale = tl.math.div_rn(amax, 127.0)
    scale = tl.where(non_finite > 0, float("nan"), scale)
    safe = tl.where(scale > 0, scale, 1.0)
    y = _round_half_even(tl.math.div_rn(x, safe))
    y = tl.minimum(tl.maximum(y, -127.0), 127.0)
    y = tl.where(scale > 0, y, 0.0)
    tl.store(out_ptr + (bh * n_blocks * BLOCK + rows[:, None]) * DP + cols[None, :], y.to(tl.int8))
    tl.store(scale_ptr + pid, scale)


def _bhnd(t, layout):
    """Sizes and element strides of the [B, H, N, D] view of t."""
    return bhnd(t.shape, layout), bhnd_strides(t.stride(), layout)


def _quantize(x, layout, block, mult, smooth, out, scale, mean):
    (b, h, n, d), (sb, sh, sn) = _bhnd(x, layout)
    dp = out.shape[-1]
    n_blocks = out.shape[2] // block
    if b * h * n_blocks == 0:
        if smooth:
            mean.zero_()
        return
    parts = None
    if smooth:
        parts = torch.empty((b * h, MEAN_CHUNKS, dp), dtype=torch.float64, device=x.device)
        _column_sums_kernel[(MEAN_CHUNKS, b * h)](x, parts, n, h, sb, sh, sn, d, CHUNKS=MEAN_CHUNKS, ROWS=32, DP=dp)
    _quant_blocks_kernel[(b * h * n_blocks,)](
        x, out, scale, parts, mean, mult, n, n_blocks, h, sb, sh, sn, d,
        BLOCK=block, DP=dp, USE_MULT=mult is not None, SMOOTH=smooth, CHUNKS=MEAN_CHUNKS, num_warps=4)


def quant_qk_int8_triton(q, k, tensor_layout, sm_scale, smooth_k):
    """The prologue op (same outputs as torch.ops.sage.quant_qk_int8) with Triton kernels."""
    shapes = quant_qk_shapes(bhnd(q.shape, tensor_layout), bhnd(k.shape, tensor_layout), smooth_k)
    q_int8, q_scale, k_int8, k_scale, k_mean = (
        torch.empty(shape, dtype=dtype, device=q.device)
        for shape, dtype in zip(shapes, (torch.int8, torch.float32, torch.int8, torch.float32, torch.float32)))
    # float32(sm_scale * log2(e)), rounded once as the C++ host code does.
    mult = torch.tensor(sm_scale * LOG2E, dtype=torch.float32).item()
    _quantize(q, tensor_layout, BLOCK_Q, mult, False, q_int8, q_scale, None)
    _quantize(k, tensor_layout, BLOCK_K, None, smooth_k, k_int8, k_scale, k_mean)
    return q_int8, q_scale, k_int8, k_scale, k_mean


@triton.jit
def _channel_amax_kernel(v_ptr, part_ptr, n_tokens, heads, stride_b, stride_h, stride_n, head_dim,
                         CHUNKS: tl.constexpr, ROWS: tl.constexpr, DP: tl.constexpr):
    """part[bh, chunk, :] = max |v| over the chunk's tokens, NaN where a non-finite value was seen."""
    chunk, bh, base, cols = _chunk_program(v_ptr, heads, stride_b, stride_h, DP)
    amax = tl.zeros((DP,), dtype=tl.float32)
    bad = tl.zeros((DP,), dtype=tl.int32)
    for start in range(chunk * ROWS, n_tokens, CHUNKS * ROWS):
        rows = start + tl.arange(0, ROWS).to(tl.int64)
        mask = (rows[:, None] < n_tokens) & (cols[None, :] < head_dim)
        x = tl.load(base + rows[:, None] * stride_n + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(x), axis=0))
        bad = tl.maximum(bad, tl.max(((tl.abs(x) < float("inf")) == 0).to(tl.int32), axis=0))
    tl.store(part_ptr + (bh * CHUNKS + chunk) * DP + cols, tl.where(bad > 0, float("nan"), amax))


@triton.jit
def _quant_v_kernel(v_ptr, out_ptr, part_ptr, scale_ptr, n_tokens, n_blocks, heads, stride_b, stride_h, stride_n,
                    ostride_b, ostride_h, ostride_n, head_dim,
                    CHUNKS: tl.constexpr, ROWS: tl.constexpr, DP: tl.constexpr, FP8_MAX: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    blk, bh = pid % n_blocks, pid // n_blocks
    b, h = bh // heads, bh % heads
    cols = tl.arange(0, DP)
    parts = tl.load(part_ptr + (bh * CHUNKS + tl.arange(0, CHUNKS)[:, None]) * DP + cols[None, :])
    bad = tl.max((parts != parts).to(tl.int32), axis=0)
    scale = tl.math.div_rn(tl.max(tl.where(parts != parts, 0.0, parts), axis=0), FP8_MAX)
    scale = tl.where(bad > 0, float("nan"), scale)
    if blk == 0:
        tl.store(scale_ptr + bh * head_dim + cols, scale, mask=cols < head_dim)
    rows = blk * ROWS + tl.arange(0, ROWS).to(tl.int64)
    mask = (rows[:, None] < n_tokens) & (cols[None, :] < head_dim)
    x = tl.load(v_ptr + b * stride_b + h * stride_h + rows[:, None] * stride_n + cols[None, :], mask=mask,
                other=0.0).to(tl.float32)
    ok = scale[None, :] > 0
    y = tl.math.div_rn(x, tl.where(ok, scale[None, :], 1.0))
    y = tl.where(ok, _round_to_e4m3_grid(tl.minimum(tl.maximum(y, -FP8_MAX), FP8_MAX)), 0.0)
    tl.store(out_ptr + b * ostride_b + h * ostride_h + rows[:, None] * ostride_n + cols[None, :],
             y.to(tl.float8e4nv), mask=mask)


def quant_v_fp8_triton(v, tensor_layout):
    """Per-channel e4m3 V (same outputs as torch.ops.sage.quant_v_fp8, whose GPU kernels are csrc/hip's): two
    launches, a per-chunk channel amax, then the quantization."""
    (b, h, n, d), (sb, sh, sn) = _bhnd(v, tensor_layout)
    v_fp8 = torch.empty(v.shape, dtype=torch.float8_e4m3fn, device=v.device)
    v_scale = torch.empty((b, h, d), dtype=torch.float32, device=v.device)
    if b * h == 0:
        return v_fp8, v_scale
    _, (ob, oh, on) = _bhnd(v_fp8, tensor_layout)
    dp = padded_head_dim(d)
    parts = torch.empty((b * h, MEAN_CHUNKS, dp), dtype=torch.float32, device=v.device)
    _channel_amax_kernel[(MEAN_CHUNKS, b * h)](v, parts, n, h, sb, sh, sn, d, CHUNKS=MEAN_CHUNKS, ROWS=V_AMAX_ROWS,
                                               DP=dp, num_warps=v_quant_warps(dp), num_stages=3)
    n_blocks = max(1, triton.cdiv(n, V_QUANT_ROWS))
    _quant_v_kernel[(b * h * n_blocks,)](v, v_fp8, parts, v_scale, n, n_blocks, h, sb, sh, sn, ob, oh, on, d,
                                         CHUNKS=MEAN_CHUNKS, ROWS=V_QUANT_ROWS, DP=dp, FP8_MAX=FP8_MAX,
                                         num_warps=v_quant_warps(dp),
                                         num_stages=3)
    return v_fp8, v_scale
