// What the GPU prologue ops (gpu_prologue.cpp) share with sage::attention (attention.cpp) and its fast mode
// (gpu_attention.cpp).
#pragma once
#include <ATen/ATen.h>

#include <initializer_list>
#include <optional>

#include "prologue_outputs.h"
#include "quant_qk_int8.h"
#include "quant_v_fp8.h"

namespace sage {

// Contiguous tensors of these shapes and element types carved from one allocation on like's device, sharing its
// storage, each as aligned as an allocation of its own: a call's intermediates from one caching-allocator call
// instead of one each, since a lone call waits on the host for all of them before its first kernel. The shapes
// must outlive the call.
struct Part {
  c10::IntArrayRef sizes;
  at::ScalarType dtype;
};
c10::SmallVector<at::Tensor, 8> carve(const at::Tensor& like, std::initializer_list<Part> parts);

// The Q/K prologue's launch parameters for 16-bit q and k (sizes, strides, scale, settings); point_at sets the
// outputs' pointers, the caller the scratch's.
QuantQKParams quant_qk_params(const at::Tensor& q, const at::Tensor& k, bool hnd, double sm_scale, bool smooth_k,
                              const QuantQKShapes& shapes);
void point_at(QuantQKParams& p, const QuantQK& r);

// sage::attention's prologue on a GPU: sage::quant_qk_int8's kernels and bytes, its outputs and scratch carved
// from one allocation. nullopt, having launched nothing, where the op itself must run: SAGEATTN_SK1_PROLOGUE=triton,
// or a build without the prologue's kernels for this GPU (warned once; the op then runs the Triton prologue).
std::optional<QuantQK> quant_qk_int8_one_allocation(const at::Tensor& q, const at::Tensor& k, bool hnd,
                                                    double sm_scale, bool smooth_k);

// The V quantization's launch parameters for a 16-bit v (sizes, strides, settings); the caller allocates and sets
// v_scale, the scratch (quant_v_fp8_workspace_bytes) and the output (v_fp8 and its strides, or v_t).
QuantVParams quant_v_params(const at::Tensor& v, bool hnd);

}  // namespace sage
