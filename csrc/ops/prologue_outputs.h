// Outputs of the prologue, allocated the same way by every backend.
#pragma once
#include <ATen/ATen.h>

#include <cmath>

#include "input_checks.h"

namespace sage {

struct QuantQK {
  at::Tensor q_int8, q_scale, k_int8, k_scale, k_mean;
};

constexpr double kMaxSmScale = 1e6;

// sm_scale * log2(e), formed in double and rounded once to float32, so every backend folds the same number.
// |sm_scale| is bounded so that the float32 scores cannot overflow where exact attention stays finite: with
// float16 inputs |q . k| <= 256 * 65504^2 ~ 1.1e12, times 1.44e6 is ~1.6e18, far inside float32 (at 1e36 the
// scores of ordinary inputs are inf and every row NaN). Real models use 1/sqrt(head_dim) or a small multiple.
inline float q_multiplier(double sm_scale) {
  TORCH_CHECK(std::isfinite(sm_scale) && std::fabs(sm_scale) <= kMaxSmScale, "sage: sm_scale must be finite with "
              "|sm_scale| <= 1e6 (beyond it the float32 scores can overflow), got ", sm_scale);
  return static_cast<float>(sm_scale * kLog2e);
}

inline QuantQK allocate_quant_qk(const at::Tensor& q, const at::Tensor& k, bool hnd, bool smooth_k) {
  const HeadView vq = head_view(q, hnd), vk = head_view(k, hnd);
  const int64_t dp = padded_head_dim(vq.dim);
  const int64_t nq = round_up(vq.tokens, kBlockQ), nk = round_up(vk.tokens, kBlockK);
  const auto i8 = q.options().dtype(at::kChar), f32 = q.options().dtype(at::kFloat);
  QuantQK r;
  r.q_int8 = at::empty({vq.batch, vq.heads, nq, dp}, i8);
  r.q_scale = at::empty({vq.batch, vq.heads, nq / kBlockQ}, f32);
  r.k_int8 = at::empty({vk.batch, vk.heads, nk, dp}, i8);
  r.k_scale = at::empty({vk.batch, vk.heads, nk / kBlockK}, f32);
  r.k_mean = smooth_k ? at::empty({vk.batch, vk.heads, vk.dim}, f32) : at::empty({0}, f32);
  return r;
}

}  // namespace sage
