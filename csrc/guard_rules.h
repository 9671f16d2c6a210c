// The accuracy guard's rule (docs/SEMANTICS.md, "The accuracy guard"): which query blocks the INT8 Q·Kᵀ would get
// wrong, from per-block statistics a prologue can gather in the pass it makes anyway. Torch-free, so that every
// backend applies the same numbers (today the CPU, csrc/ops/guard.cpp).
#pragma once
#include <cstdint>

namespace sage {
namespace guard {

// Largest estimated standard deviation, in nats, of a score's INT8 rounding error that the accurate mode's bound
// (cosine 0.9999, rel L1 0.015) absorbs: above what the documented inputs reach at every length and head_dim
// measured, with a margin, so that the guard changes none of their bits; sm_scale 1.25x the default, just out of
// the bound, stays under it (benchmarks/accuracy.py --sweep guard; docs/FINDINGS.md).
constexpr double kThresholdNats = 0.017;

// Each element's rounding error is uniform in +-scale/2 (variance scale^2 / 12), so q.k over D channels errs with
// variance D/12 * (rms_q^2 s_k^2 + rms_k^2 s_q^2). For a query block: s_q and rms_q of its sm_scale * q (scale =
// absmax / 127, rms over its real rows' elements); for the keys, the root mean square over the key blocks of its KV
// head (k after smoothing when smooth_k) of each block's s_k and of each block's rms_k (over its real rows): an
// output averages its score errors over the keys, so a mean, not a largest block, which grows with the length.
inline double block_error_variance(int64_t head_dim, double s_q, double rms_q, double mean_s_k, double mean_rms_k) {
  return static_cast<double>(head_dim) / 12.0 *
         (rms_q * rms_q * mean_s_k * mean_s_k + mean_rms_k * mean_rms_k * s_q * s_q);
}

// Flagged unless the estimate is within the threshold: a NaN or infinite one (non-finite inputs) is flagged too.
inline bool block_flagged(double variance) { return !(variance <= kThresholdNats * kThresholdNats); }

}  // namespace guard
}  // namespace sage
