// Arguments of sage::qk_int8_attention, checked and allocated the same way by every backend; the fast mode's V step.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <tuple>

namespace sage {

struct AttentionArgs {
  at::Tensor q_int8, q_scale, k_int8, k_scale, v;
  std::optional<at::Tensor> v_scale;
  bool hnd, is_causal, fp8;
  int64_t batch, heads_q, heads_k, qo_len, kv_len, head_dim;
  at::ScalarType out_dtype;
};

AttentionArgs check_attention_args(const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8,
                                   const at::Tensor& k_scale, const at::Tensor& v,
                                   const std::optional<at::Tensor>& v_scale, int64_t qo_len, const std::string& layout,
                                   bool is_causal, at::ScalarType out_dtype);

// out in the layout of v with qo_len tokens and heads_q heads (contiguous), lse [B, Hq, qo_len] float32.
std::tuple<at::Tensor, at::Tensor> allocate_attention_out(const AttentionArgs& a);

// sage::quant_v_fp8 through the dispatcher (v -> v_fp8, v_scale): the fast mode's V step wherever it is not fused.
using QuantVSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, c10::string_view);
const c10::TypedOperatorHandle<QuantVSignature>& quant_v_fp8_op();

}  // namespace sage
