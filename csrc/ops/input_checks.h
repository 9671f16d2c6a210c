// Shapes, layouts and input checks shared by every sage op (CPU and GPU host side).
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "../contract.h"

namespace sage {

// A [B, H, N, D] view of an input in either layout, with element strides.
struct HeadView {
  int64_t batch, heads, tokens, dim;
  int64_t stride_b, stride_h, stride_n;
};

// "HND" -> true, "NHD" -> false; anything else is an error.
bool is_hnd_layout(const std::string& layout);

HeadView head_view(const at::Tensor& t, bool hnd);

// t as a [B, H, N, D] view (a transpose of an NHD tensor, no copy).
at::Tensor as_hnd(const at::Tensor& t, bool hnd);

// The 16-bit tensor an input is computed as: float32 as bfloat16, whose range is float32's (docs/SEMANTICS.md).
at::Tensor as_computed(const at::Tensor& t);

// Checks one input of the attention ops: rank, dtype, last-dim contiguity.
void check_input(const at::Tensor& t, const char* name, bool allow_fp32);

// Checks q/k (and v when defined) against each other: device, dtype, batch, heads (GQA), head_dim, kv length.
void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor* v, bool hnd, bool allow_fp32);

}  // namespace sage
