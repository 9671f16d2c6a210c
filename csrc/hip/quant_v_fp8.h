// Launcher interface of the hand-written V quantization of the fast mode (no ATen, no torch).
// Host code in csrc/ops fills QuantVParams from tensors and calls launch_quant_v_fp8.
// The numeric contract is docs/SEMANTICS.md "Value quantization for the fast mode"; every offset is 64-bit.
#pragma once
#include <cstdint>

#include "quant_qk_int8.h"  // InDtype

namespace sage {

struct QuantVParams {
  // Input, element strides; logical shape [batch, heads, tokens, head_dim], last dim contiguous.
  const void* v;
  InDtype dtype;
  int64_t batch, heads, tokens, head_dim;
  int64_t stride_b, stride_h, stride_n;
  // Outputs: v_fp8 (float8_e4m3fn bytes) of v's logical shape in element strides, last dim contiguous;
  // v_scale [batch, heads, head_dim] contiguous.
  uint8_t* v_fp8;
  int64_t out_stride_b, out_stride_h, out_stride_n;
  // Or, when v_t is set (v_fp8 and its strides are then not used), the Hopper kernel's V^T layout there
  // (vt_layout.h: [batch * heads][head_dim_pad][vt::vt_tokens(tokens)], 16-byte aligned; head_dim_pad 64 or 128):
  // the same bytes transposed, zero past tokens and head_dim. sage::attention's fast mode on a hand-written kernel
  // (csrc/ops/gpu_attention.cpp).
  uint8_t* v_t;
  float* v_scale;
  int64_t head_dim_pad;  // head_dim rounded up to 64, 128 or 256 (the kernels' column tile)
  // Scratch: at least quant_v_fp8_workspace_bytes(*this) bytes, 4-byte aligned, no initialisation needed.
  void* workspace;
  bool overlap_launch;  // programmatic dependent launches where the GPU has them (NVIDIA sm_90+; compat.h launch())
};

// Bytes of scratch the launch needs.
int64_t quant_v_fp8_workspace_bytes(const QuantVParams& p);

// Bytes of the v_t the kernel writes for p's sizes (vt_layout.h), with head_dim_pad 64 or 128.
int64_t quant_v_fp8_vt_bytes(const QuantVParams& p);

// Enqueues the two kernels (per-chunk channel amax, then quantize into v_fp8 or v_t) on `stream` (a cudaStream_t /
// hipStream_t).
// Returns 0 or the runtime's error code.
int launch_quant_v_fp8(const QuantVParams& p, void* stream);

}  // namespace sage
