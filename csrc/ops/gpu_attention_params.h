// Tensors -> AttentionParams (csrc/common/attention_params.h), filled once for whichever hand-written kernel runs a
// call (gpu_sm90_attention.cpp, gpu_mma_attention.cpp), and the call as kernel_choice.h reads it.
#pragma once
#include <ATen/ATen.h>

#include "../common/attention_params.h"
#include "kernel_choice.h"
#include "qk_attention_args.h"

namespace sage {

// Everything but V (pointer, type, strides, v_scale, workspace), for out / lse of allocate_attention_out.
AttentionParams attention_params(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse);

// V as the call gives it (16-bit, or fp8 in V's layout with its v_scale).
void set_given_v(AttentionParams& p, const AttentionArgs& a);

// A workspace of bytes (none when 0) on like's device, pointed at by p.workspace; the caller keeps it alive until
// the launch is enqueued (the caching allocator orders its reuse after the stream's work).
at::Tensor attach_workspace(AttentionParams& p, int64_t bytes, const at::Tensor& like);

// The call of a on a GPU of compute capability arch (kernel_choice.h); fast: the fast mode (a's v may be the 16-bit
// V that sage::attention's fused fast mode quantizes).
KernelCall kernel_call(const AttentionArgs& a, int arch, bool fast);

// The device's compute capability as kernel_choice.h counts it (90 for "sm_90"), 0 on AMD.
int arch_number(const c10::Device& device);

// The hand-written kernels of this build.
constexpr BuiltKernels kBuiltKernels{
#if defined(SAGE_WITH_SM90)
    true,
#else
    false,
#endif
#if defined(SAGE_WITH_MMA)
    true,
#else
    false,
#endif
};

}  // namespace sage
