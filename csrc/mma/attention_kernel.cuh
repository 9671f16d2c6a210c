// The mma attention kernel (its launcher interface: qk_int8_attention_mma.h; its tiles: traits.h; its instruction
// set: warp_mma.h) and the launch of one instantiation. A CTA of 4 warps (traits.h) takes 64 query rows of one head
// and walks the keys in steps of 64 (one k-scale block) through two shared-memory stages of K and V filled by
// cp.async, one step ahead; each warp issues the next step's Q.K^T before this step's softmax.
// Instantiated per head_dim and V type in inst_*.cu (each file compiled for every CUDA arch of the build).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/device_parts.cuh"  // pack4_e4m3, store_pair
#include "../common/compat.h"  // launch(), wait_for_previous_grid(), allow_dynamic_smem()
#include "../common/vt_layout.h"
#include "instances.h"
#include "traits.h"
#include "warp_mma.h"

namespace sage {
namespace mma {

struct KernelArgs {
  const int8_t* q;
  const float* q_scale;
  const int8_t* k;
  const float* k_scale;
  const void* v;          // 16-bit V in its layout, or the fast mode's V^T
  const float* v_scale;   // fast mode
  void* out;
  float* lse;
  int64_t v_stride_b, v_stride_h, v_stride_n;  // 16-bit V, elements
  int64_t vt_tokens;                           // V^T's row length
  int64_t o_stride_b, o_stride_h, o_stride_n;
  int heads_q, heads_kv, qo_len, kv_len, nq_pad, nk_pad, head_dim;
  OutType out_type;
};

// out = O / l (times v_scale in the fast mode) for the rows this thread holds; rows past qo_len and columns past
// head_dim are not stored. inv_l[mt][i]: 1 / l of row row0 + 16 mt + 8 i.
template <typename Out, int D, VKind V, int kM>
__device__ __forceinline__ void store_out(const KernelArgs& a, const float (&o)[kM][D / 8][4],
                                          const float (&inv_l)[kM][2], int b, int h, int64_t bhk, int row0,
                                          int lane) {
  Out* out = static_cast<Out*>(a.out) + b * a.o_stride_b + h * a.o_stride_h;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 16 * mt + 8 * i;
      if (row >= a.qo_len) continue;
      Out* dst = out + static_cast<int64_t>(row) * a.o_stride_n;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = 8 * j + acc_col(lane, 0);  // and col + 1: head_dim is a multiple of 8
        if (col >= a.head_dim) continue;
        float x = o[mt][j][2 * i] * inv_l[mt][i], y = o[mt][j][2 * i + 1] * inv_l[mt][i];
        if constexpr (V == VKind::kFloat8) {  // l sums p * kFp8Max: out = acc * v_scale / l
          const float* vs = a.v_scale + bhk * a.head_dim + col;
          x *= vs[0];
          y *= vs[1];
        }
        store_pair<Out>(dst + col, x, y);
      }
    }
  }
}

template <int D, VKind V, bool CAUSAL>
__global__ void __launch_bounds__(Traits<D, V>::kThreads, Traits<D, V>::kMinCtasPerSm)
    qk_int8_attention_mma_kernel(const KernelArgs a) {
  using T = Traits<D, V>;
  constexpr bool FP8 = T::kFp8, BF16 = V == VKind::kBFloat16;
  constexpr int kM = T::kMTiles, kS = T::kSTiles, kO = T::kOTiles, kKeys = T::kKeys;
  // The fast mode's P is made as p * kFp8Max = exp2(s - m + kShift), filling e4m3's range; l sums it so.
  constexpr float kShift = FP8 ? static_cast<float>(kLog2Fp8Max) : 0.0f;
  if constexpr (FP8 && !SAGE_MMA_HAS_FP8) {
    return;  // no e4m3 tensor cores on this target: never launched (qk_attention_unsupported)
  } else {
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* q_s = smem + T::kQOffset;
    using QK = typename T::QKTile;
    using VT = typename T::VTile;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    // Causal CTAs take the longest row tiles (most keys) first over the whole grid, so that short ones fill its
    // tail: the launch order (x fastest) is read as tile-major, every head's last tile first.
    int m_tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    if constexpr (CAUSAL) {
      const int64_t heads = gridDim.y, per_tile = heads * gridDim.z;
      const int64_t lin = blockIdx.x + gridDim.x * (blockIdx.y + heads * blockIdx.z);
      m_tile = static_cast<int>(gridDim.x - 1 - lin / per_tile);
      h = static_cast<int>(lin % per_tile % heads);
      b = static_cast<int>(lin % per_tile / heads);
    }
    const int m0 = m_tile * T::kCtaRows;
    const int hk = h / (a.heads_q / a.heads_kv);
    const int64_t bh = static_cast<int64_t>(b) * a.heads_q + h, bhk = static_cast<int64_t>(b) * a.heads_kv + hk;
    const int key_end = CAUSAL ? min(a.kv_len, m0 + T::kCtaRows) : a.kv_len;
    const int n_blocks = (key_end + kKeys - 1) / kKeys;

    const int8_t* q_src = a.q + (bh * a.nq_pad + m0) * D;
    const int8_t* k_src = a.k + bhk * a.nk_pad * D;
    // Copies of 16 bytes: copy i = tid + it * kThreads goes to row i / kChunks, chunk i % kChunks (kThreads is a
    // multiple of kChunks, so a thread keeps its chunk and steps its row by a constant).
    const auto copies = [&](auto rows_tag, auto chunks_tag, auto copy) {
      constexpr int kRows = decltype(rows_tag)::value, kChunks = decltype(chunks_tag)::value;
      static_assert(T::kThreads % kChunks == 0 && kRows * kChunks % T::kThreads == 0, "whole copies a thread");
      constexpr int kStep = T::kThreads / kChunks;
#pragma unroll
      for (int it = 0; it < kRows * kChunks / T::kThreads; ++it) copy(tid / kChunks + kStep * it, tid % kChunks);
    };
    using QKChunks = std::integral_constant<int, D / 16>;
    const auto load_q = [&] {
      copies(std::integral_constant<int, T::kCtaRows>{}, QKChunks{}, [&](int r, int c) {
        cp_async16(smem_addr(q_s + QK::offset(r, c)), q_src + r * D + 16 * c, true);
      });
    };
    // Step n's K and V go to stage n % 2.
    const auto load_k = [&](int n) {
      const int8_t* src = k_src + static_cast<int64_t>(n) * kKeys * D;  // nk_pad covers whole steps: no check
      uint8_t* k_s = smem + T::kKOffset + (n & 1) * T::kKStage;
      copies(std::integral_constant<int, kKeys>{}, QKChunks{}, [&](int r, int c) {
        cp_async16(smem_addr(k_s + QK::offset(r, c)), src + r * D + 16 * c, true);
      });
    };
    const auto load_v = [&](int n) {
      uint8_t* v_s = smem + T::kVOffset + (n & 1) * T::kVStage;
      if constexpr (FP8) {  // V^T rows: zero past kv_len and head_dim, padded to whole blocks (vt_layout.h)
        const uint8_t* src = static_cast<const uint8_t*>(a.v) + bhk * D * a.vt_tokens + static_cast<int64_t>(n) * kKeys;
        copies(std::integral_constant<int, D>{}, std::integral_constant<int, kKeys / 16>{}, [&](int r, int c) {
          cp_async16(smem_addr(v_s + VT::offset(r, c)), src + r * a.vt_tokens + 16 * c, true);
        });
      } else {  // 16-bit V: zeros past kv_len (P is 0 there, and 0 * NaN garbage would not be) and head_dim
        // One source pointer stepped by rows.
        constexpr int kChunks = D / 8, kStep = T::kThreads / kChunks;
        static_assert(T::kThreads % kChunks == 0 && kKeys % kStep == 0 && kStep % 8 == 0, "whole copies a thread");
        const int c = tid % kChunks, r0 = tid / kChunks;
        const uint16_t* head = static_cast<const uint16_t*>(a.v) + b * a.v_stride_b + hk * a.v_stride_h;
        const uint16_t* src = head + static_cast<int64_t>(n * kKeys + r0) * a.v_stride_n + 8 * c;
        const uint32_t dst = smem_addr(v_s + VT::offset(r0, c));  // rows r0 + kStep it: the same swizzle
        const bool in_dim = 8 * c < a.head_dim;
#pragma unroll
        for (int it = 0; it < kKeys / kStep; ++it) {
          const bool valid = in_dim && n * kKeys + r0 + kStep * it < a.kv_len;
          cp_async16(dst + it * kStep * VT::kStride, valid ? src : head, valid);
          src += kStep * a.v_stride_n;
        }
      }
    };

    // Each lane's ldmatrix rows and chunks (traits.h RowTile: row % 8 is lane % 8 in each, so a fragment's chunk
    // c of the tile is c ^ lane_chunk). Q (A of Q.K^T): matrices rows 0-7 / 8-15 of an m-tile, bytes 0-15 / 16-31 of
    // a k-slice. K (B of Q.K^T) and V^T (B of the fast P.V): rows 0-7 bytes 0-15 / 16-31, rows 8-15 bytes 0-15 /
    // 16-31 (B of two n-tiles). 16-bit V (B of the accurate P.V, transposed): keys 0-7 / 8-15 of channels 0-7, then
    // of channels 8-15.
    const auto lane_chunk = [&](auto tile, int c) {
      return decltype(tile)::kSwizzle ? c ^ (lane & 7) : c;
    };
    const uint32_t q_frag = smem_addr(q_s) + (warp * T::kWarpRows + lane % 16) * QK::kStride;
    const int q_chunk = lane_chunk(QK{}, lane / 16);
    const uint32_t k_frag = smem_addr(smem + T::kKOffset) + (lane % 8 + 8 * (lane / 16)) * QK::kStride;
    const int k_chunk = lane_chunk(QK{}, (lane / 8) % 2);
    const uint32_t v_frag = smem_addr(smem + T::kVOffset) +
                            (FP8 ? lane % 8 + 8 * (lane / 16) : lane % 8 + 8 * ((lane / 8) % 2)) * VT::kStride;
    const int v_chunk = lane_chunk(VT{}, FP8 ? (lane / 8) % 2 : lane / 16);

    // Q's A fragments, in registers for the whole kernel once Q has landed (kM * D / 32 * 4 registers).
    uint32_t qa[kM][D / 32][4];
    // s = Q.K^T of the warp's rows and step n's keys (K in stage n % 2). Each K fragment is read from shared memory
    // two products ahead of its use (fragments are asked for in the source order: the wrappers are volatile), so
    // that an mma does not wait on the ldmatrix just before it.
    const auto qk_product = [&](int32_t(&s)[kM][kS][4], int n) {
      const uint32_t k_base = k_frag + (n & 1) * T::kKStage;
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int j = 0; j < kS; ++j) {
#pragma unroll
          for (int r = 0; r < 4; ++r) s[mt][j][r] = 0;
        }
      }
      constexpr int kFrags = D / 32 * kS / 2;  // fragment f: k-slice f / (kS / 2), n-tiles 2 (f % (kS / 2)), + 1
      const auto k_addr = [&](int f) {
        return k_base + (16 * (f % (kS / 2)) * QK::kStride + 16 * ((2 * (f / (kS / 2))) ^ k_chunk));
      };
      uint32_t kb[3][4];
      ldmatrix_x4(kb[0], k_addr(0));
      ldmatrix_x4(kb[1], k_addr(1));
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        if (f + 2 < kFrags) ldmatrix_x4(kb[(f + 2) % 3], k_addr(f + 2));
        const int kk = f / (kS / 2), p = f % (kS / 2);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          mma_s8(s[mt][2 * p], qa[mt][kk], kb[f % 3][0], kb[f % 3][1]);
          mma_s8(s[mt][2 * p + 1], qa[mt][kk], kb[f % 3][2], kb[f % 3][3]);
        }
      }
    };

    // The pipeline: step n's K and V are in flight during step n - 1, and step n + 1's Q.K^T runs on the tensor
    // cores while step n's softmax runs on the others. Group 0: Q and K of step 0; group 1: K of step 1, V of step
    // 0; the group issued at the top of step n: K of step n + 2 (into the stage step n's K leaves), V of step n + 1.
    compat::wait_for_previous_grid();  // the prologue's outputs (csrc/common/compat.h)
    load_q();
    load_k(0);
    cp_async_commit();
    if (n_blocks > 1) load_k(1);
    load_v(0);
    cp_async_commit();

    const float q_scale = a.q_scale[bh * (a.nq_pad / kBlockQ) + m0 / kBlockQ];
    const float* k_scales = a.k_scale + bhk * (a.nk_pad / kBlockK);
    const int row0 = m0 + warp * T::kWarpRows + acc_row(lane, 0);  // rows row0 + 16 mt + 8 i
    const float kInf = __int_as_float(0x7f800000);
    float o[kM][kO][4];
    float m_row[kM][2], l_row[kM][2];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int j = 0; j < kO; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) o[mt][j][r] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        m_row[mt][i] = -kInf;
        l_row[mt][i] = 0.0f;
      }
    }

    cp_async_wait<1>();  // Q and K of step 0
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int kk = 0; kk < D / 32; ++kk) ldmatrix_x4(qa[mt][kk], q_frag + (16 * mt * QK::kStride + 16 * ((2 * kk) ^ q_chunk)));
    }
    int32_t s[kM][kS][4];
    qk_product(s, 0);

#pragma unroll 1
    for (int n = 0; n < n_blocks; ++n) {
      cp_async_wait<0>();  // K of step n + 1, V of step n
      __syncthreads();     // and every warp is done with step n's K and step n - 1's V: their stages may load
      if (n + 2 < n_blocks) load_k(n + 2);
      if (n + 1 < n_blocks) load_v(n + 1);
      cp_async_commit();

      float x[kM][kS][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int j = 0; j < kS; ++j) {
#pragma unroll
          for (int r = 0; r < 4; ++r) x[mt][j][r] = static_cast<float>(s[mt][j][r]);
        }
      }
      if (n + 1 < n_blocks) qk_product(s, n + 1);  // s is free: the next step's products, issued now

      // Online softmax. Only the steps that reach past kv_len or above this warp's first row build masks; the others
      // take the max on the integer products and the q.k scale into the exponent's FMA.
      const int n0 = n * kKeys;
      const float qk = q_scale * k_scales[n];
      const bool masked = n0 + kKeys > a.kv_len || (CAUSAL && n0 + kKeys - 1 > m0 + warp * T::kWarpRows);
      float alpha[kM][2];
      uint32_t p8[FP8 ? kM : 1][2][4];  // the fast mode's P (e4m3)
      const auto softmax = [&](auto masked_tag) {
        constexpr bool kMasked = decltype(masked_tag)::value;
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          if constexpr (kMasked) {
#pragma unroll
            for (int j = 0; j < kS; ++j) {
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int col = n0 + 8 * j + acc_col(lane, r), row = row0 + 16 * mt + 8 * (r / 2);
                x[mt][j][r] = col >= (CAUSAL ? min(a.kv_len, row + 1) : a.kv_len) ? -kInf : x[mt][j][r] * qk;
              }
            }
          }
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            // Maxima and sums in four independent chains: the dependent adds' latency, not their count, is the cost.
            float part[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) part[j] = fmaxf(x[mt][j][2 * i], x[mt][j][2 * i + 1]);
#pragma unroll
            for (int j = 4; j < kS; ++j) part[j % 4] = fmaxf(part[j % 4], fmaxf(x[mt][j][2 * i], x[mt][j][2 * i + 1]));
            float mx = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
            if constexpr (!kMasked) mx *= qk;  // qk >= 0 keeps the order (rounding too)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_row[mt][i], mx);
            const float m_use = (m_new == -kInf ? 0.0f : m_new) - kShift;  // a row with no key yet subtracts 0
            alpha[mt][i] = fast_exp2(m_row[mt][i] - kShift - m_use);
            m_row[mt][i] = m_new;
#pragma unroll
            for (int j = 0; j < 4; ++j) part[j] = 0.0f;
#pragma unroll
            for (int j = 0; j < kS; ++j) {
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                float& e = x[mt][j][2 * i + c];
                e = kMasked ? fast_exp2(e - m_use) : fast_exp2(fmaf(e, qk, -m_use));
                part[j % 4] += e;
              }
            }
            l_row[mt][i] = l_row[mt][i] * alpha[mt][i] + ((part[0] + part[1]) + (part[2] + part[3]));
            if constexpr (FP8) {
              // P's A fragment of k-slice kk (keys 32 kk ..), made here so that x's registers of this row half end:
              // register 2 h + i holds row + 8 i, V^T columns 16 h + 4 t .. + 3, which are (vt_layout.h) keys 2 t,
              // 2 t + 1 of tiles 4 kk + 2 h and 4 kk + 2 h + 1.
#pragma unroll
              for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                  const int j = 4 * kk + 2 * hh;
                  p8[mt][kk][2 * hh + i] = pack4_e4m3(x[mt][j][2 * i], x[mt][j][2 * i + 1], x[mt][j + 1][2 * i],
                                                      x[mt][j + 1][2 * i + 1]);
                }
              }
            }
          }
        }
      };
      if (masked) {
        softmax(std::true_type{});
      } else {
        softmax(std::false_type{});
      }
      // O *= alpha; a warp whose rows all kept their maximum (alpha = 1 in each) skips it: most steps of a long call.
      bool rescale = false;
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) rescale = rescale || alpha[mt][0] != 1.0f || alpha[mt][1] != 1.0f;
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
          for (int j = 0; j < kO; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) o[mt][j][r] *= alpha[mt][r / 2];
          }
        }
      }

      // O += P.V (V in stage n % 2)
      const uint32_t v_base = v_frag + (n & 1) * T::kVStage;
      if constexpr (FP8) {
        // Each step's P.V in a fresh accumulator, added in float32: the e4m3 product keeps fewer bits in its
        // accumulator than float32 (docs/SEMANTICS.md).
        // V^T fragment f: channels 16 (f / 2) .., k-slice f % 2; read two products ahead as in qk_product.
        constexpr int kFrags = kO;
        static_assert(kM == 1, "each V^T fragment is read once, for one m-tile");
        const auto v_addr = [&](int f) { return v_base + (16 * (f / 2) * VT::kStride + 16 * ((2 * (f % 2)) ^ v_chunk)); };
        uint32_t vb[3][4];
        ldmatrix_x4(vb[0], v_addr(0));
        ldmatrix_x4(vb[1], v_addr(1));
#pragma unroll
        for (int p = 0; p < kO / 2; ++p) {
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            float t[2][4] = {};
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              const int f = 2 * p + kk;
              if (mt == 0 && f + 2 < kFrags) ldmatrix_x4(vb[(f + 2) % 3], v_addr(f + 2));
              mma_e4m3(t[0], p8[mt][kk], vb[f % 3][0], vb[f % 3][1], t[0]);
              mma_e4m3(t[1], p8[mt][kk], vb[f % 3][2], vb[f % 3][3], t[1]);
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
              for (int r = 0; r < 4; ++r) o[mt][2 * p + hh][r] += t[hh][r];
            }
          }
        }
      } else {
        // P's A fragment of k-slice kk (keys 16 kk ..): register 2 h + i holds row + 8 i of tile 2 kk + h.
        uint32_t pa[kM][4][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                pa[mt][kk][2 * hh + i] = pack2<BF16>(x[mt][2 * kk + hh][2 * i], x[mt][2 * kk + hh][2 * i + 1]);
              }
            }
          }
        }
        // V fragment f (transposed): keys 16 (f / (kO / 2)) .., channels 16 (f % (kO / 2)) ..; read two products
        // ahead as in qk_product.
        constexpr int kFrags = 4 * kO / 2;
        const auto v_addr = [&](int f) {
          return v_base + (16 * (f / (kO / 2)) * VT::kStride + 16 * ((2 * (f % (kO / 2))) ^ v_chunk));
        };
        uint32_t vb[3][4];
        ldmatrix_x4_trans(vb[0], v_addr(0));
        ldmatrix_x4_trans(vb[1], v_addr(1));
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          if (f + 2 < kFrags) ldmatrix_x4_trans(vb[(f + 2) % 3], v_addr(f + 2));
          const int kk = f / (kO / 2), p = f % (kO / 2);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma_f16<BF16>(o[mt][2 * p], pa[mt][kk], vb[f % 3][0], vb[f % 3][1]);
            mma_f16<BF16>(o[mt][2 * p + 1], pa[mt][kk], vb[f % 3][2], vb[f % 3][3]);
          }
        }
      }
    }

    // Epilogue: l over the quad, out = O / l, lse = (m + log2 l) ln 2 (m and l carry kShift in the fast mode).
    float inv_l[kM][2];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float l = l_row[mt][i];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv_l[mt][i] = 1.0f / l;  // every row sees key 0 (kv_len >= 1); a NaN l stays NaN, as on the CPU
        const int row = row0 + 16 * mt + 8 * i;
        if (lane % 4 == 0 && row < a.qo_len) {
          a.lse[bh * a.qo_len + row] = (m_row[mt][i] - kShift + log2f(l)) * 0.6931471805599453f;
        }
      }
    }
    switch (a.out_type) {
      case OutType::kFloat16: store_out<__half, D, V, kM>(a, o, inv_l, b, h, bhk, row0, lane); break;
      case OutType::kBFloat16: store_out<__nv_bfloat16, D, V, kM>(a, o, inv_l, b, h, bhk, row0, lane); break;
      default: store_out<float, D, V, kM>(a, o, inv_l, b, h, bhk, row0, lane); break;
    }
  }
}

inline KernelArgs make_kernel_args(const AttentionParams& p) {
  KernelArgs a;
  a.q = p.q;
  a.q_scale = p.q_scale;
  a.k = p.k;
  a.k_scale = p.k_scale;
  a.v = p.v;
  a.v_scale = p.v_scale;
  a.out = p.out;
  a.lse = p.lse;
  a.v_stride_b = p.v_stride_b;
  a.v_stride_h = p.v_stride_h;
  a.v_stride_n = p.v_stride_n;
  a.vt_tokens = vt::vt_tokens(p.kv_len);
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
  a.out_type = p.out_type;
  return a;
}

template <auto kernel, int D, VKind V>
int launch_one(const AttentionParams& p, cudaStream_t stream) {
  using T = Traits<D, V>;
  const cudaError_t err = compat::allow_dynamic_smem<kernel>(T::kSmemBytes);
  if (err != cudaSuccess) return static_cast<int>(err);
  const dim3 grid(static_cast<unsigned>((p.qo_len + T::kCtaRows - 1) / T::kCtaRows),
                  static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch));
  compat::launch<kernel>(grid, dim3(T::kThreads), T::kSmemBytes, stream, p.overlap_launch, make_kernel_args(p));
  return static_cast<int>(cudaGetLastError());
}

template <int D, VKind V>
int launch_kernel(const AttentionParams& p, cudaStream_t stream) {
  return p.causal ? launch_one<qk_int8_attention_mma_kernel<D, V, true>, D, V>(p, stream)
                  : launch_one<qk_int8_attention_mma_kernel<D, V, false>, D, V>(p, stream);
}

template <int D, VKind V>
int image_arch() {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, qk_int8_attention_mma_kernel<D, V, false>) != cudaSuccess) {
    (void)cudaGetLastError();  // not left pending for a later launch check
    return 0;
  }
  return attr.binaryVersion;
}

// The explicit instantiations of one head_dim and V type (an inst_*.cu file).
#define SAGE_MMA_INSTANTIATE(D, V)                                                       \
  template int launch_kernel<D, V>(const AttentionParams& p, cudaStream_t stream); \
  template int image_arch<D, V>();

}  // namespace mma
}  // namespace sage
