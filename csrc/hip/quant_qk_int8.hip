// Prologue: per-block INT8 quantization of Q and K, bit-exact to docs/SEMANTICS.md "Prologue".
//
// Launches per call:
//   smooth_k off: 1  (quant kernel; its grid covers the Q blocks, then the K blocks)
//   smooth_k on : 2  (column-sum kernel -> float64 partial sums per (b, h, chunk) in the
//                     workspace; then the same quant kernel, whose K blocks finish the mean)
//                 1  on NVIDIA sm_90+ when a head has at most kClusterUnits quant blocks (1024 keys),
//                     Dp <= 128, q and k in 16-byte units and the cluster fits the GPU (cluster_mean):
//                     each head's K blocks form one thread block cluster, which adds their
//                     column sums (taken from the rows already in registers) through distributed
//                     shared memory, so K is read once and no column-sum pass runs.
// No memsets, no atomics: every output byte and scale is written by exactly one block.
//
// Quant kernel layout: one block = 128 token rows = one Q block (BLKQ) or two K blocks
// (2 x BLKK), so Q and K blocks do equal work. 2*Dp threads = 16 row groups x Dp/8 column
// vectors of 8 elements; a thread owns rows rg, rg+16, ..., rg+112 of one column vector and
// keeps them in registers (raw fp16/bf16 bits) between the amax pass and the quantize pass,
// so the input is read exactly once. K rows 0..63 are the first K block (i < 4), 64..127
// the second. Output rows are contiguous: at a fixed i the block writes 16*Dp contiguous
// bytes, 8 bytes per thread (fully coalesced).
#if defined(__HIP__)
// Bit-exactness: no mul+add fusion anywhere in this file, compat.h's operations included (hipcc defaults to
// contract=fast), so before the includes.
#pragma clang fp contract(off)
#endif

#include <algorithm>
#include <cstdint>

#include "../common/compat.h"
#include "quant_rules.h"
#include "quant_qk_int8.h"

namespace sage {
namespace {

constexpr int kRowGroups = 16;
constexpr int kUnitRows = static_cast<int>(kBlockQ);   // rows per quant block: one Q block, two K blocks
static_assert(kBlockQ == 2 * kBlockK, "a quant block of kUnitRows rows holds one Q block or two K blocks");
constexpr int kRowsPerThread = kUnitRows / kRowGroups;  // 8; i < 4 -> first K block
constexpr int kMaxThreads = 512;                         // 2 * Dp for Dp = 256
constexpr int kMaxWarps = kMaxThreads / SAGE_MIN_WARP_SIZE;
constexpr int kColsumThreads = 256;
constexpr int kColsumTargetBlocks = 320;  // enough loads in flight for the column-sum pass
// Rows of a column-sum chunk at least: one round of loads of a block at Dp = 128 (16 row groups x 8 vectors), so
// that a call of few heads and short keys splits them into chunks of one memory latency each, not into few chunks
// that wait one latency per round in turn (docs/FINDINGS.md).
constexpr int kColsumMinRows = 128;
constexpr int kMaxChunks = 16;            // bounds the partials each K block re-reads (L2)
constexpr int kClusterUnits = 8;          // quant blocks of a head's keys in one cluster (portable cluster size)
using quant::umax;  // the amax rule shared with the V quantization (quant_rules.h)

struct alignas(16) U32x4 {
  uint32_t v[4];
};
struct alignas(8) U32x2 {
  uint32_t v[2];
};

struct QuantArgs {
  const uint16_t* q;
  const uint16_t* k;
  int8_t* q_out;
  int8_t* k_out;
  float* q_scale;
  float* k_scale;
  const double* partials;  // [B*Hk, chunks, Dp] float64 column sums (smooth_k)
  float* k_mean;
  int64_t q_sb, q_sh, q_sn, k_sb, k_sh, k_sn;
  int64_t q_len, k_len, q_len_pad, k_len_pad;
  uint32_t heads_q, heads_k;
  uint32_t q_units;  // number of Q blocks in the grid
  uint32_t k_first;  // the first K block: q_units, or q_units rounded up to kClusterUnits (cluster_mean)
  uint32_t q_units_per_head, k_units_per_head, k_scales_per_head;
  uint32_t k_blocks_per_head;  // k_units_per_head, or kClusterUnits (cluster_mean: the rest idle)
  int head_dim, dp, cv_bits, chunks;
  float q_mult;
  int smooth_k;
  int cluster_mean;  // the key mean from the head's cluster, not from partials
};

struct ColsumArgs {
  const uint16_t* k;
  double* partials;
  float* k_mean;
  int64_t sb, sh, sn;
  int64_t k_len, rows_per_chunk;
  uint32_t heads_k;
  int head_dim, dp, cv_bits, chunks;
};


__device__ __forceinline__ int clamp_rows(int64_t v) {
  return (int)(v < -1 ? (int64_t)-1 : (v > kUnitRows ? (int64_t)kUnitRows : v));
}

template <bool BF16>
__device__ __forceinline__ void cvt2(uint32_t w, float& lo, float& hi) {
  if (BF16) {
    compat::bf162_bits_to_float2(w, lo, hi);
  } else {
    compat::half2_bits_to_float2(w, lo, hi);
  }
}

__device__ __forceinline__ U32x4 load_vec(const uint16_t* __restrict__ p) {
  return *reinterpret_cast<const U32x4*>(p);
}

// 8 consecutive elements starting at p, of which the first nvalid are real (rest 0):
// 2-byte loads, for unaligned inputs and for the last vector when head_dim % 8 != 0.
__device__ __forceinline__ U32x4 load_scalar(const uint16_t* __restrict__ p, int nvalid) {
  U32x4 r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = (2 * j < nvalid) ? (uint32_t)p[2 * j] : 0u;
    const uint32_t hi = (2 * j + 1 < nvalid) ? (uint32_t)p[2 * j + 1] : 0u;
    r.v[j] = lo | (hi << 16);
  }
  return r;
}

__device__ __forceinline__ U32x4 zero_vec() {
  U32x4 r;
#pragma unroll
  for (int w = 0; w < 4; ++w) r.v[w] = 0u;
  return r;
}

// Bits of q + magic: the low byte is rint(q) for |q| < 2^22.
__device__ __forceinline__ uint32_t rne_bits(float q) {
  return compat::bit_cast<uint32_t>(compat::fadd_rn(q, quant::kRneMagic));
}

__device__ __forceinline__ uint32_t pack4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return (a & 0xffu) | ((b & 0xffu) << 8) | ((c & 0xffu) << 16) | (d << 24);
}

// The clamp to [-127, 127] only matters for subnormal scales (PRESCALE path): for a normal
// s = RN(amax/127), |x| <= amax gives |x/s| <= 127/(1-2^-24), which rounds to at most 127.
// A subnormal s has few significant bits and |x/s| can reach ~190. Rows that are padding
// or belong to a block whose scale is not > 0 are stored as 0 whatever was computed.
template <bool BF16, bool PRESCALE>
__device__ __forceinline__ void quantize_store(const U32x4 (&raw)[kRowsPerThread], const float (&nsub)[8],
                                               float mul, float s_lo, float y_lo, float pm_lo, bool keep_lo,
                                               float s_hi, float y_hi, float pm_hi, bool keep_hi, int rows_real,
                                               int rows_out, int8_t* __restrict__ dst, int64_t dst_step) {
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    if (i * kRowGroups < rows_out) {
      const float s = i < kRowsPerThread / 2 ? s_lo : s_hi;
      const float y = i < kRowsPerThread / 2 ? y_lo : y_hi;
      const float pm = i < kRowsPerThread / 2 ? pm_lo : pm_hi;
      const bool keep = (i * kRowGroups < rows_real) && (i < kRowsPerThread / 2 ? keep_lo : keep_hi);
      uint32_t e[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float f0, f1;
        cvt2<BF16>(raw[i].v[w], f0, f1);
        const float x0 = compat::fma_rn(f0, mul, nsub[2 * w]);
        const float x1 = compat::fma_rn(f1, mul, nsub[2 * w + 1]);
        float q0, q1;
        if (PRESCALE) {
          q0 = quant::div_rn(compat::fmul_rn(x0, pm), s, y);
          q1 = quant::div_rn(compat::fmul_rn(x1, pm), s, y);
          q0 = fminf(fmaxf(q0, -127.0f), 127.0f);
          q1 = fminf(fmaxf(q1, -127.0f), 127.0f);
        } else {
          q0 = quant::div_rn(x0, s, y);
          q1 = quant::div_rn(x1, s, y);
        }
        e[2 * w] = rne_bits(q0);
        e[2 * w + 1] = rne_bits(q1);
      }
      U32x2 o;
      o.v[0] = keep ? pack4(e[0], e[1], e[2], e[3]) : 0u;
      o.v[1] = keep ? pack4(e[4], e[5], e[6], e[7]) : 0u;
      *reinterpret_cast<U32x2*>(dst + i * dst_step) = o;
    }
  }
}

// 2 blocks/SM even at Dp = 256 (512 threads) keeps a second block's loads in flight while
// one block reduces and stores: caps registers at 64 on NVIDIA (no spills at that cap).
template <bool BF16, bool VEC>
__global__ void SAGE_LAUNCH_BOUNDS(kMaxThreads, 2) quant_qk_int8_kernel(const QuantArgs a) {
  alignas(16) __shared__ float s_mean[256];
  __shared__ uint32_t s_red[2][kMaxWarps];
#if SAGE_HAS_CLUSTERS
  __shared__ double s_colsum[kRowGroups][128];  // cluster_mean (Dp <= 128): one partial per row group and column
  __shared__ double s_block_sum[128];                // the block's column sums, read by the whole cluster
#endif

  compat::wait_for_previous_grid();
  const int tid = (int)threadIdx.x;
  const int cv = tid & ((1 << a.cv_bits) - 1);
  const int rg = tid >> a.cv_bits;
  const int d0 = cv * 8;

  // blockIdx.x < 2^31 and per-head counts < 2^32: 32-bit index math is enough here;
  // everything that addresses memory below is 64-bit.
  uint32_t unit = blockIdx.x;
  const bool is_k = unit >= a.k_first;
  if (is_k) {
    unit -= a.k_first;
  } else if (unit >= a.q_units) {
    return;  // cluster_mean: padding before the first K block
  }
  const uint32_t units_per_head = is_k ? a.k_blocks_per_head : a.q_units_per_head;
  const uint32_t bh = unit / units_per_head;
  const uint32_t blk = unit - bh * units_per_head;
  const uint32_t heads = is_k ? a.heads_k : a.heads_q;
  const uint32_t b = bh / heads;
  const uint32_t h = bh - b * heads;

  const int64_t len = is_k ? a.k_len : a.q_len;
  const int64_t len_pad = is_k ? a.k_len_pad : a.q_len_pad;
  const int64_t row0 = (int64_t)blk * kUnitRows;
  const int64_t my_row = row0 + rg;
  const int64_t sn = is_k ? a.k_sn : a.q_sn;
  const uint16_t* __restrict__ src = (is_k ? a.k : a.q) + (int64_t)b * (is_k ? a.k_sb : a.q_sb) +
                                     (int64_t)h * (is_k ? a.k_sh : a.q_sh) + d0;
  // Thread-local row i is real iff i*16 < rows_real, inside the output iff i*16 < rows_out.
  const int rows_real = clamp_rows(len - my_row);
  const int rows_out = clamp_rows(len_pad - my_row);
  const int nvalid = a.head_dim - d0;  // real columns in this thread's vector; <= 0: padding

  // Issue every load first so they are all in flight during the mean phase below.
  U32x4 raw[kRowsPerThread];
  if (VEC && nvalid >= 8) {  // the common case: branch-free, predicated 16-byte loads
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      raw[i] = i * kRowGroups < rows_real ? load_vec(src + (my_row + i * kRowGroups) * sn) : zero_vec();
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      raw[i] = nvalid > 0 && i * kRowGroups < rows_real ? load_scalar(src + (my_row + i * kRowGroups) * sn, nvalid)
                                                        : zero_vec();
    }
  }

  // x = fma(f, mul, nsub) is exactly float(q)*q_mult (nsub = -0) for Q and
  // float(k) - k_mean[d] (mul = 1) for K. Padding columns hold f = 0, so x = +-0 there
  // (with a non-finite q_mult every real row already makes the block NaN).
  float mul = a.q_mult;
  float nsub[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) nsub[j] = -0.0f;
  if (is_k) {
    mul = 1.0f;
#if SAGE_HAS_CLUSTERS
    if (VEC && a.cluster_mean) {  // (only with 16-byte loads: the scalar-load variant would spill)
      // This block's column sums in float64 (each thread's rows in order, then the row groups in order), shared
      // with the head's cluster; every block adds the cluster's in rank order. Exact for fp16 and ordinary bf16, as
      // the column-sum kernel's (docs/SEMANTICS.md).
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // a column pair at a time: few float64 registers live (no spills at 64)
        double acc0 = 0.0, acc1 = 0.0;
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          float f0, f1;
          cvt2<BF16>(raw[i].v[w], f0, f1);  // rows past k_len and padding columns were loaded as 0
          acc0 += (double)f0;
          acc1 += (double)f1;
        }
        s_colsum[rg][d0 + 2 * w] = acc0;
        s_colsum[rg][d0 + 2 * w + 1] = acc1;
      }
      __syncthreads();
      if (tid < a.dp) {
        double sum = 0.0;
        for (int g = 0; g < kRowGroups; ++g) sum += s_colsum[g][tid];
        s_block_sum[tid] = sum;
      }
      compat::cluster_arrive();
      compat::cluster_wait();
      if (tid < a.dp) {
        double sum = 0.0;
        for (unsigned r = 0; r < kClusterUnits; ++r) sum += *compat::cluster_peer(s_block_sum + tid, r);
        const float m = tid < a.head_dim ? (float)(sum / (double)a.k_len) : 0.0f;
        if (blk == 0 && tid < a.head_dim) a.k_mean[(int64_t)bh * a.head_dim + tid] = m;
        s_mean[tid] = m;
      }
      compat::cluster_arrive();  // done reading the others' shared memory; each waits for all before it exits
      __syncthreads();
      if (blk >= a.k_units_per_head) {  // a head with fewer K blocks than the cluster: this one only added zeros
        compat::cluster_wait();
        return;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) nsub[j] = -s_mean[d0 + j];
    } else
#endif
    if (a.smooth_k) {
      // Finish the mean from the column-sum kernel's partials, in chunk order.
      if (tid < a.dp) {
        float m = 0.0f;
        if (tid < a.head_dim && a.k_len > 0) {
          const double* part = a.partials + (int64_t)bh * a.chunks * a.dp + tid;
          double s = 0.0;
          for (int c = 0; c < a.chunks; ++c) s += part[(int64_t)c * a.dp];
          m = (float)(s / (double)a.k_len);
          // With one chunk the column-sum kernel already wrote k_mean.
          if (blk == 0 && a.chunks > 1) a.k_mean[(int64_t)bh * a.head_dim + tid] = m;
        }
        s_mean[tid] = m;
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 8; ++j) nsub[j] = -s_mean[d0 + j];
    }
  }

  // Pass 1: amax as the max of |x|'s bit pattern. Unsigned order of non-negative floats is
  // numeric order, and NaN sorts above +inf, so "amax >= inf bits" means non-finite
  // (fmaxf would drop NaN).
  uint32_t amax_lo = 0u, amax_hi = 0u;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    if (i * kRowGroups < rows_real) {
      uint32_t m = 0u;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float f0, f1;
        cvt2<BF16>(raw[i].v[w], f0, f1);
        const float x0 = compat::fma_rn(f0, mul, nsub[2 * w]);
        const float x1 = compat::fma_rn(f1, mul, nsub[2 * w + 1]);
        m = umax(m, umax(quant::abs_bits(x0), quant::abs_bits(x1)));
      }
      if (i < kRowsPerThread / 2) {
        amax_lo = umax(amax_lo, m);
      } else {
        amax_hi = umax(amax_hi, m);
      }
    }
  }

  // Block reduction of both halves: warp butterfly, then one slot per warp in shared memory.
  // Unrolled over the largest warp size: the AMD wave size folds to a constant only in the
  // backend, after loop unrolling, so the dead step is removed there (or costs one branch).
  const int ws = SAGE_WARP_SIZE;
#pragma unroll
  for (int off = SAGE_MAX_WARP_SIZE / 2; off > 0; off >>= 1) {
    if (off < ws) {
      amax_lo = umax(amax_lo, compat::shfl_xor(amax_lo, off));
      amax_hi = umax(amax_hi, compat::shfl_xor(amax_hi, off));
    }
  }
  if ((tid & (ws - 1)) == 0) {
    s_red[0][tid / ws] = amax_lo;
    s_red[1][tid / ws] = amax_hi;
  }
  __syncthreads();
  const int nwarps = ((int)blockDim.x + ws - 1) / ws;
  amax_lo = 0u;
  amax_hi = 0u;
  for (int w = 0; w < nwarps; ++w) {
    amax_lo = umax(amax_lo, s_red[0][w]);
    amax_hi = umax(amax_hi, s_red[1][w]);
  }
  if (!is_k) {  // one Q block spans both halves
    amax_lo = umax(amax_lo, amax_hi);
    amax_hi = amax_lo;
  }
  const float scale_lo = quant::bits_to_scale(amax_lo, 127.0f);
  const float scale_hi = quant::bits_to_scale(amax_hi, 127.0f);
  if (tid == 0) {
    if (!is_k) {
      a.q_scale[(int64_t)bh * a.q_units_per_head + blk] = scale_lo;
    } else {
      const uint32_t kb = 2u * blk;
      float* ks = a.k_scale + (int64_t)bh * a.k_scales_per_head + kb;
      ks[0] = scale_lo;
      if (kb + 1u < a.k_scales_per_head) ks[1] = scale_hi;
    }
  }

  // Pass 2. scale NaN (non-finite block) or 0 (all-zero block) -> keep = false -> zeros;
  // s = 1 there just keeps the arithmetic tame.
  const bool keep_lo = scale_lo > 0.0f;
  const bool keep_hi = scale_hi > 0.0f;
  const float pm_lo = keep_lo && scale_lo < quant::kDivRnMinScale ? quant::kDivRnPrescale : 1.0f;
  const float pm_hi = keep_hi && scale_hi < quant::kDivRnMinScale ? quant::kDivRnPrescale : 1.0f;
  const float s_lo = keep_lo ? compat::fmul_rn(scale_lo, pm_lo) : 1.0f;  // exact
  const float s_hi = keep_hi ? compat::fmul_rn(scale_hi, pm_hi) : 1.0f;
  const float y_lo = compat::frcp_rn(s_lo);
  const float y_hi = compat::frcp_rn(s_hi);
  int8_t* dst = (is_k ? a.k_out : a.q_out) + ((int64_t)bh * len_pad + my_row) * a.dp + d0;
  const int64_t dst_step = (int64_t)kRowGroups * a.dp;
  if (pm_lo == 1.0f && pm_hi == 1.0f) {  // block-uniform
    quantize_store<BF16, false>(raw, nsub, mul, s_lo, y_lo, pm_lo, keep_lo, s_hi, y_hi, pm_hi, keep_hi,
                                rows_real, rows_out, dst, dst_step);
  } else {
    quantize_store<BF16, true>(raw, nsub, mul, s_lo, y_lo, pm_lo, keep_lo, s_hi, y_hi, pm_hi, keep_hi,
                               rows_real, rows_out, dst, dst_step);
  }
#if SAGE_HAS_CLUSTERS
  if (VEC && is_k && a.cluster_mean) compat::cluster_wait();  // the cluster has read this block's column sums
#endif
}

// Float64 column sums of K over one chunk of tokens of one (b, h). Deterministic order:
// each thread sums its rows in increasing order, then row groups are added in order.
// Float64 sums of fp16 (and ordinary bf16) values are exact, so this equals any order.
template <bool BF16, bool VEC>
__global__ void SAGE_LAUNCH_BOUNDS(kColsumThreads, 4) k_colsum_kernel(const ColsumArgs a) {
  __shared__ double s_sum[kColsumThreads * 8];  // row groups x Dp = 2048 for every Dp

  compat::wait_for_previous_grid();
  const int tid = (int)threadIdx.x;
  const int cv = tid & ((1 << a.cv_bits) - 1);
  const int rg = tid >> a.cv_bits;
  const int groups = kColsumThreads >> a.cv_bits;
  const int d0 = cv * 8;
  const uint32_t chunk = blockIdx.x % (uint32_t)a.chunks;
  const uint32_t bh = blockIdx.x / (uint32_t)a.chunks;
  const uint32_t b = bh / a.heads_k;
  const uint32_t h = bh - b * a.heads_k;
  const int64_t begin = (int64_t)chunk * a.rows_per_chunk;
  const int64_t end = a.k_len < begin + a.rows_per_chunk ? a.k_len : begin + a.rows_per_chunk;
  const int nvalid = a.head_dim - d0;

  double acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0;

  if (nvalid > 0) {
    const uint16_t* __restrict__ src = a.k + (int64_t)b * a.sb + (int64_t)h * a.sh + d0;
    constexpr int U = VEC ? 8 : 2;  // vectors in flight per thread
    for (int64_t r = begin + rg; r < end; r += (int64_t)groups * U) {
      U32x4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t row = r + (int64_t)u * groups;
        if (VEC && nvalid >= 8) {
          raw[u] = row < end ? load_vec(src + row * a.sn) : zero_vec();
        } else {
          raw[u] = row < end ? load_scalar(src + row * a.sn, nvalid) : zero_vec();
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          float f0, f1;
          cvt2<BF16>(raw[u].v[w], f0, f1);
          acc[2 * w] += (double)f0;
          acc[2 * w + 1] += (double)f1;
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < 8; ++j) s_sum[rg * a.dp + d0 + j] = acc[j];
  __syncthreads();
  if (tid < a.dp) {
    double s = 0.0;
    for (int g = 0; g < groups; ++g) s += s_sum[g * a.dp + tid];
    a.partials[((int64_t)bh * a.chunks + chunk) * a.dp + tid] = s;
    if (a.chunks == 1 && tid < a.head_dim) {
      // k_len == 0: no keys, so nothing to subtract; 0 keeps lse's add-back finite.
      a.k_mean[(int64_t)bh * a.head_dim + tid] = a.k_len > 0 ? (float)(s / (double)a.k_len) : 0.0f;
    }
  }
}

int num_chunks(const QuantQKParams& p) {
  const int64_t bh = p.batch * p.heads_k;
  if (bh <= 0 || p.k_len <= 0) return 1;
  int64_t c = std::min<int64_t>((kColsumTargetBlocks + bh - 1) / bh, (p.k_len + kColsumMinRows - 1) / kColsumMinRows);
  return (int)std::max<int64_t>(1, std::min<int64_t>(c, kMaxChunks));
}

// 16-byte loads need the base and every stride that is actually used on 8 elements.
bool vec_ok(const void* ptr, int64_t sb, int64_t sh, int64_t sn, int64_t batch, int64_t heads, int64_t len) {
  if (batch <= 0 || heads <= 0 || len <= 0) return true;  // nothing is read
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  if (batch > 1 && sb % 8 != 0) return false;
  if (heads > 1 && sh % 8 != 0) return false;
  if (len > 1 && sn % 8 != 0) return false;
  return true;
}

bool params_ok(const QuantQKParams& p) {
  const int64_t dp = p.head_dim_pad;
  if (p.dtype != InDtype::kFloat16 && p.dtype != InDtype::kBFloat16) return false;
  if (dp != 64 && dp != 128 && dp != 256) return false;
  if (p.head_dim < 1 || p.head_dim > dp) return false;
  if (p.batch < 0 || p.heads_q < 0 || p.heads_k < 0 || p.q_len < 0 || p.k_len < 0) return false;
  if (p.heads_q > UINT32_MAX || p.heads_k > UINT32_MAX) return false;
  if (p.q_len_pad < p.q_len || p.q_len_pad % kBlockQ != 0) return false;
  if (p.k_len_pad < p.k_len || p.k_len_pad % kBlockK != 0) return false;
  return true;
}

// Quant blocks of a head's keys: kUnitRows rows each, two K blocks (the last may hold only one).
int64_t k_units_per_head(const QuantQKParams& p) { return (p.k_len_pad + kUnitRows - 1) / kUnitRows; }

// The key mean from each head's cluster of K blocks (one launch, K read once) instead of the column-sum pass: where
// the kernel's image on this device has the cluster code (NVIDIA sm_90+, compat.h compiled_for_sm90) and the device
// can place such a cluster (compat.h cluster_fits), a head's keys fill at most kClusterUnits quant blocks, Dp <= 128,
// and the kernel runs with 16-byte loads.
bool cluster_mean(const QuantQKParams& p) {
  if (!p.smooth_k || p.head_dim_pad > 128 || p.k_len <= 0 || p.batch <= 0 || p.heads_k <= 0 ||
      k_units_per_head(p) > kClusterUnits ||
      !vec_ok(p.q, p.q_stride_b, p.q_stride_h, p.q_stride_n, p.batch, p.heads_q, p.q_len) ||
      !vec_ok(p.k, p.k_stride_b, p.k_stride_h, p.k_stride_n, p.batch, p.heads_k, p.k_len)) {
    return false;
  }
#if defined(SAGE_HIP)
  return false;
#else
  // The largest block the cluster path launches (Dp = 128) stands for every variant: the same register cap and
  // static shared memory.
  return compat::compiled_for_sm90<quant_qk_int8_kernel<false, true>>() &&
         compat::cluster_fits<quant_qk_int8_kernel<false, true>>(kClusterUnits, 2 * 128, 0);
#endif
}

}  // namespace

int64_t quant_qk_int8_workspace_bytes(const QuantQKParams& p) {
  if (!p.smooth_k || p.batch <= 0 || p.heads_k <= 0 || cluster_mean(p)) return 0;
  return p.batch * p.heads_k * num_chunks(p) * p.head_dim_pad * (int64_t)sizeof(double);
}

int launch_quant_qk_int8(const QuantQKParams& p, void* stream_ptr) {
  if (!params_ok(p)) return (int)SAGE_ERROR_INVALID_VALUE;
  const sage_stream_t stream = (sage_stream_t)stream_ptr;
  const bool bf16 = p.dtype == InDtype::kBFloat16;
  const int dp = (int)p.head_dim_pad;
  const int cv_bits = dp == 64 ? 3 : (dp == 128 ? 4 : 5);
  const int threads = 2 * dp;
  const int64_t bhq = p.batch * p.heads_q;
  const int64_t bhk = p.batch * p.heads_k;
  const int64_t q_uph = p.q_len_pad / kUnitRows;
  const int64_t k_uph = k_units_per_head(p);
  const int64_t q_units = bhq * q_uph;
  const int64_t k_units = bhk * k_uph;
  // Grid x is at most 2^31-1 (CUDA); HIP also needs grid*block < 2^32.
#if defined(SAGE_HIP)
  const int64_t max_blocks = (int64_t)UINT32_MAX / kMaxThreads;
#else
  const int64_t max_blocks = INT32_MAX;
#endif
  if (q_units + k_units > max_blocks) return (int)SAGE_ERROR_INVALID_VALUE;
  const bool vq = vec_ok(p.q, p.q_stride_b, p.q_stride_h, p.q_stride_n, p.batch, p.heads_q, p.q_len);
  const bool vk = vec_ok(p.k, p.k_stride_b, p.k_stride_h, p.k_stride_n, p.batch, p.heads_k, p.k_len);

  const int chunks = num_chunks(p);
  const bool by_cluster = cluster_mean(p);
  // cluster_mean: the K blocks start at a cluster boundary and each head takes a whole cluster.
  const int64_t k_first = by_cluster ? (q_units + kClusterUnits - 1) / kClusterUnits * kClusterUnits : q_units;
  const int64_t k_blocks = by_cluster ? bhk * kClusterUnits : k_units;
  if (k_first + k_blocks > max_blocks) return (int)SAGE_ERROR_INVALID_VALUE;
  if (by_cluster && p.k_mean == nullptr) return (int)SAGE_ERROR_INVALID_VALUE;
  if (p.smooth_k && bhk > 0 && !by_cluster) {
    if (p.workspace == nullptr || p.k_mean == nullptr) return (int)SAGE_ERROR_INVALID_VALUE;
    if (bhk * chunks > max_blocks) return (int)SAGE_ERROR_INVALID_VALUE;
    ColsumArgs c;
    c.k = static_cast<const uint16_t*>(p.k);
    c.partials = static_cast<double*>(p.workspace);
    c.k_mean = p.k_mean;
    c.sb = p.k_stride_b;
    c.sh = p.k_stride_h;
    c.sn = p.k_stride_n;
    c.k_len = p.k_len;
    c.rows_per_chunk = (p.k_len + chunks - 1) / chunks;
    c.heads_k = (uint32_t)p.heads_k;
    c.head_dim = (int)p.head_dim;
    c.dp = dp;
    c.cv_bits = cv_bits;
    c.chunks = chunks;
    const dim3 grid((unsigned)(bhk * chunks)), block(kColsumThreads);
    SAGE_BOOL_SWITCH(bf16, kBF16, [&] {
      SAGE_BOOL_SWITCH(vk, kVec, [&] {
        compat::launch<k_colsum_kernel<kBF16, kVec>>(grid, block, 0, stream, p.overlap_launch, c);
      });
    });
    const sage_error_t err = sage_get_last_error();
    if (err != SAGE_SUCCESS) return (int)err;
  }

  if (q_units + k_units == 0) return 0;
  QuantArgs a;
  a.q = static_cast<const uint16_t*>(p.q);
  a.k = static_cast<const uint16_t*>(p.k);
  a.q_out = p.q_int8;
  a.k_out = p.k_int8;
  a.q_scale = p.q_scale;
  a.k_scale = p.k_scale;
  a.partials = static_cast<const double*>(p.workspace);
  a.k_mean = p.k_mean;
  a.q_sb = p.q_stride_b;
  a.q_sh = p.q_stride_h;
  a.q_sn = p.q_stride_n;
  a.k_sb = p.k_stride_b;
  a.k_sh = p.k_stride_h;
  a.k_sn = p.k_stride_n;
  a.q_len = p.q_len;
  a.k_len = p.k_len;
  a.q_len_pad = p.q_len_pad;
  a.k_len_pad = p.k_len_pad;
  a.heads_q = (uint32_t)p.heads_q;
  a.heads_k = (uint32_t)p.heads_k;
  a.q_units = (uint32_t)q_units;
  a.k_first = (uint32_t)k_first;
  a.q_units_per_head = (uint32_t)q_uph;
  a.k_units_per_head = (uint32_t)k_uph;
  a.k_blocks_per_head = (uint32_t)(by_cluster ? kClusterUnits : k_uph);
  a.k_scales_per_head = (uint32_t)(p.k_len_pad / kBlockK);
  a.head_dim = (int)p.head_dim;
  a.dp = dp;
  a.cv_bits = cv_bits;
  a.chunks = chunks;
  a.q_mult = p.q_mult;
  a.smooth_k = p.smooth_k ? 1 : 0;
  a.cluster_mean = by_cluster ? 1 : 0;
  const dim3 grid((unsigned)(k_first + k_blocks)), block(threads);
  const bool v = vq && vk;
  const compat::LaunchMode mode(p.overlap_launch, by_cluster ? kClusterUnits : 1);
  SAGE_BOOL_SWITCH(bf16, kBF16, [&] {
    SAGE_BOOL_SWITCH(v, kVec, [&] {
      compat::launch<quant_qk_int8_kernel<kBF16, kVec>>(grid, block, 0, stream, mode, a);
    });
  });
  return (int)sage_get_last_error();
}

}  // namespace sage
