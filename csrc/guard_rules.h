// The accuracy guard's rule (docs/SEMANTICS.md, "The accuracy guard"): which query blocks the INT8 Q·Kᵀ would get
// wrong, from per-block statistics a prologue can gather in the pass it makes anyway. Torch-free, so that every
// backend applies the same numbers (today the CPU, csrc/ops/guard.cpp).
#pragma once
#include <cstdint>

namespace sage {
namespace guard {

// Largest estimated standard deviation, in nats, of a score's INT8 rounding error that the accurate mode's bound
// (cosine 0.9999, rel L1 0.015) absorbs: between the largest the documented inputs reach and that of sm_scale 1.25x
// the default, the first to leave the bound (benchmarks/accuracy.py --sweep guard; docs/FINDINGS.md).
constexpr double kThresholdNats = 0.017;

// Each element's rounding error is uniform in +-scale/2 (variance scale^2 / 12), so q.k over D channels errs with
// variance D/12 * (rms_q^2 s_k^2 + rms_k^2 s_q^2). For a query block: s_q and rms_q of its sm_scale * q (scale =
// absmax / 127, rms over the block's BLOCK_Q x D elements, zero padding included), and the largest key-block s_k
// and the largest key-block rms_k of its KV head (k after smoothing when smooth_k), each taken on its own: an upper
// bound of the largest sum over key blocks that needs only two maxima a head.
inline double block_error_variance(int64_t head_dim, double s_q, double rms_q, double max_s_k, double max_rms_k) {
  return static_cast<double>(head_dim) / 12.0 * (rms_q * rms_q * max_s_k * max_s_k + max_rms_k * max_rms_k * s_q * s_q);
}

inline bool block_flagged(double variance) { return variance > kThresholdNats * kThresholdNats; }

}  // namespace guard
}  // namespace sage
