// The GPU kernels of sage::qk_int8_attention and sage::_qk_int8_attention_fast: checks, outputs, then the one kernel
// choice (kernel_choice.h) and the chosen kernel's launch; a hand-written kernel that refuses the call leaves it to
// the Triton kernel.
#include "gpu_attention.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <functional>
#include <optional>

#include "gpu_arch.h"
#include "gpu_attention_params.h"
#include "gpu_prologue.h"
#include "gpu_triton_attention.h"
#include "input_checks.h"
#include "settings.h"
#include "kernel_choice.h"
#if defined(SAGE_WITH_SM90)
#include "gpu_sm90_attention.h"
#endif
#if defined(SAGE_WITH_MMA)
#include "gpu_mma_attention.h"
#endif

namespace sage {
namespace {

// The launch of the chosen hand-written kernel on p, everything that can refuse the call done; nullopt, having
// launched nothing, when it does not take it (or for the Triton kernel).
std::optional<std::function<void()>> prepare_hand_written(AttentionKernel k, const AttentionParams& p,
                                                          const at::Tensor& like) {
#if defined(SAGE_WITH_SM90)
  if (k == AttentionKernel::kSm90Serial || k == AttentionKernel::kSm90Ws) {
    return prepare_sm90_attention(p, k == AttentionKernel::kSm90Ws, like);
  }
#endif
#if defined(SAGE_WITH_MMA)
  if (k == AttentionKernel::kMma) return prepare_mma_attention(p, like);
#endif
  (void)k, (void)p, (void)like;
  return std::nullopt;
}

// The chosen kernel on a: the hand-written one where it takes the call, else the Triton kernel.
std::tuple<at::Tensor, at::Tensor> launch_chosen(AttentionKernel k, const AttentionArgs& a, const at::Tensor& out,
                                                 const at::Tensor& lse, const std::string& arch) {
  if (k != AttentionKernel::kTriton) {
    AttentionParams p = attention_params(a, out, lse);
    set_given_v(p, a);
    if (const auto launch = prepare_hand_written(k, p, a.v)) {
      (*launch)();
      return {out, lse};
    }
  }
  return triton_attention(a, out, lse, arch);
}

AttentionKernel chosen_kernel(const AttentionArgs& a, bool fast) {
  return choose_kernel(kernel_call(a, arch_number(a.v.device()), fast), call_settings().kernels, kBuiltKernels);
}

std::tuple<at::Tensor, at::Tensor> qk_int8_attention_gpu(
    const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8, const at::Tensor& k_scale,
    const at::Tensor& v, const std::optional<at::Tensor>& v_scale, c10::SymInt qo_len_sym,
    c10::string_view layout_view, bool is_causal, at::ScalarType out_dtype) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const std::string arch = device_arch(q_int8.device());  // a GPU torch_sage does not run on: its error first
  const int64_t qo_len = qo_len_sym.guard_int(__FILE__, __LINE__);
  const AttentionArgs a = check_attention_args(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len,
                                               std::string(layout_view), is_causal, out_dtype);
  TORCH_CHECK(!a.fp8 || gpu_has_e4m3(q_int8.device()), "sage::qk_int8_attention: a float8_e4m3fn v (the fast "
              "mode) needs a GPU with e4m3 tensor cores (NVIDIA sm_89 or newer); this one is ", arch);
  const c10::cuda::CUDAGuard guard(q_int8.device());
  auto [out, lse] = allocate_attention_out(a);
  if (lse.numel() == 0) return {out, lse};
  return launch_chosen(chosen_kernel(a, a.fp8), a, out, lse, arch);
}

// Where the chosen kernel is hand-written, V's quantization writes that kernel's V^T (no v_fp8, no transpose) from
// one allocation with v_scale, then the kernel runs; returns false, having launched nothing, where it does not take
// the call (its checks and, for sm90, its tensor maps come first).
bool launch_fused(AttentionKernel k, const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse) {
  // The V quantization's grid holds batch * heads_kv in y: larger calls take the unfused pair.
  if (k == AttentionKernel::kTriton || call_settings().triton_prologue || a.batch * a.heads_k > 65535) return false;
  AttentionParams p = attention_params(a, out, lse);
  QuantVParams quant = quant_v_params(a.v, a.hnd);
  const int64_t v_scale_shape[] = {quant.batch, quant.heads, quant.head_dim};
  const int64_t workspace_bytes = quant_v_fp8_workspace_bytes(quant);
  const int64_t vt_bytes = quant_v_fp8_vt_bytes(quant);
  const auto parts =
      carve(a.v, {{v_scale_shape, at::kFloat}, {{workspace_bytes}, at::kByte}, {{vt_bytes}, at::kByte}});
  p.v = parts[2].const_data_ptr();
  p.v_type = VType::kFloat8Vt;
  p.v_scale = parts[0].const_data_ptr<float>();
  const auto launch = prepare_hand_written(k, p, a.v);
  if (!launch) return false;
  quant.v_scale = parts[0].data_ptr<float>();
  quant.workspace = workspace_bytes > 0 ? parts[1].data_ptr() : nullptr;
  quant.v_t = static_cast<uint8_t*>(parts[2].data_ptr());
  const int err = launch_quant_v_fp8(quant, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "sage::_qk_int8_attention_fast: the V quantization failed to launch (CUDA error ", err,
              ")");
  (*launch)();
  return true;
}

// sage::_qk_int8_attention_fast on a GPU: the kernel is chosen once; fused where it can be, else V is quantized by
// sage::quant_v_fp8 (its GPU or Triton kernel) and the same choice runs on the given v_fp8.
std::tuple<at::Tensor, at::Tensor> qk_int8_attention_fast_gpu(
    const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8, const at::Tensor& k_scale,
    const at::Tensor& v, c10::SymInt qo_len_sym, c10::string_view layout_view, bool is_causal,
    at::ScalarType out_dtype) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const std::string arch = device_arch(q_int8.device());
  const int64_t qo_len = qo_len_sym.guard_int(__FILE__, __LINE__);
  const std::string layout(layout_view);
  check_input(v, "v", /*allow_fp32=*/false);  // v is quantized here: 16-bit, as sage::quant_v_fp8 takes it
  // V as given (16-bit): the checks of qk_int8_attention's accurate mode, which hold for the fast one too.
  const AttentionArgs a =
      check_attention_args(q_int8, q_scale, k_int8, k_scale, v, std::nullopt, qo_len, layout, is_causal, out_dtype);
  TORCH_CHECK(gpu_has_e4m3(q_int8.device()), "sage::_qk_int8_attention_fast: the fast mode needs a GPU with e4m3 "
              "tensor cores (NVIDIA sm_89 or newer); this one is ", arch);
  const c10::cuda::CUDAGuard guard(q_int8.device());
  auto [out, lse] = allocate_attention_out(a);
  if (lse.numel() == 0) return {out, lse};
  const AttentionKernel k = chosen_kernel(a, /*fast=*/true);
  if (launch_fused(k, a, out, lse)) return {out, lse};
  const auto [v_fp8, v_scale] = quant_v_fp8_op().call(v, layout_view);
  const AttentionArgs given = check_attention_args(q_int8, q_scale, k_int8, k_scale, v_fp8, v_scale, qo_len, layout,
                                                   is_causal, out_dtype);
  return launch_chosen(k, given, out, lse, arch);
}

}  // namespace

bool gpu_has_e4m3(const c10::Device& device) {
  const int arch = arch_number(device);
  return arch == 0 || arch >= 89;
}

TORCH_LIBRARY_IMPL(sage, CUDA, m) {
  m.impl("qk_int8_attention", &qk_int8_attention_gpu);
  m.impl("_qk_int8_attention_fast", &qk_int8_attention_fast_gpu);
}

}  // namespace sage
