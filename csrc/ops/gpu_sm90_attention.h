// The hand-written Hopper kernel (csrc/sm90) as a kernel of sage::qk_int8_attention and of sage::attention's fast
// mode. Only CUDA builds whose arch list holds 9.0 compile it (setup.py defines SAGE_WITH_SM90 then).
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <tuple>

#include "input_checks.h"
#include "qk_attention_args.h"

namespace sage {

// Runs the sm90 kernel into out / lse (allocated by allocate_attention_out) when it takes the call: an sm_90 GPU,
// SAGEATTN_SK1_SM90 not "0", either mode, head_dim a multiple of 8, padded to 64 or 128, TMA-compatible V. With
// Sm90Use::kAuto it also leaves the calls where it measured slower than the Triton kernel and picks the schedule
// that measured faster; kForce runs the serial schedule, kForceWs the warp-specialized one. Returns false, having
// done nothing, when it does not take the call.
bool try_sm90_attention(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse);

// sage::attention's fast mode on sm_90 from the quantized Q and K and the 16-bit v: the V quantization writes the
// kernel's V^T itself (no v_fp8, no transpose), then the kernel runs. The same bytes as sage::quant_v_fp8 followed
// by sage::qk_int8_attention. Returns (out, lse), or nullopt, having launched nothing, where that pair should run
// instead: not CUDA, not sm_90, SAGEATTN_SK1_PROLOGUE=triton, or a call try_sm90_attention would not take (after
// the V quantization only when the tensor maps cannot be encoded).
std::optional<std::tuple<at::Tensor, at::Tensor>> try_sm90_fast_attention(
    const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8, const at::Tensor& k_scale,
    const at::Tensor& v, int64_t qo_len, const std::string& layout, bool is_causal, at::ScalarType out_dtype);

}  // namespace sage
