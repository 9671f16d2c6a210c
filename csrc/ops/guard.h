// The accuracy guard on the CPU (SAGEATTN_SK1_GUARD=on; docs/SEMANTICS.md, "The accuracy guard").
#pragma once
#include <ATen/ATen.h>

namespace sage {

// After the 8-bit computation of sage::attention[_with_lse] (its lse already corrected for smooth_k): the rows of
// every query block that csrc/guard_rules.h flags are computed again into out and lse, with Q·Kᵀ from the caller's
// q and k in their own precision (products and softmax in float32) and P rounded to V's 16-bit type (v16, what the
// op computes V in), in either P·V mode. q16 / k16: the 16-bit tensors the prologue quantized. CPU tensors only.
void guard_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& q16, const at::Tensor& k16,
               const at::Tensor& v16, bool hnd, bool is_causal, double sm_scale, bool smooth_k, at::Tensor& out,
               at::Tensor& lse);

}  // namespace sage
