// What the GPU prologue ops (gpu_prologue.cpp) share with the sm90 fast path (gpu_sm90_attention.cpp).
#pragma once
#include <ATen/ATen.h>

#include "quant_v_fp8.h"

namespace sage {

// Scratch of `bytes` bytes on like's device, 8-byte aligned.
at::Tensor workspace_of(int64_t bytes, const at::Tensor& like);

// The V quantization's launch parameters for a 16-bit v (on the current device) with its v_scale and scratch
// allocated; the caller sets the output (v_fp8 and its strides, or v_t) and keeps this alive until the launch.
struct QuantV {
  QuantVParams p;
  at::Tensor v_scale, workspace;
};
QuantV quant_v_params(const at::Tensor& v, bool hnd);

}  // namespace sage
