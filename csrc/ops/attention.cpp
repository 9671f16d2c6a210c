// sage::attention and sage::attention_with_lse: input checks, then prologue -> kernel (the fast mode's kernel,
// sage::_qk_int8_attention_fast, quantizes V first), each step through the dispatcher so every device runs its own
// kernels, except where a GPU call saves host time: the GPU prologue's intermediates come from one allocation
// (gpu_prologue.h). Also the devices' common kernel of _qk_int8_attention_fast: quant_v_fp8, then qk_int8_attention.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cmath>

#include "qk_attention_args.h"
#include "input_checks.h"
#include "settings.h"
#include "prologue_outputs.h"
#include "guard.h"
#if defined(SAGE_WITH_GPU)
#include "gpu_attention.h"
#include "gpu_prologue.h"
#endif

namespace sage {

AttentionArgs check_attention_args(const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8,
                                   const at::Tensor& k_scale, const at::Tensor& v,
                                   const std::optional<at::Tensor>& v_scale, int64_t qo_len, const std::string& layout,
                                   bool is_causal, at::ScalarType out_dtype) {
  AttentionArgs a{q_int8, q_scale, k_int8, k_scale, v, v_scale};
  a.hnd = is_hnd_layout(layout);
  a.is_causal = is_causal;
  a.out_dtype = out_dtype;
  TORCH_CHECK(q_int8.scalar_type() == at::kChar && k_int8.scalar_type() == at::kChar && q_int8.dim() == 4 &&
                  k_int8.dim() == 4 && q_int8.is_contiguous() && k_int8.is_contiguous(),
              "sage::qk_int8_attention: q_int8 and k_int8 must be contiguous 4-D int8 tensors from "
              "sage::quant_qk_int8");
  TORCH_CHECK(v.dim() == 4 && (v.stride(3) == 1 || v.size(3) == 1),
              "sage::qk_int8_attention: v must be 4-D with a contiguous last dimension");
  a.fp8 = v.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(a.fp8 || v.scalar_type() == at::kHalf || v.scalar_type() == at::kBFloat16,
              "sage::qk_int8_attention: v must be float16 or bfloat16 (accurate mode) or float8_e4m3fn with "
              "v_scale (fast mode), got ", v.scalar_type());
  TORCH_CHECK(a.fp8 == v_scale.has_value(), "sage::qk_int8_attention: v_scale must be given exactly when v is "
              "float8_e4m3fn");
  TORCH_CHECK(out_dtype == at::kHalf || out_dtype == at::kBFloat16 || out_dtype == at::kFloat,
              "sage::qk_int8_attention: out_dtype must be float16, bfloat16 or float32, got ", out_dtype);
  const HeadView hv = head_view(v, a.hnd);
  a.batch = q_int8.size(0);
  a.heads_q = q_int8.size(1);
  a.heads_k = k_int8.size(1);
  a.qo_len = qo_len;
  a.kv_len = hv.tokens;
  a.head_dim = hv.dim;
  const int64_t dp = padded_head_dim(a.head_dim);
  TORCH_CHECK(a.head_dim <= kMaxHeadDim && q_int8.size(3) == dp && k_int8.size(3) == dp,
              "sage::qk_int8_attention: int8 head_dim ", q_int8.size(3), "/", k_int8.size(3),
              " does not match v's head_dim ", a.head_dim, " (padded: ", dp, ")");
  TORCH_CHECK(k_int8.size(0) == a.batch && hv.batch == a.batch && hv.heads == a.heads_k && a.heads_k >= 1 &&
                  a.heads_q % a.heads_k == 0,
              "sage::qk_int8_attention: batch/heads disagree: q_int8 ", q_int8.sizes(), ", k_int8 ",
              k_int8.sizes(), ", v ", v.sizes());
  TORCH_CHECK(qo_len >= 0 && q_int8.size(2) == round_up(qo_len, kBlockQ) &&
                  k_int8.size(2) == round_up(a.kv_len, kBlockK),
              "sage::qk_int8_attention: qo_len ", qo_len, " / kv_len ", a.kv_len,
              " do not match the padded int8 lengths ", q_int8.size(2), " / ", k_int8.size(2));
  TORCH_CHECK(q_scale.scalar_type() == at::kFloat && k_scale.scalar_type() == at::kFloat &&
                  q_scale.is_contiguous() && k_scale.is_contiguous() &&
                  q_scale.sizes() == at::IntArrayRef({a.batch, a.heads_q, q_int8.size(2) / kBlockQ}) &&
                  k_scale.sizes() == at::IntArrayRef({a.batch, a.heads_k, k_int8.size(2) / kBlockK}),
              "sage::qk_int8_attention: q_scale/k_scale must be contiguous float32 [B, H, blocks], got ",
              q_scale.sizes(), " and ", k_scale.sizes());
  if (a.fp8) {
    TORCH_CHECK(v_scale->scalar_type() == at::kFloat && v_scale->is_contiguous() &&
                    v_scale->sizes() == at::IntArrayRef({a.batch, a.heads_k, a.head_dim}),
                "sage::qk_int8_attention: v_scale must be contiguous float32 [B, Hkv, D], got ", v_scale->sizes());
  }
  for (const at::Tensor* t : {&q_scale, &k_int8, &k_scale, &v, a.fp8 ? &*v_scale : &v}) {
    TORCH_CHECK(t->device() == q_int8.device(), "sage::qk_int8_attention: all inputs must be on ", q_int8.device(),
                ", got one on ", t->device());
  }
  return a;
}

std::tuple<at::Tensor, at::Tensor> allocate_attention_out(const AttentionArgs& a) {
  const auto opts = a.v.options();
  at::Tensor out = a.hnd ? at::empty({a.batch, a.heads_q, a.qo_len, a.head_dim}, opts.dtype(a.out_dtype))
                         : at::empty({a.batch, a.qo_len, a.heads_q, a.head_dim}, opts.dtype(a.out_dtype));
  at::Tensor lse = at::empty({a.batch, a.heads_q, a.qo_len}, opts.dtype(at::kFloat));
  return {out, lse};
}

const c10::TypedOperatorHandle<QuantVSignature>& quant_v_fp8_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("sage::quant_v_fp8", "").typed<QuantVSignature>();
  return op;
}

namespace {

enum class PvMode { kFp16, kFp8 };

PvMode resolve_pv_mode(const std::string& mode) {
  // "auto" is the accurate mode everywhere: it may pick only a mode that meets the accurate mode's accuracy bound,
  // and the fast mode, faster on long calls, misses it (README's results, docs/FINDINGS.md).
  if (mode == "auto" || mode == "fp16") return PvMode::kFp16;
  if (mode == "fp8") return PvMode::kFp8;
  TORCH_CHECK(false, "sage: pv_mode must be \"auto\", \"fp16\" (accurate: P and V in float16) or \"fp8\" "
              "(fast: P and V in float8_e4m3), got \"", mode, "\"");
}

using QuantOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using AttentionOut = std::tuple<at::Tensor, at::Tensor>;
using KernelSignature = AttentionOut(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const std::optional<at::Tensor>&, c10::SymInt,
                                     c10::string_view, bool, at::ScalarType);

const c10::TypedOperatorHandle<KernelSignature>& qk_int8_attention_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("sage::qk_int8_attention", "").typed<KernelSignature>();
  return op;
}

AttentionOut qk_int8_attention_fast(const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8,
                                    const at::Tensor& k_scale, const at::Tensor& v, c10::SymInt qo_len,
                                    c10::string_view layout, bool is_causal, at::ScalarType out_dtype) {
  const auto [v_fp8, v_scale] = quant_v_fp8_op().call(v, layout);
  return qk_int8_attention_op().call(q_int8, q_scale, k_int8, k_scale, v_fp8, v_scale, std::move(qo_len), layout,
                                     is_causal, out_dtype);
}

std::tuple<at::Tensor, at::Tensor> run_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 c10::string_view layout_view, bool is_causal,
                                                 std::optional<double> sm_scale, bool smooth_k,
                                                 c10::string_view pv_mode, bool want_lse) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const std::string layout(layout_view);
  const bool hnd = is_hnd_layout(layout);
  check_qkv(q, k, &v, hnd, /*allow_fp32=*/true);
  const bool guard = call_settings().guard;
  TORCH_CHECK(!guard || q.is_cpu(), "sage: SAGEATTN_SK1_GUARD=on runs on the CPU only so far (its GPU kernels are not "
              "built yet); unset it, or set it to \"off\", for a call on ", q.device());
  PvMode mode = resolve_pv_mode(std::string(pv_mode));
#if defined(SAGE_WITH_GPU)
  if (mode == PvMode::kFp8 && q.is_cuda() && !gpu_has_e4m3(q.device())) {
    TORCH_WARN_ONCE("sage: pv_mode=\"fp8\" needs e4m3 tensor cores (NVIDIA sm_89 or newer), which this GPU lacks: "
                    "it runs the accurate mode (pv_mode=\"fp16\") instead");
    mode = PvMode::kFp16;
  }
#endif
  const double scale = sm_scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  q_multiplier(scale);  // checks that sm_scale * log2(e) is a finite float32 before any work
  const at::ScalarType out_dtype = q.scalar_type();
  const at::Tensor q16 = as_computed(q), k16 = as_computed(k), v16 = as_computed(v);

  static auto quant_qk = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("sage::quant_qk_int8", "")
                             .typed<QuantOut(const at::Tensor&, const at::Tensor&, c10::string_view, double, bool)>();
  static auto fast_kernel = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("sage::_qk_int8_attention_fast", "")
                                .typed<AttentionOut(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&, const at::Tensor&, c10::SymInt,
                                                    c10::string_view, bool, at::ScalarType)>();

  std::optional<QuantQK> prologue;
#if defined(SAGE_WITH_GPU)
  if (q16.is_cuda()) prologue = quant_qk_int8_one_allocation(q16, k16, hnd, scale, smooth_k);
#endif
  if (!prologue) {
    auto [qi, qs, ki, ks, km] = quant_qk.call(q16, k16, layout, scale, smooth_k);
    prologue = QuantQK{qi, qs, ki, ks, km};
  }
  const auto& [q_int8, q_scale, k_int8, k_scale, k_mean] = *prologue;
  const int64_t qo_len = head_view(q, hnd).tokens, kv_len = head_view(k, hnd).tokens;
  // P is rounded to V's 16-bit type in the accurate mode: bfloat16 keeps V's range (docs/SEMANTICS.md).
  auto [out, lse] = mode == PvMode::kFp8
                        ? fast_kernel.call(q_int8, q_scale, k_int8, k_scale, v16, c10::SymInt(qo_len), layout,
                                           is_causal, out_dtype)
                        : qk_int8_attention_op().call(q_int8, q_scale, k_int8, k_scale, v16, std::nullopt,
                                                      c10::SymInt(qo_len), layout, is_causal, out_dtype);
  if (want_lse && smooth_k && kv_len > 0 && lse.numel() > 0) {
    // softmax ignores the subtracted key mean, lse does not: add back sm_scale * q . k_mean.
    const at::Tensor q_hnd = as_hnd(q, hnd);
    const int64_t group = q_hnd.size(1) / k_mean.size(1);
    const at::Tensor mean = group == 1 ? k_mean : k_mean.repeat_interleave(group, 1);
    lse.add_(at::matmul(q_hnd.to(at::kFloat), mean.unsqueeze(-1)).squeeze(-1), scale);
  }
  if (guard) guard_cpu(q, k, q16, k16, v16, hnd, is_causal, scale, smooth_k, out, lse);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> attention_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      c10::string_view layout, bool is_causal,
                                                      std::optional<double> sm_scale, bool smooth_k,
                                                      c10::string_view pv_mode) {
  return run_attention(q, k, v, layout, is_causal, sm_scale, smooth_k, pv_mode, /*want_lse=*/true);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, c10::string_view layout,
                     bool is_causal, std::optional<double> sm_scale, bool smooth_k, c10::string_view pv_mode) {
  return std::get<0>(run_attention(q, k, v, layout, is_causal, sm_scale, smooth_k, pv_mode, /*want_lse=*/false));
}

}  // namespace

TORCH_LIBRARY_IMPL(sage, CompositeExplicitAutograd, m) {
  m.impl("attention", &attention);
  m.impl("attention_with_lse", &attention_with_lse);
  m.impl("_qk_int8_attention_fast", &qk_int8_attention_fast);
}

}  // namespace sage
