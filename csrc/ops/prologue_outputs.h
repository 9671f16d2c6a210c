// Outputs of the prologue: their shapes, defined once for every backend, and their allocation one tensor each (the
// ops; sage::attention on a GPU carves them from one block instead, gpu_prologue.h).
#pragma once
#include <ATen/ATen.h>

#include <cmath>

#include "input_checks.h"

namespace sage {

struct QuantQK {
  at::Tensor q_int8, q_scale, k_int8, k_scale, k_mean;
};

// sm_scale * log2(e), formed in double and rounded once to float32, so every backend folds the same number, after
// checking sm_scale against kMaxSmScale (csrc/contract.h).
inline float q_multiplier(double sm_scale) {
  TORCH_CHECK(std::isfinite(sm_scale) && std::fabs(sm_scale) <= kMaxSmScale, "sage: sm_scale must be finite with "
              "|sm_scale| <= 1e6 (beyond it the float32 scores can overflow), got ", sm_scale);
  return static_cast<float>(sm_scale * kLog2e);
}

// The shapes of the five outputs: Q and K in int8, padded to whole blocks and to the padded head_dim, a float32
// scale per block, and the key mean [B, Hk, D] (empty without smoothing).
struct QuantQKShapes {
  c10::SmallVector<int64_t, 4> q_int8, q_scale, k_int8, k_scale, k_mean;
};

inline QuantQKShapes quant_qk_shapes(const at::Tensor& q, const at::Tensor& k, bool hnd, bool smooth_k) {
  const HeadView vq = head_view(q, hnd), vk = head_view(k, hnd);
  const int64_t dp = padded_head_dim(vq.dim);
  const int64_t nq = round_up(vq.tokens, kBlockQ), nk = round_up(vk.tokens, kBlockK);
  QuantQKShapes s;
  s.q_int8 = {vq.batch, vq.heads, nq, dp};
  s.q_scale = {vq.batch, vq.heads, nq / kBlockQ};
  s.k_int8 = {vk.batch, vk.heads, nk, dp};
  s.k_scale = {vk.batch, vk.heads, nk / kBlockK};
  s.k_mean = smooth_k ? c10::SmallVector<int64_t, 4>{vk.batch, vk.heads, vk.dim} : c10::SmallVector<int64_t, 4>{0};
  return s;
}

inline QuantQK allocate_quant_qk(const QuantQKShapes& s, const at::TensorOptions& options) {
  const auto i8 = options.dtype(at::kChar), f32 = options.dtype(at::kFloat);
  return {at::empty(s.q_int8, i8), at::empty(s.q_scale, f32), at::empty(s.k_int8, i8), at::empty(s.k_scale, f32),
          at::empty(s.k_mean, f32)};
}

}  // namespace sage
