// Shapes, layouts and input checks shared by every sage op (CPU and GPU host side).
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "../contract.h"
#include "kernel_choice.h"

namespace sage {

// A [B, H, N, D] view of an input in either layout, with element strides.
struct HeadView {
  int64_t batch, heads, tokens, dim;
  int64_t stride_b, stride_h, stride_n;
};

// "HND" -> true, "NHD" -> false; anything else is an error.
bool is_hnd_layout(const std::string& layout);

HeadView head_view(const at::Tensor& t, bool hnd);

// Checks one input of the attention ops: rank, dtype, last-dim contiguity.
void check_input(const at::Tensor& t, const char* name, bool allow_fp32);

// SAGEATTN_SK1_PROLOGUE: true for "triton", false when unset, empty or "hip"; any other value raises.
// Read at every call, so a change takes effect at the next call (also inside a compiled graph, where the op is
// opaque); a CUDA graph replays the kernels chosen while it was captured.
bool use_triton_prologue();

// SAGEATTN_SK1_SM90 (kernel_choice.h Sm90Use): unset or empty: kAuto, "1": kForce, "ws": kForceWs, "0": kOff; any
// other value raises.
Sm90Use sm90_use();

// SAGEATTN_SK1_MMA (kernel_choice.h MmaUse): unset or empty: kAuto, "1": kForce, "0": kOff; any other value raises.
MmaUse mma_use();

// Both kernel settings, read once per call.
KernelSettings kernel_settings();

// SAGEATTN_SK1_OVERLAP: false for "0", true when unset, empty or "1"; any other value raises. Read at every call.
// True lets the GPU kernels of a call start while the previous kernel finishes, where the GPU can (compat.h launch()).
bool overlap_launches();

// Validates every SAGEATTN_SK1_* variable, whatever the device (check_qkv calls it).
void check_settings();

// Checks q/k (and v when defined) against each other: device, dtype, batch, heads (GQA), head_dim, kv length.
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor* v, bool hnd, bool allow_fp32);

}  // namespace sage
