// The hand-written Hopper kernel (csrc/sm90) as a kernel of sage::qk_int8_attention and of
// sage::_qk_int8_attention_fast (gpu_attention.cpp chooses it). Only CUDA builds whose arch list
// holds 9.0 compile it (setup.py defines SAGE_WITH_SM90 then).
#pragma once
#if defined(SAGE_WITH_SM90)
#include <ATen/ATen.h>

#include <functional>
#include <optional>

#include "../common/attention_params.h"

namespace sage {

// The launch of the kernel on p in that schedule (a given fp8 V through its V transpose, into a workspace allocated
// on like's device), with everything that can refuse the call done first: the kernel's checks and its TMA tensor
// maps. nullopt, having launched nothing, when it refuses p or the maps cannot be encoded (warned once).
std::optional<std::function<void()>> prepare_sm90_attention(const AttentionParams& p, bool warp_specialized,
                                                            const at::Tensor& like);

}  // namespace sage
#endif  // SAGE_WITH_SM90
