// Every tile constant and shared-memory layout of the two sm90 schedules: rows and keys a step, stages, threads and
// registers, CTAs an SM, and where each tile and barrier sits in shared memory. The kernels (qk_int8_attention_sm90.cu:
// serial; qk_int8_attention_sm90_ws.cu: warp-specialized), their shared parts (attention_parts.cuh) and the host side
// (launch.cu: the TMA boxes) read them from here.
#pragma once
#include <cstdint>

#include "../contract.h"
#include "../common/vt_layout.h"

namespace sage {
namespace sm90 {
namespace {

// ---- both schedules ---------------------------------------------------------------------------------------------

constexpr int kRows = 64;     // query rows of one warpgroup: one wgmma M
constexpr int kBlockN = 128;  // keys per iteration: two k-scale blocks
static_assert(kBlockQ % (2 * kRows) == 0, "a CTA of one or two warpgroups shares one q scale");
static_assert(kBlockN == 2 * kBlockK, "two k scales per key block");
static_assert(kBlockN == vt::kBlockTokens, "V^T rows hold whole key blocks");

// Keys a softmax step takes: kBlockN, but 192 (three k-scale blocks) in the warp-specialized accurate mode (the
// default's long calls at head_dim 128), whose consumers have the registers for it: its per-block work (turn, waits,
// rescale of O, the maxima's shuffles) spread over 1.5 times the keys. The fast mode's consumers hold a second
// accumulator and keep 128. The host sizes the K and V boxes by it.
constexpr int keys_per_step(bool warp_specialized, bool fp8) {
  return warp_specialized && !fp8 ? 3 * kBlockK : kBlockN;
}

// Shared-memory bytes of one tile of N keys. V: V^T e4m3 [D][N] in one box (K-major for the fp8 wgmma), or 16-bit V
// as D / 64 boxes [N][64] (128-byte swizzled rows).
template <int D, bool FP8, int N = kBlockN>
struct Tiles {
  static_assert(N % kBlockK == 0 && (!FP8 || N == vt::kBlockTokens), "whole k-scale blocks; V^T's key blocks");
  static constexpr int kQBytes = kRows * D;  // int8, one warpgroup's rows
  static constexpr int kKBytes = N * D;
  static constexpr int kVBytes = N * D * (FP8 ? 1 : 2);
  static constexpr int kVBoxBytes = FP8 ? kVBytes : N * 64 * 2;
  // A V stage: the fast mode's V^T is followed by its 1 KB ones group (tensor_sum_rows).
  static constexpr int kVStageBytes = kVBytes + (FP8 ? 1024 : 0);
  static constexpr int kAlign = 1024;  // the 128B swizzle pattern repeats every 1024 bytes (aligned_smem)
  static_assert(kQBytes % kAlign == 0 && kKBytes % kAlign == 0 && kVBoxBytes % kAlign == 0, "aligned tiles");
};

// ---- the serial schedule (one warpgroup a CTA) ------------------------------------------------------------------

constexpr int kThreads = 128;  // one warpgroup
constexpr int kStages = 2;     // K tiles in flight

// Q, a K ring of kStages and a V ring of kVStages (accurate mode: after 1024 bytes of barriers). 16-bit V at head_dim
// 128 has one stage: 74 KiB a CTA, so that three CTAs share an SM (two stages: 106 KiB, two).
// Fast mode: each V^T stage is followed by a 1 KB group of 8 more rows (tensor_sum_rows), and the barriers live in
// the first group's unread rows (row 1), so that three D=128 CTAs still share an SM.
template <int D, bool FP8>
struct Smem {
  using T = Tiles<D, FP8>;
  static constexpr int kVStages = !FP8 && D == 128 ? 1 : kStages;
  static constexpr int kQ = FP8 ? 0 : T::kAlign;  // accurate mode: barriers in the first 1024 bytes
  static constexpr int kK = kQ + T::kQBytes;
  static constexpr int kV = kK + kStages * T::kKBytes;
  static constexpr int kBars = FP8 ? kV + T::kVBytes + 128 : 0;
  static constexpr int kBytes = kV + kVStages * T::kVStageBytes;
  static constexpr int kAllocBytes = kBytes + T::kAlign;  // slack to align the dynamic base
};

struct Barriers {
  static constexpr int kStages = sm90::kStages, kReleases = 0;  // no "empty" barriers: __syncthreads frees a stage
  uint64_t q_full;
  uint64_t k_full[kStages];
  uint64_t v_full[kStages];
};

// CTAs an SM that the register budget is held to (168 registers a thread for three, 128 for four); shared memory
// allows as many (Smem).
template <int D>
constexpr int kCtasPerSm = D == 64 ? 4 : 3;

// An sm_90 SM has 228 KiB of shared memory, and each CTA costs its dynamic bytes and 1 KiB the runtime reserves.
template <int D, bool FP8>
constexpr bool kFitsCtasPerSm = kCtasPerSm<D> * (Smem<D, FP8>::kAllocBytes + 1024) <= 228 * 1024;
static_assert(kFitsCtasPerSm<64, false> && kFitsCtasPerSm<64, true> && kFitsCtasPerSm<128, false> &&
                  kFitsCtasPerSm<128, true>,
              "shared memory for kCtasPerSm CTAs an SM");

// ---- the warp-specialized schedule (a producer and two consumer warpgroups a CTA) --------------------------------

constexpr int kConsumers = 2;                       // consumer warpgroups, kRows query rows each
constexpr int kWarpgroup = 128;
constexpr int kWsThreads = kWarpgroup * (1 + kConsumers);
constexpr int kWsRows = kConsumers * kRows;         // query rows of a CTA: one q-scale block
constexpr int kWsStages = 2;                        // K and V tiles in flight
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(kProducerRegs * kWarpgroup + kConsumerRegs * kWarpgroup * kConsumers <= 65536, "register file");
static_assert(kWsRows == kBlockQ, "a CTA's rows share one q scale");
constexpr int kTurnBarrier = 1;                     // named barrier 1 + w: consumer w's turn on the tensor cores
constexpr int kTurnThreads = 2 * kWarpgroup;        // the one whose turn it is (sync) and the one before it (arrive)
constexpr int kReleases = kConsumers * kWarpgroup / 32;  // one arrival a consumer warp frees a stage

// Keys a key block: 192 in the accurate mode, 128 in the fast mode.
template <bool FP8>
constexpr int kWsKeys = keys_per_step(true, FP8);

// Q (one tile a consumer), then the K and V rings, after 1024 bytes of barriers. Fast mode: each V^T stage is
// followed by a 1 KB group of 8 more rows (tensor_sum_rows).
template <int D, bool FP8>
struct WsSmem {
  using T = Tiles<D, FP8, kWsKeys<FP8>>;
  static constexpr int kQ = T::kAlign;
  static constexpr int kK = kQ + kConsumers * T::kQBytes;
  static constexpr int kV = kK + kWsStages * T::kKBytes;
  static constexpr int kBytes = kV + kWsStages * T::kVStageBytes;
  static constexpr int kAllocBytes = kBytes + T::kAlign;  // slack to align the dynamic base
  static_assert(kAllocBytes <= 227 * 1024, "one CTA's shared memory");
};

struct WsBarriers {
  static constexpr int kStages = kWsStages, kReleases = sm90::kReleases;
  uint64_t q_full;
  uint64_t k_full[kWsStages], k_empty[kWsStages];
  uint64_t v_full[kWsStages], v_empty[kWsStages];
};
static_assert(sizeof(WsBarriers) <= 1024, "barriers fit before Q");

}  // namespace
}  // namespace sm90
}  // namespace sage
