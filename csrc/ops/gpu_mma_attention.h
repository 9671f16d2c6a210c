// The hand-written mma.sync kernel (csrc/mma) as a kernel of sage::qk_int8_attention and of
// sage::_qk_int8_attention_fast (gpu_attention.cpp chooses it). Every CUDA build compiles it
// (setup.py defines SAGE_WITH_MMA), never a ROCm one.
#pragma once
#if defined(SAGE_WITH_MMA)
#include <ATen/ATen.h>

#include <functional>
#include <optional>

#include "../common/attention_params.h"

namespace sage {

// The launch of the kernel on p (a given fp8 V through its V transpose, into a workspace allocated on like's
// device) once its checks passed (csrc/mma/qk_int8_attention_mma.h); nullopt, having launched nothing, when it
// refuses p.
std::optional<std::function<void()>> prepare_mma_attention(const AttentionParams& p, const at::Tensor& like);

}  // namespace sage
#endif  // SAGE_WITH_MMA
