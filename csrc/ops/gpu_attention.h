// sage::attention's fast mode on a GPU with a hand-written kernel (gpu_attention.cpp).
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <tuple>

namespace sage {

// Whether the GPU of device runs the fast mode (float8_e4m3fn V): AMD RDNA4 and NVIDIA sm_89 and newer; on Ampere
// (sm_80 / sm_86) sage::attention runs its accurate mode instead, and sage::qk_int8_attention refuses an fp8 V.
bool gpu_has_e4m3(const c10::Device& device);

// The fast mode from the quantized Q and K and the 16-bit v when kernel_choice.h picks a hand-written kernel for
// it: the V quantization writes that kernel's V^T itself (no v_fp8, no transpose), then the kernel runs. The same
// bytes as sage::quant_v_fp8 followed by sage::qk_int8_attention. Returns (out, lse), or nullopt, having launched
// nothing, where that pair should run instead (not a GPU, SAGEATTN_SK1_PROLOGUE=triton, the Triton kernel chosen or
// the chosen kernel refusing the call, its tensor maps included).
std::optional<std::tuple<at::Tensor, at::Tensor>> try_fused_fast_attention(
    const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8, const at::Tensor& k_scale,
    const at::Tensor& v, int64_t qo_len, const std::string& layout, bool is_causal, at::ScalarType out_dtype);

}  // namespace sage
