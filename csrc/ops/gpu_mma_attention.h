// The hand-written mma.sync kernel (csrc/mma) as a kernel of sage::qk_int8_attention and of sage::attention's fused
// fast mode (gpu_attention.cpp chooses it). Every CUDA build compiles it (setup.py defines SAGE_WITH_MMA), never a
// ROCm one.
#pragma once
#if defined(SAGE_WITH_MMA)
#include <ATen/ATen.h>

#include "../common/attention_params.h"

namespace sage {

// Why the kernel cannot take p (nullptr when it can): see csrc/mma/qk_int8_attention_mma.h.
const char* mma_refusal(const AttentionParams& p);

// Runs the kernel on p (a given fp8 V through its V transpose, into a workspace allocated on like's device); false,
// having launched nothing, when it refuses p.
bool run_mma_attention(const AttentionParams& p, const at::Tensor& like);

}  // namespace sage
#endif  // SAGE_WITH_MMA
