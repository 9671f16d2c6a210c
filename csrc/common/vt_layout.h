// The fast-mode V^T layout of the hand-written attention kernels (csrc/sm90, csrc/mma), written by two kernels: the
// V quantization when sage::attention runs the fast mode on one of them (quant_v_fp8.hip, QuantVParams::v_t) and
// the sm90 launch's V transpose of a v_fp8 given to sage::qk_int8_attention (csrc/sm90/qk_int8_attention_sm90.cu).
// Both store a block's tile through store_tile, so the layout is defined here once.
//
// V^T [batch * heads][D][vt_tokens(kv_len)] e4m3: D the padded head_dim (64 or 128), zero past kv_len and head_dim,
// tokens permuted inside each group of 16: column 4 q + t holds token 2 q + (t & 1) + 8 (t >> 1), the keys that lane
// q of a quad holds in its S accumulators (csrc/sm90/attention_parts.cuh pv_tile_fp8; csrc/mma/warp_mma.h, the
// m16n8k32 A fragment).
#pragma once
#include <cstdint>

namespace sage {
namespace vt {

constexpr int kBlockTokens = 128;  // V^T rows are padded to whole key blocks of the sm90 kernel (its kBlockN)
constexpr int kTileTokens = 64;    // tokens of one store_tile
constexpr int kThreads = 256;      // threads of a block that calls store_tile

inline int64_t vt_tokens(int64_t kv_len) { return (kv_len + kBlockTokens - 1) / kBlockTokens * kBlockTokens; }

// Bytes of the V^T of heads (batch * heads_kv) heads of d (padded head_dim) channels and kv_len tokens.
inline int64_t vt_bytes(int64_t heads, int64_t d, int64_t kv_len) { return heads * d * vt_tokens(kv_len); }

// Bytes of a token's row in a block's shared tile: the 4 extra bytes spread the 16-token groups over the banks.
template <int D>
constexpr int kRow = D + 4;

// Stores a block's tile (kTileTokens tokens x D e4m3 bytes in shared memory, token t at tile + t * kRow<D>, zeros
// where there is no value) at dst, this head's V^T from the tile's first token on, whose rows are nt bytes apart:
// 16-byte stores of V^T rows, four threads to a row's 64 bytes. The caller synchronizes the block before.
template <int D>
__device__ __forceinline__ void store_tile(const uint8_t* tile, uint8_t* dst, int64_t nt) {
  constexpr int kRowBytes = kRow<D>;
  for (int idx = threadIdx.x; idx < D * (kTileTokens / 16); idx += kThreads) {
    const int g = idx % (kTileTokens / 16), d = idx / (kTileTokens / 16);
    const uint8_t* col = tile + g * 16 * kRowBytes + d;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // bytes 4 q .. 4 q + 3: tokens 2 q, 2 q + 1, 2 q + 8, 2 q + 9 of the group
      const uint8_t* tok = col + 2 * q * kRowBytes;
      w[q] = tok[0] | (uint32_t(tok[kRowBytes]) << 8) | (uint32_t(tok[8 * kRowBytes]) << 16) |
             (uint32_t(tok[9 * kRowBytes]) << 24);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(d) * nt + 16 * g) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace vt
}  // namespace sage
