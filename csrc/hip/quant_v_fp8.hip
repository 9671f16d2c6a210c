// V quantization of the fast mode: per-channel e4m3, bit-exact to docs/SEMANTICS.md "Value quantization for the
// fast mode" (the CPU kernel and the Triton alternate give the same bytes).
//
// Launches per call: 2, no memsets, no atomics.
//   channel_amax_kernel: block (chunk, b*h) takes, per channel, the max of |v|'s bit pattern over its chunk of
//     tokens into the workspace (uint32 [B*H, chunks, Dp]). Unsigned order of non-negative floats is numeric order
//     and NaN sorts above +inf, so "amax >= inf bits" means a non-finite value was seen.
//   quant_v_kernel: block (b*h, tile of 64 tokens) finishes the amax over the chunks, v_scale = RN(amax / 448)
//     (NaN for a non-finite channel; the head's first tile stores it), and stores
//     e4m3(clamp(v / v_scale, -448, 448)) rounded to nearest even, 0 where v_scale is not > 0: into v_fp8, or (VT,
//     QuantVParams::v_t) into a shared tile that vt::store_tile writes out as the Hopper kernel's V^T, whose padding
//     tiles past the tokens get zeros from blocks of their own.
// Both kernels: 256 threads = (1024 / Dp) row groups x (Dp / 4) column quads. A thread owns 4 consecutive channels:
// one 8-byte load and one 4-byte store per row when V is aligned for it (VEC), element by element otherwise.
#if defined(__HIP__)
// Bit-exactness: no mul+add fusion anywhere in this file, compat.h's operations included (hipcc defaults to
// contract=fast), so before the includes.
#pragma clang fp contract(off)
#endif

#include <algorithm>
#include <cstdint>

#include "../common/compat.h"
#include "quant_rules.h"
#include "quant_v_fp8.h"
#include "quant_v_fp8_math.h"
#include "../common/vt_layout.h"

namespace sage {
namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 64;                       // tokens per block of the quant kernel
constexpr int kRowBatch = 8;                        // rows of loads in flight per thread in the quant kernel
constexpr int kAmaxUnroll = 8;                      // rows of loads in flight per thread in the amax kernel
constexpr int kTargetBlocks = 320;                  // amax blocks wanted in flight over the whole GPU
constexpr int kMinChunkRows = 128;
constexpr int kMaxChunks = 16;                      // bounds the partials each quant block re-reads (L2)
using quant::umax;

struct alignas(8) U32x2 {
  uint32_t v[2];
};

struct VArgs {
  const uint16_t* v;
  uint8_t* out;   // v_fp8, or V^T (VT)
  int64_t vt_tokens;  // VT: the V^T rows' length
  float* scale;
  uint32_t* partials;
  int64_t sb, sh, sn, ob, oh, on;
  int64_t tokens, rows_per_chunk, tiles;  // tiles: quant blocks per head
  uint32_t heads;
  int head_dim, dp, chunks;
};

template <bool BF16>
__device__ __forceinline__ float to_float(uint16_t bits) {
  return BF16 ? compat::bf16_bits_to_float(bits) : compat::half_bits_to_float(bits);
}

// The 4 elements of this thread's quad in one row (raw 16-bit storage, element 0 in the low half of word 0);
// columns at or past head_dim read as 0.
template <bool VEC>
__device__ __forceinline__ U32x2 load_quad(const uint16_t* __restrict__ p, int nvalid) {
  U32x2 r;
  if constexpr (VEC) {
    r = *reinterpret_cast<const U32x2*>(p);  // VEC: head_dim % 4 == 0, so nvalid >= 4
  } else {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t lo = 2 * w < nvalid ? (uint32_t)p[2 * w] : 0u;
      const uint32_t hi = 2 * w + 1 < nvalid ? (uint32_t)p[2 * w + 1] : 0u;
      r.v[w] = lo | (hi << 16);
    }
  }
  return r;
}

template <bool BF16>
__device__ __forceinline__ float element(const U32x2& q, int j) {
  const uint32_t w = q.v[j / 2];
  return to_float<BF16>((uint16_t)(j % 2 ? w >> 16 : w & 0xffffu));
}

template <bool BF16, bool VEC>
__global__ void SAGE_LAUNCH_BOUNDS(kThreads, 4) channel_amax_kernel(const VArgs a) {
  __shared__ uint32_t s_max[kThreads * 4];  // [row group][Dp]: 1024 / Dp groups of Dp channels
  compat::wait_for_previous_grid();
  const int tid = (int)threadIdx.x;
  const int quads = a.dp / 4, groups = kThreads / quads;
  const int rg = tid / quads, c0 = 4 * (tid % quads);
  const uint32_t chunk = blockIdx.x % (uint32_t)a.chunks, bh = blockIdx.x / (uint32_t)a.chunks;  // grid < 2^31
  const uint32_t b = bh / a.heads, h = bh % a.heads;
  const uint16_t* __restrict__ src = a.v + (int64_t)b * a.sb + (int64_t)h * a.sh + c0;
  const int nvalid = a.head_dim - c0;
  const int64_t start = (int64_t)chunk * a.rows_per_chunk;
  const int64_t end = a.tokens < start + a.rows_per_chunk ? a.tokens : start + a.rows_per_chunk;

  uint32_t m[4] = {0u, 0u, 0u, 0u};
  if (nvalid > 0) {
    for (int64_t r0 = start + rg; r0 < end; r0 += (int64_t)groups * kAmaxUnroll) {
      U32x2 raw[kAmaxUnroll];
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; ++u) {  // every load first, then the maxima
        const int64_t r = r0 + (int64_t)u * groups;
        if (r < end) {
          raw[u] = load_quad<VEC>(src + r * a.sn, nvalid);
        } else {
          raw[u].v[0] = raw[u].v[1] = 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < kAmaxUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < 4; ++j) m[j] = umax(m[j], quant::abs_bits(element<BF16>(raw[u], j)));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) s_max[rg * a.dp + c0 + j] = m[j];
  __syncthreads();
  if (tid < a.dp) {
    uint32_t r = 0u;
    for (int g = 0; g < groups; ++g) r = umax(r, s_max[g * a.dp + tid]);
    a.partials[((int64_t)bh * a.chunks + chunk) * a.dp + tid] = r;
  }
}

// The max over the chunks' partials of one channel, p[c * stride] for c < n: the loads go out 8 at a time, so that a
// quant block waits about one memory latency per 8 chunks before it can start.
__device__ __forceinline__ uint32_t chunks_amax(const uint32_t* __restrict__ p, int64_t stride, int n) {
  constexpr int kBatch = 8;
  uint32_t m = 0u;
  for (int c0 = 0; c0 < n; c0 += kBatch) {
    uint32_t x[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) x[u] = c0 + u < n ? p[(int64_t)(c0 + u) * stride] : 0u;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) m = umax(m, x[u]);
  }
  return m;
}

// A batch of up to kRowBatch rows of this thread's quad, row i at p + i * step, rows at or past n zero (no load).
template <bool VEC>
__device__ __forceinline__ void load_rows(U32x2 (&raw)[kRowBatch], const uint16_t* __restrict__ p, int64_t step,
                                          int n, int nvalid) {
#pragma unroll
  for (int i = 0; i < kRowBatch; ++i) {
    raw[i].v[0] = raw[i].v[1] = 0u;
    if (i < n) raw[i] = load_quad<VEC>(p + i * step, nvalid);
  }
}

// VT = 0: into v_fp8; VT = 64 or 128 (the padded head_dim): into the Hopper kernel's V^T (vt_layout.h).
template <bool BF16, bool VEC, int VT>
__global__ void SAGE_LAUNCH_BOUNDS(kThreads, 3) quant_v_kernel(const VArgs a) {
  static_assert(VT == 0 || (kThreads == vt::kThreads && kTileRows == vt::kTileTokens), "a block stores one V^T tile");
  __shared__ float s_scale[kThreads];
  __shared__ __align__(16) uint8_t s_tile[VT ? kTileRows * vt::kRow<VT> : 4];  // VT: e4m3 [token][channel]
  compat::wait_for_previous_grid();
  const int tid = (int)threadIdx.x;
  const uint32_t tile = blockIdx.x % (uint32_t)a.tiles, bh = blockIdx.x / (uint32_t)a.tiles;  // grid < 2^31
  const uint32_t b = bh / a.heads, h = bh % a.heads;
  const int quads = a.dp / 4, groups = kThreads / quads, rows = kTileRows / groups;
  const int rg = tid / quads, c0 = 4 * (tid % quads);
  const int nvalid = a.head_dim - c0;
  const int64_t row0 = (int64_t)tile * kTileRows + rg;
  const int64_t left = a.tokens - row0;  // this thread's rows: row0, row0 + groups, ... below tokens
  int n_rows = left <= 0 ? 0 : (int)(left < (int64_t)rows * groups ? (left + groups - 1) / groups : rows);
  if (nvalid <= 0) n_rows = 0;  // padding columns: nothing to load (VT: zeros to store)
  const uint16_t* __restrict__ src = a.v + (int64_t)b * a.sb + (int64_t)h * a.sh + row0 * a.sn + c0;
  uint8_t* __restrict__ dst = a.out + (int64_t)b * a.ob + (int64_t)h * a.oh + row0 * a.on + c0;
  const int64_t step = (int64_t)groups * a.sn, ostep = (int64_t)groups * a.on;
  // The first batch's loads go out before the channel scales are read, so that they are in flight while the block
  // waits for the chunks' maxima (the Q/K kernel loads its rows before the key mean the same way).
  U32x2 raw[kRowBatch];
  load_rows<VEC>(raw, src, step, n_rows, nvalid);

  if (tid < a.dp) {
    const uint32_t m = chunks_amax(a.partials + (int64_t)bh * a.chunks * a.dp + tid, a.dp, a.chunks);
    const float s = quant::bits_to_scale(m, kFp8Max);
    s_scale[tid] = s;
    if (tile == 0 && tid < a.head_dim) a.scale[(int64_t)bh * a.head_dim + tid] = s;
  }
  __syncthreads();
  if (!VT && n_rows == 0) return;
  vquant::ChannelDiv div[4] = {vquant::ChannelDiv(s_scale[c0]), vquant::ChannelDiv(s_scale[c0 + 1]),
                               vquant::ChannelDiv(s_scale[c0 + 2]), vquant::ChannelDiv(s_scale[c0 + 3])};
  // VT: every row of the tile is stored, zeros past n_rows.
  const int end = VT ? rows : n_rows;
  for (int i0 = 0; i0 < end; i0 += kRowBatch, src += kRowBatch * step, dst += kRowBatch * ostep) {
    if (i0 > 0) load_rows<VEC>(raw, src, step, n_rows - i0, nvalid);
#pragma unroll
    for (int i = 0; i < kRowBatch; ++i) {
      if (i0 + i >= end) continue;
      uint32_t word = 0u;
      if (i0 + i < n_rows) {
        float y[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) y[j] = div[j].quotient(element<BF16>(raw[i], j));
        word = vquant::e4m3x4(y[0], y[1], y[2], y[3]);
      }
      if constexpr (VT != 0) {
        if (nvalid < 4) word &= nvalid <= 0 ? 0u : (1u << (8 * nvalid)) - 1u;  // zero past head_dim
        *reinterpret_cast<uint32_t*>(s_tile + (rg + (i0 + i) * groups) * vt::kRow<VT> + c0) = word;
      } else if (VEC) {
        *reinterpret_cast<uint32_t*>(dst + i * ostep) = word;
      } else {
        uint8_t* out = dst + i * ostep;
        for (int j = 0; j < 4 && j < nvalid; ++j) out[j] = (uint8_t)(word >> (8 * j));
      }
    }
  }
  if constexpr (VT != 0) {
    __syncthreads();
    if ((int64_t)tile * kTileRows < a.vt_tokens) {  // no tokens: the one block only stores v_scale
      vt::store_tile<VT>(s_tile, a.out + (int64_t)bh * VT * a.vt_tokens + (int64_t)tile * kTileRows, a.vt_tokens);
    }
  }
}

int num_chunks(const QuantVParams& p) {
  const int64_t bh = p.batch * p.heads;
  if (bh <= 0 || p.tokens <= 0) return 1;
  const int64_t c = std::min<int64_t>((kTargetBlocks + bh - 1) / bh, (p.tokens + kMinChunkRows - 1) / kMinChunkRows);
  return (int)std::max<int64_t>(1, std::min<int64_t>(c, kMaxChunks));
}

// 8-byte loads and 4-byte stores need whole quads (head_dim % 4 == 0) and the bases and every stride that is
// actually used on 4 elements.
bool vec_ok(const QuantVParams& p) {
  if (p.head_dim % 4 != 0 || reinterpret_cast<uintptr_t>(p.v) % 8 != 0) return false;
  const auto used = [](int64_t stride, int64_t count) { return count <= 1 || stride % 4 == 0; };
  if (!used(p.stride_b, p.batch) || !used(p.stride_h, p.heads) || !used(p.stride_n, p.tokens)) return false;
  return p.v_t != nullptr || (reinterpret_cast<uintptr_t>(p.v_fp8) % 4 == 0 && used(p.out_stride_b, p.batch) &&
                              used(p.out_stride_h, p.heads) && used(p.out_stride_n, p.tokens));
}

}  // namespace

int64_t quant_v_fp8_vt_bytes(const QuantVParams& p) {
  return vt::vt_bytes(p.batch * p.heads, p.head_dim_pad, p.tokens);
}

int64_t quant_v_fp8_workspace_bytes(const QuantVParams& p) {
  if (p.batch <= 0 || p.heads <= 0) return 0;
  return p.batch * p.heads * num_chunks(p) * p.head_dim_pad * (int64_t)sizeof(uint32_t);
}

int launch_quant_v_fp8(const QuantVParams& p, void* stream_ptr) {
  const int64_t dp = p.head_dim_pad;
  if (p.dtype != InDtype::kFloat16 && p.dtype != InDtype::kBFloat16) return (int)SAGE_ERROR_INVALID_VALUE;
  if ((dp != 64 && dp != 128 && dp != 256) || p.head_dim < 1 || p.head_dim > dp) return (int)SAGE_ERROR_INVALID_VALUE;
  if (p.batch < 0 || p.heads < 0 || p.tokens < 0) return (int)SAGE_ERROR_INVALID_VALUE;
  const int64_t bh = p.batch * p.heads;
  if (bh == 0) return 0;
  if (p.workspace == nullptr || p.heads > UINT32_MAX) return (int)SAGE_ERROR_INVALID_VALUE;
  // V^T is for the Hopper kernel: NVIDIA builds only, whose kernels alone are instantiated for it.
#if defined(SAGE_HIP)
  if (p.v_t != nullptr) return (int)SAGE_ERROR_INVALID_VALUE;
#endif
  if (p.v_t != nullptr && ((dp != 64 && dp != 128) || reinterpret_cast<uintptr_t>(p.v_t) % 16 != 0)) {
    return (int)SAGE_ERROR_INVALID_VALUE;
  }
  const int chunks = num_chunks(p);
  // One tile stores v_scale; V^T's tiles reach its padded length, past the tokens too (zeros).
  const int64_t tiles = p.v_t != nullptr ? std::max<int64_t>(1, vt::vt_tokens(p.tokens) / kTileRows)
                                         : std::max<int64_t>(1, (p.tokens + kTileRows - 1) / kTileRows);
  // Grid x is at most 2^31-1 (CUDA); HIP also needs grid*block < 2^32.
#if defined(SAGE_HIP)
  const int64_t max_blocks = (int64_t)UINT32_MAX / kThreads;
#else
  const int64_t max_blocks = INT32_MAX;
#endif
  if (bh * chunks > max_blocks || bh * tiles > max_blocks) return (int)SAGE_ERROR_INVALID_VALUE;
  const sage_stream_t stream = (sage_stream_t)stream_ptr;
  VArgs a;
  a.v = static_cast<const uint16_t*>(p.v);
  a.out = p.v_t != nullptr ? p.v_t : p.v_fp8;
  a.vt_tokens = vt::vt_tokens(p.tokens);
  a.scale = p.v_scale;
  a.partials = static_cast<uint32_t*>(p.workspace);
  a.sb = p.stride_b;
  a.sh = p.stride_h;
  a.sn = p.stride_n;
  a.ob = p.out_stride_b;
  a.oh = p.out_stride_h;
  a.on = p.out_stride_n;
  a.tokens = p.tokens;
  a.rows_per_chunk = std::max<int64_t>(1, (p.tokens + chunks - 1) / chunks);
  a.tiles = tiles;
  a.heads = (uint32_t)p.heads;
  a.head_dim = (int)p.head_dim;
  a.dp = (int)dp;
  a.chunks = chunks;
  const bool bf16 = p.dtype == InDtype::kBFloat16, vec = vec_ok(p);
  SAGE_BOOL_SWITCH(bf16, kBF16, [&] {
    SAGE_BOOL_SWITCH(vec, kVec, [&] {
      compat::launch<channel_amax_kernel<kBF16, kVec>>(dim3((unsigned)(bh * chunks)), dim3(kThreads), 0, stream,
                                                       p.overlap_launch, a);
    });
  });
  if (const sage_error_t err = sage_get_last_error(); err != SAGE_SUCCESS) return (int)err;
  [[maybe_unused]] const int vt_dp = p.v_t == nullptr ? 0 : (int)dp;  // V^T's head_dim (NVIDIA builds)
  const dim3 grid((unsigned)(bh * tiles)), block(kThreads);
  SAGE_BOOL_SWITCH(bf16, kBF16, [&] {
    SAGE_BOOL_SWITCH(vec, kVec, [&] {
#if !defined(SAGE_HIP)
      if (vt_dp == 128) {
        compat::launch<quant_v_kernel<kBF16, kVec, 128>>(grid, block, 0, stream, p.overlap_launch, a);
        return;
      }
      if (vt_dp == 64) {
        compat::launch<quant_v_kernel<kBF16, kVec, 64>>(grid, block, 0, stream, p.overlap_launch, a);
        return;
      }
#endif
      compat::launch<quant_v_kernel<kBF16, kVec, 0>>(grid, block, 0, stream, p.overlap_launch, a);
    });
  });
  return (int)sage_get_last_error();
}

}  // namespace sage
