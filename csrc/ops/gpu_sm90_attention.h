// The hand-written Hopper kernel (csrc/sm90) as a kernel of sage::qk_int8_attention. Only CUDA builds whose arch
// list holds 9.0 compile it (setup.py defines SAGE_WITH_SM90 then).
#pragma once
#include <ATen/ATen.h>

#include "input_checks.h"
#include "qk_attention_args.h"

namespace sage {

// Runs the sm90 kernel into out / lse (allocated by allocate_attention_out) when it takes the call: either mode,
// head_dim a multiple of 8, padded to 64 or 128, TMA-compatible V. With Sm90Use::kAuto it also leaves the calls where
// it measured slower than the Triton kernel and picks the schedule that measured faster; kForce runs the serial
// schedule, kForceWs the warp-specialized one. Returns false, having done nothing, when it does not take the call.
bool try_sm90_attention(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse, Sm90Use use);

}  // namespace sage
