// Hopper kernel of sage::qk_int8_attention, both P.V modes (qk_int8_attention_sm90.h). Design (part 1 of the Hopper
// work): one warpgroup (128 threads) per CTA of kBlockM = 64 query rows, three CTAs an SM (at most 168 registers a
// thread and 74 KiB of shared memory), whose softmax and wgmma interleave; thread 0 issues every TMA load. K tiles of
// kBlockN = 128 keys in a two-stage ring, V in two stages or one (Smem), each stage with its own "full" mbarrier, so
// that Q.K^T of a block starts as soon as its K has landed; a stage is refilled once every warp is past the wgmma
// that read it. Loads (the producer part) and math (the consumer part) are separate functions.
//
// Per key block: S = Q.K^T on wgmma m64n128k32 s32.s8.s8 (both operands K-major in shared memory), scaled by the
// block's q and k scales; online softmax in base 2 (row statistics in float32, rows shared by the 4 lanes of a
// quad). Accurate mode: P rounded to V's 16-bit type and fed from registers (the S accumulator layout is the
// A-fragment layout) to wgmma m64n{64,128}k16 with V from shared memory as an MN-major B operand. Fast mode: P as
// e4m3 (times 448) from registers to wgmma m64n{64,128}k32 e4m3 with V^T (K-major; tokens permuted to match the
// registers, written by transpose_v_fp8_kernel) into a fresh float32 accumulator per key block.
#include "qk_int8_attention_sm90.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "../contract.h"
#include "ptx.h"
#include "wgmma.h"

namespace sage {
namespace sm90 {
namespace {

constexpr int kBlockM = 64;    // query rows per CTA: one wgmma M
constexpr int kBlockN = 128;   // keys per iteration: two k-scale blocks
constexpr int kThreads = 128;  // one warpgroup
constexpr int kStages = 2;     // K tiles in flight
static_assert(kBlockQ % kBlockM == 0, "a CTA's rows share one q scale");
static_assert(kBlockN == 2 * kBlockK, "two k scales per key block");

// FP8: V^T e4m3 [D][kBlockN] (one box, K-major for the fp8 wgmma); else V 16-bit as D / 64 boxes [kBlockN][64].
// 16-bit V at head_dim 128 has one stage: 74 KiB a CTA, so that three CTAs share an SM (two stages: 106 KiB, two).
template <int D, bool FP8>
struct Smem {
  static constexpr int kVStages = !FP8 && D == 128 ? 1 : kStages;
  static constexpr int kQBytes = kBlockM * D;            // int8
  static constexpr int kKBytes = kBlockN * D;            // int8
  static constexpr int kVBytes = kBlockN * D * (FP8 ? 1 : 2);
  static constexpr int kVBoxBytes = FP8 ? kVBytes : kBlockN * 64 * 2;
  static constexpr int kAlign = 1024;                    // the 128B swizzle pattern repeats every 1024 bytes
  static constexpr int kQ = kAlign;                      // barriers live in the first 1024 bytes
  static constexpr int kK = kQ + kQBytes;
  static constexpr int kV = kK + kStages * kKBytes;
  static constexpr int kBytes = kV + kVStages * kVBytes;
  static constexpr int kAllocBytes = kBytes + kAlign;    // slack to align the dynamic base
  static_assert(kQBytes % kAlign == 0 && kKBytes % kAlign == 0 && kVBoxBytes % kAlign == 0, "aligned tiles");
};


struct Barriers {
  uint64_t q_full;
  uint64_t k_full[kStages];
  uint64_t v_full[kStages];
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Four float32 values as e4m3 (round to nearest even, saturating), a0 in the lowest byte.
__device__ __forceinline__ uint32_t pack4_e4m3(float a0, float a1, float a2, float a3) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a0, a1), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(a2, a3), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
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

// ---- producer: thread 0 issues the loads --------------------------------------------------------------------------

template <int D, bool FP8>
__device__ __forceinline__ void load_k(uint8_t* smem, Barriers* bars, const CUtensorMap* k_map, int stage, int n0,
                                       int bhk) {
  using L = Smem<D, FP8>;
  mbar_arrive_expect_tx(&bars->k_full[stage], L::kKBytes);
  tma_load_3d(smem + L::kK + stage * L::kKBytes, k_map, &bars->k_full[stage], 0, n0, bhk);
}

template <int D, bool FP8>
__device__ __forceinline__ void load_v(uint8_t* smem, Barriers* bars, const CUtensorMap* v_map, int stage, int n0,
                                       int bhk, int hk, int b) {
  using L = Smem<D, FP8>;
  uint8_t* v_dst = smem + L::kV + stage * L::kVBytes;
  mbar_arrive_expect_tx(&bars->v_full[stage], L::kVBytes);
  if constexpr (FP8) {
    tma_load_3d(v_dst, v_map, &bars->v_full[stage], n0, 0, bhk);  // V^T [bhk][D][keys]
  } else {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      tma_load_4d(v_dst + c * L::kVBoxBytes, v_map, &bars->v_full[stage], c * 64, n0, hk, b);
    }
  }
}

// ---- consumer: the warpgroup's math ---------------------------------------------------------------------------------

template <int D>
__device__ __forceinline__ uint64_t qk_desc(uint32_t addr) {
  // K-major int8 rows of D bytes: 128B swizzle for D = 128 (8-row groups of 1024 bytes), 64B for D = 64 (512).
  return D == 128 ? make_smem_desc(addr, 16, 1024, Swizzle::k128B) : make_smem_desc(addr, 16, 512, Swizzle::k64B);
}

template <int D>
__device__ __forceinline__ void qk_tile(int32_t (&s)[kBlockN / 2], uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {  // 32 bytes of head_dim per wgmma, inside the swizzled row
    wgmma_m64n128k32_s32_s8(s, qk_desc<D>(q_addr + kk * 32), qk_desc<D>(k_addr + kk * 32), kk > 0);
  }
}

template <int D, bool BF16>
__device__ __forceinline__ void pv_tile(float (&o)[D / 2], const uint32_t (&p)[kBlockN / 4], uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {  // 16 keys per wgmma: two 8-row groups of 128 bytes
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    // MN-major B: 64 head_dim values (128 bytes) per swizzle atom, the next 64 in the next box (LBO); 8-key groups
    // 1024 bytes apart (SBO).
    const uint64_t desc = make_smem_desc(v_addr + kk * 16 * 128, kBlockN * 128, 1024, Swizzle::k128B);
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
// (transpose_v_fp8) so that register r of the A fragment holds the keys this thread's S accumulators hold.
template <int D>
__device__ __forceinline__ void pv_tile_fp8(float (&o_blk)[D / 2], const uint32_t (&p)[kBlockN / 8], uint32_t vt_addr) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    const uint64_t desc = make_smem_desc(vt_addr + kk * 32, 16, 1024, Swizzle::k128B);
    if constexpr (D == 128) wgmma_m64n128k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
    else wgmma_m64n64k32_f32_e4m3_rs(o_blk, a, desc, kk > 0);
  }
}

template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float x, float y);
template <>
__device__ __forceinline__ void store_pair<__half>(__half* dst, float x, float y) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* dst, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* dst, float x, float y) {
  *reinterpret_cast<float2*>(dst) = make_float2(x, y);
}

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

// CTAs an SM that the register budget is held to (168 registers a thread for three, 128 for four); shared memory
// allows as many (Smem).
template <int D>
constexpr int kCtasPerSm = D == 64 ? 4 : 3;

template <bool FP8>
constexpr int kPRegs = FP8 ? kBlockN / 8 : kBlockN / 4;  // P's A fragment: 4 e4m3 or 2 16-bit values a register

// The online softmax of the rows a thread holds (row and row + 8 of the tile), one key block at a time.
template <bool BF16, bool CAUSAL, bool FP8>
struct OnlineSoftmax {
  // Fast mode: P is made as p * kFp8Max = exp2(s - m + kShift), so that it fills e4m3's range (l sums it so).
  static constexpr float kShift = FP8 ? static_cast<float>(kLog2Fp8Max) : 0.0f;
  float m_row[2], l_row[2];  // l: this thread's partial sums (quad-reduced in the epilogue)
  float q_scale;             // carries sm_scale * log2 e: scores come out in base 2
  const float* k_scales;
  int kv_len, nk_pad, row;

  // Block n from its scores s: updates m_row / l_row, gives P (as the A fragment of P.V) and the rows'
  // alpha = exp2(m_old - m_new). Only the blocks that reach past kv_len or above the diagonal build masks
  // (MASKED); the others take the q.k scale into the exponent's FMA and never compare indices.
  template <bool MASKED>
  __device__ __forceinline__ void block(const int n, const int32_t (&s)[kBlockN / 2], const int cq,
                                        uint32_t (&p)[kPRegs<FP8>], float (&alpha)[2]) {
    const float kInf = __int_as_float(0x7f800000);
    const int n0 = n * kBlockN;
    // Scores in base 2 are x * mul, one mul per k-scale half of the block. Unmasked: x is the integer dot product,
    // mul the scales, and the max is taken on x (mul > 0 keeps the order, rounding too). Masked: x is already
    // scaled, -inf past kv_len and above the diagonal, and mul is 1.
    const float scale0 = q_scale * k_scales[n0 / kBlockK];
    const float scale1 = n0 + kBlockK < nk_pad ? q_scale * k_scales[n0 / kBlockK + 1] : 0.0f;
    const float mul0 = MASKED ? 1.0f : scale0, mul1 = MASKED ? 1.0f : scale1;
    float x[kBlockN / 2];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = 4 * j + 2 * i + c;
          float v = static_cast<float>(s[r]);
          if constexpr (MASKED) {
            v *= j < kBlockN / 16 ? scale0 : scale1;
            const int col = n0 + 8 * j + cq + c;
            if (col >= kv_len || (CAUSAL && col > row + 8 * i)) v = -kInf;
          }
          x[r] = v;
        }
      }
    }
    // A row with no key yet keeps m = -inf and subtracts 0 instead.
    float pf[kBlockN / 2];  // fast mode: p * kFp8Max
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // Partial maxima and sums over independent chains (two a k-scale half, four sums) keep dependencies short.
      float part[4] = {-kInf, -kInf, -kInf, -kInf};  // [2 * half + (j & 1)]
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int c = 2 * (j / (kBlockN / 16)) + (j & 1);
        part[c] = fmaxf(part[c], fmaxf(x[4 * j + 2 * i], x[4 * j + 2 * i + 1]));
      }
      const float mx0 = fmaxf(part[0], part[1]), mx1 = fmaxf(part[2], part[3]);
      float mx = fmaxf(m_row[i], fmaxf(mx0 * mul0, mx1 * mul1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = (mx == -kInf ? 0.0f : mx) - kShift;
      alpha[i] = fast_exp2(m_row[i] - kShift - m_use);
      m_row[i] = mx;
      float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const float mul = j < kBlockN / 16 ? mul0 : mul1;
        const float p0 = fast_exp2(fmaf(x[4 * j + 2 * i], mul, -m_use));
        const float p1 = fast_exp2(fmaf(x[4 * j + 2 * i + 1], mul, -m_use));
        sums[j & 3] += p0 + p1;
        pf[4 * j + 2 * i] = p0;
        pf[4 * j + 2 * i + 1] = p1;
      }
      const float sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
      l_row[i] = l_row[i] * alpha[i] + sum;
    }
    if constexpr (FP8) {
      // A fragment of k-slice kk (32 keys, j = 4 kk .. 4 kk + 3): register 4 kk + i holds row r0 + 8 i, columns
      // 8 j + cq + {0, 1} of j = 4 kk, 4 kk + 1; register 4 kk + 2 + i those of j = 4 kk + 2, 4 kk + 3.
#pragma unroll
      for (int kk = 0; kk < kBlockN / 32; ++kk) {
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
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) p[2 * j + i] = pack2<BF16>(pf[4 * j + 2 * i], pf[4 * j + 2 * i + 1]);
      }
    }
  }
};

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<D>)
    qk_int8_attention_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map, const KernelArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Smem<D, FP8>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + L::kAlign - 1) / L::kAlign *
                                             L::kAlign);
  Barriers* bars = reinterpret_cast<Barriers*>(smem);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Causal: the longest row tiles (most keys) first over the whole grid, so that the short ones fill its tail: the
  // launch order (x fastest) is read as tile-major, every head's last tile first. Otherwise x is the tile.
  int m_tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  if constexpr (CAUSAL) {
    const int64_t heads = gridDim.y;
    const int64_t lin = blockIdx.x + gridDim.x * (blockIdx.y + heads * blockIdx.z);
    const int64_t per_tile = heads * gridDim.z;
    m_tile = static_cast<int>(gridDim.x - 1 - lin / per_tile);
    h = static_cast<int>(lin % per_tile % heads);
    b = static_cast<int>(lin % per_tile / heads);
  }
  const int m0 = m_tile * kBlockM;
  const int hk = h / (a.heads_q / a.heads_kv);
  const int bh = b * a.heads_q + h, bhk = b * a.heads_kv + hk;
  // Keys this tile sees: all kv_len, or (causal, upper-left) those up to its last row.
  const int key_end = CAUSAL ? min(a.kv_len, m0 + kBlockM) : a.kv_len;
  const int n_blocks = (key_end + kBlockN - 1) / kBlockN;

  if (tid == 0) {
    prefetch_tensor_map(&q_map);
    prefetch_tensor_map(&k_map);
    prefetch_tensor_map(&v_map);
    mbar_init(&bars->q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&bars->k_full[s], 1);
      mbar_init(&bars->v_full[s], 1);
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(&bars->q_full, L::kQBytes);
    tma_load_3d(smem + L::kQ, &q_map, &bars->q_full, 0, m0, bh);
    for (int n = 0; n < kStages && n < n_blocks; ++n) {
      load_k<D, FP8>(smem, bars, &k_map, n, n * kBlockN, bhk);
      if (n < L::kVStages) load_v<D, FP8>(smem, bars, &v_map, n, n * kBlockN, bhk, hk, b);
    }
  }

  // Thread (warp, lane) holds rows r0 = 16 * warp + lane / 4 and r0 + 8 of the tile; of each 8 columns, the pair
  // 2 * (lane % 4) + {0, 1}. Accumulator register 4 * j + 2 * i + c: row r0 + 8 i, column 8 j + 2 (lane % 4) + c.
  const int r0 = 16 * warp + lane / 4, cq = 2 * (lane % 4);
  const float q_scale = a.q_scale[static_cast<int64_t>(bh) * (a.nq_pad / kBlockQ) + m0 / kBlockQ];
  const float* k_scales = a.k_scale + static_cast<int64_t>(bhk) * (a.nk_pad / kBlockK);
  const float kInf = __int_as_float(0x7f800000);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  const uint32_t q_addr = smem_addr(smem + L::kQ);
  mbar_wait(&bars->q_full, 0);

  // Blocks before n_full need no mask: they end at or before kv_len and (causal) at or before the tile's first row.
  const int n_full = min(a.kv_len / kBlockN, CAUSAL ? (m0 + 1) / kBlockN : n_blocks);

  OnlineSoftmax<BF16, CAUSAL, FP8> softmax{{-kInf, -kInf}, {0.0f, 0.0f}, q_scale, k_scales, a.kv_len, a.nk_pad,
                                           m0 + r0};
  // One block after the other: Q.K^T, softmax, P.V. (Issuing block n + 1's Q.K^T before block n's P.V, to run
  // the softmax beside it, needs a second S and P register set: 224-255 registers, two CTAs an SM instead of
  // three, and it measured slower; docs/FINDINGS.md F18.) The other CTAs on the SM fill the tensor cores meanwhile.
  for (int n = 0; n < n_blocks; ++n) {
    int32_t s_acc[kBlockN / 2];
    uint32_t p[kPRegs<FP8>];
    float alpha[2];
    const int k_stage = n % kStages;
    mbar_wait(&bars->k_full[k_stage], (n / kStages) & 1);
    wgmma_fence();
    qk_tile<D>(s_acc, q_addr, smem_addr(smem + L::kK + k_stage * L::kKBytes));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) fence_operand(s_acc[i]);
    // Every warp is past Q.K^T of block n: its K stage takes block n + kStages.
    __syncthreads();
    if (tid == 0 && n + kStages < n_blocks) {
      load_k<D, FP8>(smem, bars, &k_map, k_stage, (n + kStages) * kBlockN, bhk);
    }
    if (n < n_full) {
      softmax.template block<false>(n, s_acc, cq, p, alpha);
    } else {
      softmax.template block<true>(n, s_acc, cq, p, alpha);
    }

    // P.V of block n: into O (accurate; O rescaled first) or into a fresh accumulator (fast).
    const int v_stage = n % L::kVStages;
    mbar_wait(&bars->v_full[v_stage], (n / L::kVStages) & 1);
    const uint32_t v_addr = smem_addr(smem + L::kV + v_stage * L::kVBytes);
    float o_blk[FP8 ? D / 2 : 1];
    if constexpr (!FP8) {
#pragma unroll
      for (int r = 0; r < D / 2; ++r) o[r] *= alpha[(r / 2) % 2];  // register 4 j + 2 i + c holds row r0 + 8 i
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) fence_operand(o[i]);
#pragma unroll
    for (int i = 0; i < kPRegs<FP8>; ++i) fence_operand(p[i]);  // the A fragment is written before the fence
    wgmma_fence();
    if constexpr (FP8) {
      pv_tile_fp8<D>(o_blk, p, v_addr);
    } else {
      pv_tile<D, BF16>(o, p, v_addr);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < D / 2; ++r) {
      if constexpr (FP8) {
        fence_operand(o_blk[r]);
        o[r] = fmaf(o[r], alpha[(r / 2) % 2], o_blk[r]);
      } else {
        fence_operand(o[r]);
      }
    }
    // Every warp is past P.V of block n: its V stage takes block n + kVStages.
    __syncthreads();
    if (tid == 0 && n + L::kVStages < n_blocks) {
      load_v<D, FP8>(smem, bars, &v_map, v_stage, (n + L::kVStages) * kBlockN, bhk, hk, b);
    }
  }

  // Epilogue: out = O / l; lse = (m + log2 l) ln 2 (l and O carry kFp8Max in the fast mode).
  Out* out = static_cast<Out*>(a.out) + b * a.o_stride_b + h * a.o_stride_h;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = softmax.l_row[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = m0 + r0 + 8 * i;
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
#else
  __trap();  // built without sm_90a: the host never launches it there (it dispatches on sm_90 only)
#endif
}

// ---- host -------------------------------------------------------------------------------------------------------

using EncodeTiled = decltype(&cuTensorMapEncodeTiled);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                                             &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiled>(p) : nullptr;
  }();
  return fn;
}

// A tiled tensor map; dims and box innermost first, strides in bytes for dims 1.. (rank - 1 of them).
bool make_map(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const uint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(map, type, rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Fast mode: v_fp8 [B, Hkv, N, head_dim] (element strides) -> V^T [B * Hkv][D][nt] e4m3, D the padded head_dim,
// nt = kv_len rounded up to kBlockN, zero past kv_len and head_dim, tokens permuted inside each group of 16:
// column 4 q + t holds token 2 q + (t & 1) + 8 (t >> 1), the keys that lane q of a quad holds in its S accumulators
// (see pv_tile_fp8). A block moves 64 tokens: 4-byte loads along the tokens' rows into shared memory, then 16-byte
// stores of V^T rows, four threads to a row's 64 bytes. V's base and strides are multiples of 4 bytes
// (qk_attention_unsupported).
template <int D>
__global__ void __launch_bounds__(256) transpose_v_fp8_kernel(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                                                              int64_t sb, int64_t sh, int64_t sn, int heads,
                                                              int kv_len, int head_dim, int64_t nt) {
  constexpr int kTokens = 64, kRow = D + 4;  // the row's 4 extra bytes spread the 16-token groups over the banks
  __shared__ __align__(16) uint8_t tile[kTokens * kRow];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int bhk = blockIdx.y, b = bhk / heads, h = bhk % heads;
  const uint8_t* src = v + b * sb + h * sh;
  for (int idx = threadIdx.x; idx < kTokens * (D / 4); idx += blockDim.x) {
    const int t = idx / (D / 4), c = 4 * (idx % (D / 4));
    const int64_t key = n0 + t;
    uint32_t x = 0;
    if (key < kv_len && c < head_dim) x = *reinterpret_cast<const uint32_t*>(src + key * sn + c);
    *reinterpret_cast<uint32_t*>(tile + t * kRow + c) = x;
  }
  __syncthreads();
  uint8_t* dst = vt + static_cast<int64_t>(bhk) * D * nt + n0;
  for (int idx = threadIdx.x; idx < D * (kTokens / 16); idx += blockDim.x) {
    const int g = idx % (kTokens / 16), d = idx / (kTokens / 16);
    const uint8_t* col = tile + g * 16 * kRow + d;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // bytes 4 q .. 4 q + 3: tokens 2 q, 2 q + 1, 2 q + 8, 2 q + 9 of the group
      const uint8_t* tok = col + 2 * q * kRow;
      w[q] = tok[0] | (uint32_t(tok[kRow]) << 8) | (uint32_t(tok[8 * kRow]) << 16) | (uint32_t(tok[9 * kRow]) << 24);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(d) * nt + 16 * g) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

int64_t vt_tokens(const QKAttentionParams& p) { return (p.kv_len + kBlockN - 1) / kBlockN * kBlockN; }

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
int launch(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
           cudaStream_t stream) {
  auto kernel = qk_int8_attention_kernel<D, BF16, Out, CAUSAL, FP8>;
  constexpr int smem = Smem<D, FP8>::kAllocBytes;
  // Above 48 KiB of dynamic shared memory needs the attribute, which is set per device.
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return static_cast<int>(err);
  static std::mutex mutex;
  static std::vector<bool> configured;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<size_t>(device) >= configured.size()) configured.resize(device + 1, false);
    if (!configured[device]) {
      const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (err != cudaSuccess) return static_cast<int>(err);
      configured[device] = true;
    }
  }
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
  const dim3 grid(static_cast<unsigned>((p.qo_len + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, kThreads, smem, stream>>>(q_map, k_map, v_map, a);
  return static_cast<int>(cudaGetLastError());
}

template <int D, bool BF16, bool FP8>
int launch_out(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
               const CUtensorMap& v_map, cudaStream_t stream) {
  switch (p.out_type) {
    case OutType::kFloat16:
      return p.causal ? launch<D, BF16, __half, true, FP8>(p, q_map, k_map, v_map, stream)
                      : launch<D, BF16, __half, false, FP8>(p, q_map, k_map, v_map, stream);
    case OutType::kBFloat16:
      return p.causal ? launch<D, BF16, __nv_bfloat16, true, FP8>(p, q_map, k_map, v_map, stream)
                      : launch<D, BF16, __nv_bfloat16, false, FP8>(p, q_map, k_map, v_map, stream);
    default:
      return p.causal ? launch<D, BF16, float, true, FP8>(p, q_map, k_map, v_map, stream)
                      : launch<D, BF16, float, false, FP8>(p, q_map, k_map, v_map, stream);
  }
}

template <int D>
int launch_v(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
             cudaStream_t stream) {
  switch (p.v_type) {
    case VType::kFloat8:
      return launch_out<D, false, true>(p, q_map, k_map, v_map, stream);
    case VType::kBFloat16:
      return launch_out<D, true, false>(p, q_map, k_map, v_map, stream);
    default:
      return launch_out<D, false, false>(p, q_map, k_map, v_map, stream);
  }
}

}  // namespace

int64_t qk_attention_workspace_bytes(const QKAttentionParams& p) {
  return p.v_type == VType::kFloat8 ? p.batch * p.heads_kv * p.head_dim_pad * vt_tokens(p) : 0;
}

const char* qk_attention_unsupported(const QKAttentionParams& p) {
  if (p.head_dim_pad != 64 && p.head_dim_pad != 128) return "padded head_dim is not 64 or 128";
  // A multiple of 8: V rows of whole 16-byte TMA units, out pairs (FlashAttention-3 asks the same).
  if (p.head_dim < 8 || p.head_dim > p.head_dim_pad || p.head_dim % 8 != 0) return "head_dim is not a multiple of 8";
  if (p.kv_len < 1 || p.qo_len < 1) return "no keys or no queries";
  if (p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) return "heads";
  if (p.batch * p.heads_q > INT32_MAX || p.nq_pad > INT32_MAX || p.nk_pad > INT32_MAX) return "sizes beyond int32";
  if (p.heads_q > 65535 || p.batch > 65535) return "grid y / z hold heads and batch";
  const auto misaligned = [](const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  // TMA: 16-byte aligned base and strides, strides below 2^40 bytes.
  if (misaligned(p.q, 16) || misaligned(p.k, 16)) return "a base address is not 16-byte aligned";
  if (p.v_type == VType::kFloat8) {
    if (p.v_scale == nullptr || p.workspace == nullptr || misaligned(p.workspace, 16)) return "fast mode buffers";
    if (misaligned(p.v, 4) || p.v_stride_b % 4 != 0 || p.v_stride_h % 4 != 0 || p.v_stride_n % 4 != 0) {
      return "fp8 v is not in 4-byte words";  // the V transpose's loads
    }
    if (p.batch * p.heads_kv > 65535) return "grid y of the V transpose";
  } else {
    if (misaligned(p.v, 16)) return "v is not 16-byte aligned";
    for (const int64_t s : {p.v_stride_b, p.v_stride_h, p.v_stride_n}) {
      if (s <= 0 || (s * 2) % 16 != 0 || s * 2 >= (int64_t(1) << 40)) return "v's strides are not TMA strides";
    }
  }
  // The epilogue stores column pairs.
  const int64_t out_bytes = p.out_type == OutType::kFloat32 ? 4 : 2;
  if (misaligned(p.out, 2 * out_bytes)) return "out is not aligned for pair stores";
  for (const int64_t s : {p.o_stride_b, p.o_stride_h, p.o_stride_n}) {
    if (s % 2 != 0) return "out's strides are odd";
  }
  return nullptr;
}

int launch_qk_int8_attention(const QKAttentionParams& p, void* stream_ptr) {
  if (qk_attention_unsupported(p) != nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const uint64_t d = static_cast<uint64_t>(p.head_dim_pad), dv = static_cast<uint64_t>(p.head_dim);
  const CUtensorMapSwizzle qk_swizzle = d == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  CUtensorMap q_map, k_map, v_map;
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nq_pad), static_cast<uint64_t>(p.batch * p.heads_q)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nq_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), kBlockM, 1};
    if (!make_map(&q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.q, dims, strides, box, qk_swizzle)) {
      return kNoTensorMap;
    }
  }
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nk_pad), static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nk_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), kBlockN, 1};
    if (!make_map(&k_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.k, dims, strides, box, qk_swizzle)) {
      return kNoTensorMap;
    }
  }
  if (p.v_type == VType::kFloat8) {
    const uint64_t nt = static_cast<uint64_t>(vt_tokens(p));
    const uint64_t dims[3] = {nt, d, static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {nt, d * nt};
    const uint32_t box[3] = {kBlockN, static_cast<uint32_t>(d), 1};
    if (!make_map(&v_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.workspace, dims, strides, box,
                  CU_TENSOR_MAP_SWIZZLE_128B)) {
      return kNoTensorMap;
    }
    const dim3 grid(static_cast<unsigned>(nt / 64), static_cast<unsigned>(p.batch * p.heads_kv));
    const auto* v = static_cast<const uint8_t*>(p.v);
    auto* vt = static_cast<uint8_t*>(p.workspace);
    const int heads = static_cast<int>(p.heads_kv), kv = static_cast<int>(p.kv_len);
    const int hd = static_cast<int>(p.head_dim);
    if (d == 128) {
      transpose_v_fp8_kernel<128><<<grid, 256, 0, stream>>>(v, vt, p.v_stride_b, p.v_stride_h, p.v_stride_n, heads,
                                                            kv, hd, static_cast<int64_t>(nt));
    } else {
      transpose_v_fp8_kernel<64><<<grid, 256, 0, stream>>>(v, vt, p.v_stride_b, p.v_stride_h, p.v_stride_n, heads,
                                                           kv, hd, static_cast<int64_t>(nt));
    }
    if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return static_cast<int>(err);
  } else {
    // head_dim columns: the box's columns past them (padding) are filled with zeros by the TMA.
    const uint64_t dims[4] = {dv, static_cast<uint64_t>(p.kv_len), static_cast<uint64_t>(p.heads_kv),
                              static_cast<uint64_t>(p.batch)};
    const uint64_t strides[3] = {static_cast<uint64_t>(p.v_stride_n) * 2, static_cast<uint64_t>(p.v_stride_h) * 2,
                                 static_cast<uint64_t>(p.v_stride_b) * 2};
    const uint32_t box[4] = {64, kBlockN, 1, 1};
    const CUtensorMapDataType type =
        p.v_type == VType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    if (!make_map(&v_map, type, 4, p.v, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B)) {
      return kNoTensorMap;
    }
  }
  return d == 128 ? launch_v<128>(p, q_map, k_map, v_map, stream) : launch_v<64>(p, q_map, k_map, v_map, stream);
}

}  // namespace sm90
}  // namespace sage
