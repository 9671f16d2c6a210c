// Every tile constant of the mma attention kernel and its shared-memory layout, in one place (host and device).
#pragma once
#include <cstdint>

#include "../contract.h"

namespace sage {
namespace mma {

// What V is: 16-bit (the accurate mode, P rounded to V's type) or e4m3 in the V^T layout (the fast mode).
enum class VKind : int { kFloat16 = 0, kBFloat16 = 1, kFloat8 = 2 };

// D: the padded head_dim (64 or 128).
template <int D, VKind V>
struct Traits {
  static constexpr bool kFp8 = V == VKind::kFloat8;
  // Each warp holds 16 query rows (one m16 tile): a second tile's accumulators would leave too few registers for
  // the next step's S, which the pipeline keeps beside this step's P (attention_kernel.cuh).
  static constexpr int kWarpRows = 16;
  static constexpr int kWarps = kBlockQ / kWarpRows;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr int kCtaRows = kWarps * kWarpRows;
  static constexpr int kKeys = 64;  // keys a step: one k-scale block
  static_assert(kCtaRows == kBlockQ, "a CTA's rows share one q scale");
  static_assert(kKeys == kBlockK, "a step's keys share one k scale");
  static constexpr int kSTiles = kKeys / 8;  // n8 tiles of S
  static constexpr int kOTiles = D / 8;      // n8 tiles of O
  // Shared-memory rows are padded by 16 bytes: the 8 rows an ldmatrix phase reads, at one column, then start in 8
  // different 16-byte bank groups (row stride = 16 (odd) mod 128 bytes).
  static constexpr int kPad = 16;
  static constexpr int kQKRow = D + kPad;  // int8 rows of Q and K
  // V: 16-bit rows of a key's D values, or V^T e4m3 rows of one channel's kKeys keys.
  static constexpr int kVRows = kFp8 ? D : kKeys;
  static constexpr int kVRow = (kFp8 ? kKeys : 2 * D) + kPad;
  // Two stages of K and V (step n in stage n % 2).
  static constexpr int kKStage = kKeys * kQKRow;
  static constexpr int kVStage = kVRows * kVRow;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kCtaRows * kQKRow;
  static constexpr int kVOffset = kKOffset + 2 * kKStage;
  static constexpr int kSmemBytes = kVOffset + 2 * kVStage;
  // The per-block limit of sm_86 / sm_89 / sm_120 (99 KB); two CTAs an SM there want half of their 100 KB.
  static_assert(kSmemBytes <= 99 * 1024, "shared memory per CTA");
  // One CTA of 8 warps an SM: registers a thread are capped at 255.
  static constexpr int kMinCtasPerSm = 1;
};

}  // namespace mma
}  // namespace sage
