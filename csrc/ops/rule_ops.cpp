// C++ rules that Python applies too, as private ops in every build, so the Python side has no twin of them:
// sage::_gpu_arch_refusal (arch_rules.h; torch_sage/arch.py, the device check of the Triton JIT ops, with the
// call's SAGEATTN_SK1_GFX1200), sage::_triton_unmasked_variant (triton_variant.h; the JIT Triton kernel's variant)
// and sage::_check_attention_args (qk_attention_args.h; the JIT Triton kernel's input checks).
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "arch_rules.h"
#include "qk_attention_args.h"
#include "settings.h"
#include "triton_variant.h"

namespace sage {
namespace {

std::string gpu_arch_refusal(bool amd, const std::string& gcn_arch_name, int64_t major, int64_t minor) {
  return amd ? amd_arch_refusal(gcn_arch_name, call_settings().gfx1200)
             : nvidia_arch_refusal(static_cast<int>(major), static_cast<int>(minor));
}

bool unmasked_variant(int64_t head_dim, int64_t head_dim_pad, int64_t v_address, c10::IntArrayRef strides) {
  TORCH_CHECK(strides.size() == 6, "sage::_triton_unmasked_variant: 6 strides (V's and out's b, h, n), got ",
              strides.size());
  return triton_unmasked_variant(head_dim, head_dim_pad, static_cast<uint64_t>(v_address),
                                 {strides[0], strides[1], strides[2], strides[3], strides[4], strides[5]});
}

// sage::qk_int8_attention's checks; (batch, heads_q, heads_kv, kv_len, head_dim, fp8) of valid arguments.
std::vector<int64_t> checked_attention_args(const at::Tensor& q_int8, const at::Tensor& q_scale,
                                            const at::Tensor& k_int8, const at::Tensor& k_scale, const at::Tensor& v,
                                            const std::optional<at::Tensor>& v_scale, int64_t qo_len,
                                            const std::string& layout, at::ScalarType out_dtype) {
  const AttentionArgs a =
      check_attention_args(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len, layout, false, out_dtype);
  return {a.batch, a.heads_q, a.heads_k, a.kv_len, a.head_dim, a.fp8};
}

}  // namespace

// Not in op_schemas.cpp's table: nothing to dispatch (the checks read only metadata), no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  m.def("_gpu_arch_refusal(bool amd, str gcn_arch_name, int major, int minor) -> str", &gpu_arch_refusal);
  m.def("_triton_unmasked_variant(int head_dim, int head_dim_pad, int v_address, int[] strides) -> bool",
        &unmasked_variant);
  m.def("_check_attention_args(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor v, "
        "Tensor? v_scale, int qo_len, str tensor_layout, ScalarType out_dtype) -> int[]",
        &checked_attention_args);
}

}  // namespace sage
