// The hand-written Hopper kernel (csrc/sm90) as a kernel of sage::qk_int8_attention and of sage::attention's fused
// fast mode (gpu_attention.cpp chooses it). Only CUDA builds whose arch list holds 9.0 compile it (setup.py defines
// SAGE_WITH_SM90 then).
#pragma once
#if defined(SAGE_WITH_SM90)
#include <ATen/ATen.h>

#include "../common/attention_params.h"

namespace sage {

// Why the kernel cannot take p in that schedule (nullptr when it can).
const char* sm90_refusal(const AttentionParams& p, bool warp_specialized);

// Runs the kernel on p (a given fp8 V through its V transpose, into a workspace allocated on like's device).
// False, having launched nothing, when it refuses p or cannot encode its TMA maps (warned once).
bool run_sm90_attention(const AttentionParams& p, bool warp_specialized, const at::Tensor& like);

}  // namespace sage
#endif  // SAGE_WITH_SM90
