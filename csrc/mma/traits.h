// Every tile constant of the mma attention kernel and its shared-memory layout, in one place (host and device).
#pragma once
#include <cstdint>

#include "../contract.h"

#ifdef __CUDACC__
#define SAGE_MMA_HOST_DEVICE __host__ __device__
#else
#define SAGE_MMA_HOST_DEVICE  // the host-only test program (test/test_mma_compile.py)
#endif

namespace sage {
namespace mma {

// What V is: 16-bit (the accurate mode, P rounded to V's type) or e4m3 in the V^T layout (the fast mode).
enum class VKind : int { kFloat16 = 0, kBFloat16 = 1, kFloat8 = 2 };

// Rows of kRowBytes in shared memory. Rows of 128 bytes or more are swizzled: 16-byte chunk c of row r sits at
// chunk c ^ (r % 8), so that the 8 rows an ldmatrix phase reads at one chunk fall in 8 different 16-byte bank
// groups without padding (which would not leave room for two CTAs an SM on sm_86 / sm_89 / sm_120 at head_dim
// 128). Shorter rows (64 bytes: int8 at head_dim 64, V^T) are padded by 16 bytes instead (row stride = 5 chunks,
// odd).
template <int kRowBytes>
struct RowTile {
  static constexpr bool kSwizzle = kRowBytes % 128 == 0;
  static constexpr int kStride = kSwizzle ? kRowBytes : kRowBytes + 16;
  // Bytes from the tile's start to chunk c of row r.
  SAGE_MMA_HOST_DEVICE static constexpr int offset(int r, int c) {
    return r * kStride + 16 * (kSwizzle ? c ^ (r & 7) : c);
  }
};

// D: the padded head_dim (64 or 128).
template <int D, VKind V>
struct Traits {
  static constexpr bool kFp8 = V == VKind::kFloat8;
  // Each warp holds 16 query rows (one m16 tile): a second tile's accumulators would leave too few registers for
  // the next step's S, which the pipeline keeps beside this step's P (attention_kernel.cuh). A CTA of 4 warps takes
  // half a q-scale block; two of them an SM run their phases (products, softmax) independently, where one CTA of 8
  // warps would hold them in step at each step's barrier.
  static constexpr int kWarpRows = 16;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kCtaRows = kWarps * kWarpRows;
  static constexpr int kKeys = 64;  // keys a step: one k-scale block
  static_assert(kBlockQ % kCtaRows == 0, "a CTA's rows share one q scale");
  static_assert(kKeys == kBlockK, "a step's keys share one k scale");
  static constexpr int kSTiles = kKeys / 8;  // n8 tiles of S
  static constexpr int kOTiles = D / 8;      // n8 tiles of O
  // Int8 rows of Q and K; V: 16-bit rows of a key's D values, or V^T e4m3 rows of one channel's kKeys keys.
  using QKTile = RowTile<D>;
  using VTile = RowTile<kFp8 ? kKeys : 2 * D>;
  static constexpr int kVRows = kFp8 ? D : kKeys;
  // Two stages of K and V (step n in stage n % 2). Q is read into registers before V's stage 1 is first loaded,
  // so it is staged there.
  static constexpr int kKStage = kKeys * QKTile::kStride;
  static constexpr int kVStage = kVRows * VTile::kStride;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + 2 * kKStage;
  static constexpr int kQOffset = kVOffset + kVStage;
  static_assert(kCtaRows * QKTile::kStride <= kVStage, "Q fits V's stage 1");
  static constexpr int kSmemBytes = kVOffset + 2 * kVStage;
  // Two CTAs an SM on sm_86 / sm_89 / sm_120: 100 KB an SM, 1 KB of it reserved per CTA.
  static_assert(kSmemBytes <= 49 * 1024, "shared memory per CTA");
  // Registers a thread are capped at 64K / (2 * kThreads) = 255.
  static constexpr int kMinCtasPerSm = 2;
};

}  // namespace mma
}  // namespace sage
