// The Triton kernel of sage::qk_int8_attention on a GPU (gpu_triton_kernels.cpp): the kernel every call can run,
// precompiled per arch at build time, else through Triton's JIT.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <tuple>

#include "qk_attention_args.h"

namespace sage {

// Runs the call into out / lse (allocate_attention_out) on a GPU of arch (device_arch) and returns them, or the
// JIT op's own outputs.
std::tuple<at::Tensor, at::Tensor> triton_attention(const AttentionArgs& a, const at::Tensor& out,
                                                    const at::Tensor& lse, const std::string& arch);

}  // namespace sage
