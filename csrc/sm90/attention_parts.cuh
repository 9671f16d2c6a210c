// The parts both sm90 attention kernels share (qk_int8_attention_sm90.cu: one warpgroup a CTA, serial;
// qk_int8_attention_sm90_ws.cu: a producer warpgroup and two consumer warpgroups taking turns): tile loads, the
// two products on wgmma, the online softmax of a key block, the epilogue. Both kernels run the same arithmetic in
// the same order, so they give the same bits where both take key blocks of the same size (keys_per_step: all but the
// warp-specialized accurate mode).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <type_traits>
#include <vector>

#include "../contract.h"
#include "../common/device_parts.cuh"  // pack4_e4m3, store_pair
#include "../common/compat.h"  // launch(), wait_for_previous_grid()
#include "../common/vt_layout.h"
#include "ptx.h"
#include "qk_int8_attention_sm90.h"
#include "traits.h"
#include "wgmma.h"

namespace sage {
namespace sm90 {
namespace detail {

// The two schedules' launches (qk_int8_attention_sm90.cu, qk_int8_attention_sm90_ws.cu) on the maps of
// encode_tensor_maps; launch_qk_int8_attention (launch.cu) calls the one p.schedule names.
int launch_serial(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                  const CUtensorMap& v_map, cudaStream_t stream);
int launch_warp_specialized(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                            const CUtensorMap& v_map, cudaStream_t stream);

}  // namespace detail

namespace {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <bool BF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (BF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// ---- loads (one thread issues them) ------------------------------------------------------------------------------

template <int D, bool FP8, int N = kBlockN>
__device__ __forceinline__ void load_k(uint8_t* dst, const CUtensorMap* k_map, uint64_t* full, int n0, int bhk) {
  mbar_arrive_expect_tx(full, Tiles<D, FP8, N>::kKBytes);
  tma_load_3d(dst, k_map, full, 0, n0, bhk);
}

template <int D, bool FP8, int N = kBlockN>
__device__ __forceinline__ void load_v(uint8_t* dst, const CUtensorMap* v_map, uint64_t* full, int n0, int bhk,
                                       int hk, int b) {
  using T = Tiles<D, FP8, N>;
  mbar_arrive_expect_tx(full, T::kVBytes);
  if constexpr (FP8) {
    tma_load_3d(dst, v_map, full, n0, 0, bhk);  // V^T [bhk][D][keys]
  } else {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) tma_load_4d(dst + c * T::kVBoxBytes, v_map, full, c * 64, n0, hk, b);
  }
}

// ---- the two products -----------------------------------------------------------------------------------------------

template <int D>
__device__ __forceinline__ uint64_t qk_desc(uint32_t addr) {
  // K-major int8 rows of D bytes: 128B swizzle for D = 128 (8-row groups of 1024 bytes), 64B for D = 64 (512).
  return D == 128 ? make_smem_desc(addr, 16, 1024, Swizzle::k128B) : make_smem_desc(addr, 16, 512, Swizzle::k64B);
}

// S = Q.K^T of one key block of N keys (wgmma m64nNk32 s32.s8.s8, both operands K-major in shared memory).
template <int D, int N = kBlockN>
__device__ __forceinline__ void qk_tile(int32_t (&s)[N / 2], uint32_t q_addr, uint32_t k_addr) {
  const uint64_t q_desc = qk_desc<D>(q_addr), k_desc = qk_desc<D>(k_addr);
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {  // 32 bytes of head_dim per wgmma, inside the swizzled row
    if constexpr (N == 192) {
      wgmma_m64n192k32_s32_s8(s, desc_advance(q_desc, kk * 32), desc_advance(k_desc, kk * 32), kk > 0);
    } else {
      wgmma_m64n128k32_s32_s8(s, desc_advance(q_desc, kk * 32), desc_advance(k_desc, kk * 32), kk > 0);
    }
  }
}

// Accurate mode: o += P.V, P in V's 16-bit type from registers (the S accumulator layout is the A-fragment layout).
template <int D, bool BF16, int N = kBlockN>
__device__ __forceinline__ void pv_tile(float (&o)[D / 2], const uint32_t (&p)[N / 4], uint32_t v_addr) {
  // MN-major B: 64 head_dim values (128 bytes) per swizzle atom, the next 64 in the next box (LBO); 8-key groups
  // 1024 bytes apart (SBO).
  const uint64_t v_desc = make_smem_desc(v_addr, N * 128, 1024, Swizzle::k128B);
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {  // 16 keys per wgmma: two 8-row groups of 128 bytes
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    const uint64_t desc = desc_advance(v_desc, kk * 16 * 128);
    if constexpr (D == 128) {
      if constexpr (BF16) wgmma_m64n128k16_f32_bf16_rs(o, a, desc);
      else wgmma_m64n128k16_f32_f16_rs(o, a, desc);
    } else {
      if constexpr (BF16) wgmma_m64n64k16_f32_bf16_rs(o, a, desc);
      else wgmma_m64n64k16_f32_f16_rs(o, a, desc);
    }
  }
}

// Fast mode: o_blk = P.V of one key block (a fresh accumulator: the fp8 wgmma keeps ~22 bits, so blocks are summed
// in float32 outside it). V^T rows are head_dim, 128 keys each (one 128B-swizzled row), permuted in groups of 16
// (csrc/common/vt_layout.h) so that register r of the A fragment holds the keys this thread's S accumulators hold.
// SUMS: 8 more columns of V^T follow its D rows (the CTA's ones group, tensor_sum_rows below), and o_blk holds
// D / 2 + 4 values: the block's row sums of e4m3(P) come out in o_blk[D / 2] and o_blk[D / 2 + 2] of lane % 4 = 0.
template <int D, bool SUMS>
constexpr int kBlockAccRegs = D / 2 + (SUMS ? 4 : 0);  // o_blk's values a thread

template <int D, bool SUMS = false>
__device__ __forceinline__ void pv_tile_fp8(float (&o_blk)[kBlockAccRegs<D, SUMS>], const uint32_t (&p)[kBlockN / 8],
                                            uint32_t vt_addr) {
  const uint64_t vt_desc = make_smem_desc(vt_addr, 16, 1024, Swizzle::k128B);
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    const uint64_t desc = desc_advance(vt_desc, kk * 32);
    if constexpr (SUMS) {
      if constexpr (D == 128) wgmma_m64n136k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
      else wgmma_m64n72k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
    } else {
      if constexpr (D == 128) wgmma_m64n128k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
      else wgmma_m64n64k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
    }
  }
}

// The 8 rows of V^T after a stage's D rows (1 KB, one 128B-swizzle group): row 0 e4m3 ones (0x38), rows 2, 4 and 6
// zeros, so that column D + 2 (lane % 4) of P.V is the row sum in lane % 4 = 0 and 0 in the others (store_rows adds
// a quad's values). Rows 1, 3, 5 and 7 are never read into a used column: the barriers may live there. Thread t of
// the CTA's first 128 writes 8 bytes of rows 0, 2, 4, 6 of the groups of the two V stages at v_stages.
template <int D>
__device__ __forceinline__ void tensor_sum_rows(uint8_t* v_stages) {
  using T = Tiles<D, true>;
  const int t = threadIdx.x % 64, row = 2 * (t / 16), off = row * 128 + 8 * (t % 16);
  uint8_t* g = v_stages + (threadIdx.x < 64 ? 0 : T::kVStageBytes) + T::kVBytes;
  st_shared_twice_for_async(smem_addr(g + off), row == 0 ? 0x38383838u : 0u);
}

// Whether the fast mode's row sums come from P.V (pv_tile_fp8<D, true>, tensor_sum_rows): not under a causal mask,
// where the ws kernel's D=128 consumers have no registers left for its 4 more accumulators, and both schedules give
// the same bits.
template <bool CAUSAL, bool FP8>
constexpr bool kTensorSums = FP8 && !CAUSAL;

template <bool FP8, int N = kBlockN>
constexpr int kPRegs = FP8 ? N / 8 : N / 4;  // P's A fragment: 4 e4m3 or 2 16-bit values a register

// ---- arguments, softmax, epilogue -------------------------------------------------------------------------------

struct KernelArgs {
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;  // fast mode: [batch, heads_kv, head_dim]
  void* out;
  float* lse;
  int64_t o_stride_b, o_stride_h, o_stride_n;
  int heads_q, heads_kv, qo_len, kv_len, nq_pad, nk_pad;
  int head_dim;  // of V and out (D, the template argument, is the padded one)
};

inline KernelArgs make_kernel_args(const QKAttentionParams& p) {
  KernelArgs a;
  a.q_scale = p.q_scale;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.out = p.out;
  a.lse = p.lse;
  a.o_stride_b = p.o_stride_b;
  a.o_stride_h = p.o_stride_h;
  a.o_stride_n = p.o_stride_n;
  a.heads_q = static_cast<int>(p.heads_q);
  a.heads_kv = static_cast<int>(p.heads_kv);
  a.qo_len = static_cast<int>(p.qo_len);
  a.kv_len = static_cast<int>(p.kv_len);
  a.nq_pad = static_cast<int>(p.nq_pad);
  a.nk_pad = static_cast<int>(p.nk_pad);
  a.head_dim = static_cast<int>(p.head_dim);
  return a;
}

// Where a CTA of kCtaRows query rows works: its first row m0, head h, batch b, K/V head hk (GQA), the flat indices of
// both, and the key blocks of N keys it sees (all of kv_len, or, causal and upper-left aligned, those up to its last
// row). Causal CTAs take the longest row tiles (most keys) first over the whole grid, so that the short ones fill its
// tail: the launch order (x fastest) is read as tile-major, every head's last tile first. Otherwise x is the tile.
template <bool CAUSAL, int kCtaRows, int N = kBlockN>
struct CtaTile {
  int m0, h, b, hk, bh, bhk, n_blocks;

  __device__ __forceinline__ explicit CtaTile(const KernelArgs& a) {
    int m_tile = blockIdx.x;
    h = blockIdx.y;
    b = blockIdx.z;
    if constexpr (CAUSAL) {
      const int64_t heads = gridDim.y;
      const int64_t lin = blockIdx.x + gridDim.x * (blockIdx.y + heads * blockIdx.z);
      const int64_t per_tile = heads * gridDim.z;
      m_tile = static_cast<int>(gridDim.x - 1 - lin / per_tile);
      h = static_cast<int>(lin % per_tile % heads);
      b = static_cast<int>(lin % per_tile / heads);
    }
    m0 = m_tile * kCtaRows;
    hk = h / (a.heads_q / a.heads_kv);
    bh = b * a.heads_q + h;
    bhk = b * a.heads_kv + hk;
    const int key_end = CAUSAL ? min(a.kv_len, m0 + kCtaRows) : a.kv_len;
    n_blocks = (key_end + N - 1) / N;
  }
};

// The dynamic shared memory's base rounded up to the swizzle repeat (the allocation has that much slack).
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw) {
  constexpr uintptr_t kAlign = 1024;
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kAlign - 1) / kAlign * kAlign);
}

// A CTA's start, shared by both schedules. Thread 0 prefetches the tensor maps and initialises the barriers: Q's
// and each stage's "full" barriers (one arrival, the TMA thread's expect_tx) and, where the schedule has them
// (Bars::kReleases > 0), each stage's "empty" barriers. Then every thread waits for the prologue's grid and for
// thread 0.
template <typename Bars>
__device__ __forceinline__ void start_cta(Bars* bars, const CUtensorMap* q_map, const CUtensorMap* k_map,
                                          const CUtensorMap* v_map) {
  if (threadIdx.x == 0) {
    prefetch_tensor_map(q_map);
    prefetch_tensor_map(k_map);
    prefetch_tensor_map(v_map);
    mbar_init(&bars->q_full, 1);
    for (int s = 0; s < Bars::kStages; ++s) {
      mbar_init(&bars->k_full[s], 1);
      mbar_init(&bars->v_full[s], 1);
      if constexpr (Bars::kReleases > 0) {
        mbar_init(&bars->k_empty[s], Bars::kReleases);
        mbar_init(&bars->v_empty[s], Bars::kReleases);
      }
    }
    fence_barrier_init();
  }
  compat::wait_for_previous_grid();  // the prologue's outputs (csrc/common/compat.h)
  __syncthreads();
}

// The online softmax of the rows a thread holds (row and row + 8 of its warpgroup's tile), one key block of N keys
// (N / kBlockK k-scale groups) at a time. Thread (warp w of the warpgroup, lane) holds rows 16 w + lane / 4 and + 8;
// of each 8 columns, the pair 2 (lane % 4) + {0, 1}. Accumulator register 4 j + 2 i + c: row + 8 i, column
// 8 j + 2 (lane % 4) + c.
template <bool BF16, bool CAUSAL, bool FP8, int N = kBlockN>
struct OnlineSoftmax {
  static constexpr int kGroups = N / kBlockK;  // k scales a block
  static constexpr int kGroupJ = kBlockK / 8;  // values j of one k-scale group
  // Fast mode: P is made as p * kFp8Max = exp2(s - m + kShift), so that it fills e4m3's range (l sums it so).
  static constexpr float kShift = FP8 ? static_cast<float>(kLog2Fp8Max) : 0.0f;
  float m_row[2], l_row[2];  // l: this thread's partial sums (quad-reduced in the epilogue)
  float q_scale;             // carries sm_scale * log2 e: scores come out in base 2
  const float* k_scales;
  int kv_len, nk_pad, row;

  // The q.k scales of block n's k-scale groups (0 past nk_pad). The kernels load them right after issuing the
  // block's Q.K^T (all but the warp-specialized fast mode, qk_int8_attention_sm90_ws.cu), so that the loads' latency
  // passes during the wgmma instead of in front of the softmax.
  struct KScales {
    float s[kGroups];
  };
  __device__ __forceinline__ KScales load_k_scales(const int n) const {
    const int n0 = n * N;
    KScales ks;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      // A block starts before nk_pad, so the first group needs no check; at 192 keys it keeps one all the same,
      // the form in which the warp-specialized accurate consumer compiles without spills (test_sm90_compile.py).
      const bool in_pad = (g == 0 && N == kBlockN) || n0 + g * kBlockK < nk_pad;
      ks.s[g] = in_pad ? q_scale * k_scales[n0 / kBlockK + g] : 0.0f;
    }
    return ks;
  }

  // Row i's maxima over each k-scale group of v (the scaled floats, or the integer dot products), each over two
  // independent chains [2 * group + (j & 1)] that start from their first pairs: a -inf or INT32_MIN seed would cost
  // an instruction a chain (ptxas keeps max(-inf, x), which differs from x when x is NaN).
  template <typename T>
  __device__ __forceinline__ static void group_maxima(const T (&v)[N / 2], const int i, T (&mx)[kGroups]) {
    T part[2 * kGroups];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const int c = 2 * (j / kGroupJ) + (j & 1);
      const T pair = max(v[4 * j + 2 * i], v[4 * j + 2 * i + 1]);
      part[c] = j % kGroupJ < 2 ? pair : max(part[c], pair);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) mx[g] = max(part[2 * g], part[2 * g + 1]);
  }

  // Block n from its scores s and q.k scales: updates m_row / l_row, gives P in float32 (times kFp8Max in the fast
  // mode) and the rows' alpha = exp2(m_old - m_new). Only the blocks that reach past kv_len or above the diagonal
  // build masks (MASKED); the others take the q.k scale into the exponent's FMA and never compare indices.
  // INTEGER_MAX: unmasked, the row maxima are taken on the integer dot products (fewer instructions).
  template <bool MASKED, bool INTEGER_MAX = true, bool SUMS = true>
  __device__ __forceinline__ void scores(const int n, const int32_t (&s)[N / 2], const KScales ks,
                                         const int cq, float (&pf)[N / 2], float (&alpha)[2]) {
    const float kInf = __int_as_float(0x7f800000);
    const int n0 = n * N;
    // Scores in base 2 are x * mul, one mul per k-scale group of the block. Unmasked: x is the integer dot product,
    // mul the scales, and the max is taken on x (mul > 0 keeps the order, rounding too). Masked: x is already
    // scaled, -inf past kv_len and above the diagonal, and mul is 1.
    float mul[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) mul[g] = MASKED ? 1.0f : ks.s[g];
    // Masked: key col = n0 + 8 j + cq + c is masked for row + 8 i past the last key that row sees (kv_len - 1, or
    // causal the diagonal). At 192 keys each value compares a compile-time 8 j + c with one bound a row (last); at
    // 128 keys it compares its column index. Each is the form in which the causal kernels of that width compile
    // without spills (test_sm90_compile.py checks it): the other one spills there.
    [[maybe_unused]] int last[2];
    if constexpr (MASKED && N != kBlockN) {
#pragma unroll
      for (int i = 0; i < 2; ++i) last[i] = (CAUSAL ? min(kv_len - 1, row + 8 * i) : kv_len - 1) - n0 - cq;
    }
    float x[N / 2];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = 4 * j + 2 * i + c;
          float v = static_cast<float>(s[r]);
          if constexpr (MASKED) {
            v *= ks.s[j / kGroupJ];
            if constexpr (N == kBlockN) {
              const int col = n0 + 8 * j + cq + c;
              if (col >= kv_len || (CAUSAL && col > row + 8 * i)) v = -kInf;
            } else if (8 * j + c > last[i]) {
              v = -kInf;
            }
          }
          x[r] = v;
        }
      }
    }
    // A row with no key yet keeps m = -inf and subtracts 0 instead.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // Partial maxima and sums over independent chains (two a k-scale group, four sums) keep dependencies short.
      // On the integer dot products (three-way integer max instructions), the max converts to the same float as the
      // max of the converted values: conversion is monotone.
      float mxg[kGroups];
      if constexpr (MASKED || !INTEGER_MAX) {
        group_maxima(x, i, mxg);
      } else {
        int32_t imx[kGroups];
        group_maxima(s, i, imx);
#pragma unroll
        for (int g = 0; g < kGroups; ++g) mxg[g] = static_cast<float>(imx[g]);
      }
      float mx = m_row[i];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) mx = fmaxf(mx, mxg[g] * mul[g]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = (mx == -kInf ? 0.0f : mx) - kShift;
      alpha[i] = fast_exp2(m_row[i] - kShift - m_use);
      m_row[i] = mx;
      float sums[4];  // each starts from its first pair: 0 + x is an instruction, and the same bits (x >= 0)
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        const float p0 = fast_exp2(fmaf(x[4 * j + 2 * i], mul[j / kGroupJ], -m_use));
        const float p1 = fast_exp2(fmaf(x[4 * j + 2 * i + 1], mul[j / kGroupJ], -m_use));
        if constexpr (SUMS) sums[j & 3] = j < 4 ? p0 + p1 : sums[j & 3] + (p0 + p1);
        pf[4 * j + 2 * i] = p0;
        pf[4 * j + 2 * i + 1] = p1;
      }
      if constexpr (SUMS) {  // else the caller adds the tensor cores' sums of e4m3(P) (pv_tile_fp8)
        const float sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
        l_row[i] = l_row[i] * alpha[i] + sum;
      }
    }
  }

  // Fast mode with the tensor cores' sums: l takes a block's row sums of e4m3(P) out of its o_blk (pv_tile_fp8<D,
  // true>) with the block's alpha, as O takes its P.V.
  template <int D>
  __device__ __forceinline__ void add_tensor_sums(float (&o_blk)[kBlockAccRegs<D, true>], const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      fence_operand(o_blk[D / 2 + 2 * i]);
      l_row[i] = fmaf(l_row[i], alpha[i], o_blk[D / 2 + 2 * i]);
    }
  }

  // P as the A fragment of P.V.
  __device__ __forceinline__ static void pack(const float (&pf)[N / 2], uint32_t (&p)[kPRegs<FP8, N>]) {
    if constexpr (FP8) {
      // A fragment of k-slice kk (32 keys, j = 4 kk .. 4 kk + 3): register 4 kk + i holds row r0 + 8 i, columns
      // 8 j + cq + {0, 1} of j = 4 kk, 4 kk + 1; register 4 kk + 2 + i those of j = 4 kk + 2, 4 kk + 3.
#pragma unroll
      for (int kk = 0; kk < N / 32; ++kk) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int j = 4 * kk + 2 * half;
            p[4 * kk + 2 * half + i] = pack4_e4m3(pf[4 * j + 2 * i], pf[4 * j + 2 * i + 1], pf[4 * (j + 1) + 2 * i],
                                                  pf[4 * (j + 1) + 2 * i + 1]);
          }
        }
      }
    } else {
      // A fragment of k-slice kk (16 keys): registers 4 kk .. 4 kk + 3, register 2 j + i holding row r0 + 8 i,
      // columns 8 j + cq + {0, 1}.
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) p[2 * j + i] = pack2<BF16>(pf[4 * j + 2 * i], pf[4 * j + 2 * i + 1]);
      }
    }
  }
};

// Accurate mode: O *= alpha before block n's P.V adds into it. A warp whose rows all kept their maximum has
// alpha = exp2(0) = 1 in each of them, and multiplying by 1 changes no bit: such a warp skips the multiplies (most
// blocks of a long call, once the row maxima have settled).
template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int r = 0; r < D / 2; ++r) o[r] *= alpha[(r / 2) % 2];  // register 4 j + 2 i + c holds row r0 + 8 i
  }
}

// Epilogue of a thread's two rows (row0 and row0 + 8, absolute): out = O / l, lse = (m + log2 l) ln 2 (l and O
// carry kFp8Max in the fast mode; v_scale is applied here).
template <int D, typename Out, bool FP8, typename Softmax>
__device__ __forceinline__ void store_rows(const KernelArgs& a, const float (&o)[D / 2], const Softmax& softmax,
                                           int b, int h, int bhk, int row0, int cq, int lane) {
  const int bh = b * a.heads_q + h;
  Out* out = static_cast<Out*>(a.out) + b * a.o_stride_b + h * a.o_stride_h;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = softmax.l_row[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + 8 * i;
    if (row >= a.qo_len) continue;
    const float inv = 1.0f / l;  // every row sees key 0 (kv_len >= 1); a NaN l stays NaN, as on the CPU
    Out* dst = out + static_cast<int64_t>(row) * a.o_stride_n;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = 8 * j + cq;  // and col + 1: head_dim is a multiple of 8
      if (col >= a.head_dim) continue;  // padding columns (zero V) are not stored
      float x = o[4 * j + 2 * i] * inv, y = o[4 * j + 2 * i + 1] * inv;
      if constexpr (FP8) {  // l sums p * kFp8Max: out = acc * v_scale / l
        const float* vs = a.v_scale + static_cast<int64_t>(bhk) * a.head_dim + col;
        x *= vs[0];
        y *= vs[1];
      }
      store_pair<Out>(dst + col, x, y);
    }
    if (lane % 4 == 0) {
      const float m = softmax.m_row[i] - softmax.kShift;
      a.lse[static_cast<int64_t>(bh) * a.qo_len + row] = (m + log2f(l)) * 0.6931471805599453f;
    }
  }
}

// ---- host ----------------------------------------------------------------------------------------------------------

// One launch of `kernel` on CTAs of kCtaThreads threads covering kCtaRows query rows each (grid: row tiles x heads
// x batch), with kSmemBytes of dynamic shared memory.
template <auto kernel, int kSmemBytes, int kCtaRows, int kCtaThreads>
int launch_row_tiles(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                     const CUtensorMap& v_map, cudaStream_t stream) {
  const cudaError_t err = compat::allow_dynamic_smem<kernel>(kSmemBytes);
  if (err != cudaSuccess) return static_cast<int>(err);
  const dim3 grid(static_cast<unsigned>((p.qo_len + kCtaRows - 1) / kCtaRows), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  compat::launch<kernel>(grid, dim3(kCtaThreads), kSmemBytes, stream, p.overlap_launch, q_map, k_map, v_map,
                         make_kernel_args(p));
  return static_cast<int>(cudaGetLastError());
}

// Launcher<D, BF16, Out, CAUSAL, FP8>::run(p, maps, stream) of the instantiation the params ask for: head_dim
// padded to 64 or 128; V fp16, bf16 or e4m3 (the fast mode); out fp16, bf16 or float32; causal or not.
template <template <int, bool, typename, bool, bool> class Launcher>
int launch_for_types(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                     const CUtensorMap& v_map, cudaStream_t stream) {
  const auto by_out = [&](auto d, auto bf16, auto fp8) {
    constexpr int D = decltype(d)::value;
    constexpr bool BF16 = decltype(bf16)::value, FP8 = decltype(fp8)::value;
    switch (p.out_type) {
      case OutType::kFloat16:
        return p.causal ? Launcher<D, BF16, __half, true, FP8>::run(p, q_map, k_map, v_map, stream)
                        : Launcher<D, BF16, __half, false, FP8>::run(p, q_map, k_map, v_map, stream);
      case OutType::kBFloat16:
        return p.causal ? Launcher<D, BF16, __nv_bfloat16, true, FP8>::run(p, q_map, k_map, v_map, stream)
                        : Launcher<D, BF16, __nv_bfloat16, false, FP8>::run(p, q_map, k_map, v_map, stream);
      default:
        return p.causal ? Launcher<D, BF16, float, true, FP8>::run(p, q_map, k_map, v_map, stream)
                        : Launcher<D, BF16, float, false, FP8>::run(p, q_map, k_map, v_map, stream);
    }
  };
  const auto by_v = [&](auto d) {
    using False = std::integral_constant<bool, false>;
    using True = std::integral_constant<bool, true>;
    switch (p.v_type) {
      case VType::kFloat8:
      case VType::kFloat8Vt: return by_out(d, False{}, True{});
      case VType::kBFloat16: return by_out(d, True{}, False{});
      default: return by_out(d, False{}, False{});
    }
  };
  return p.head_dim_pad == 128 ? by_v(std::integral_constant<int, 128>{}) : by_v(std::integral_constant<int, 64>{});
}

}  // namespace
}  // namespace sm90
}  // namespace sage
