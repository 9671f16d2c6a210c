// The sage op schemas, and the Autograd kernels that make them inference-only.
#include <Python.h>
#include <torch/library.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include <cstring>
#include <string>

// Importing torch_sage._C loads this library, which registers the ops.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}

namespace {

// Every op, once: TORCH_LIBRARY defines these schemas and the Autograd block below covers the same list.
constexpr const char* kSchemas[] = {
    // Prologue: per-block int8 Q and K with float32 scales (docs/SEMANTICS.md, "Prologue").
    "quant_qk_int8(Tensor q, Tensor k, str tensor_layout, float sm_scale, bool smooth_k) -> "
    "(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor k_mean)",
    // The Triton implementation of the same prologue; quant_qk_int8 routes to it when
    // SAGEATTN_SK1_PROLOGUE=triton. Its GPU kernel is registered from Python (torch_sage/triton_jit_ops.py).
    "_quant_qk_int8_triton(Tensor q, Tensor k, str tensor_layout, float sm_scale, bool smooth_k) -> "
    "(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor k_mean)",
    // Per-channel FP8 (e4m3) V for the fast mode.
    "quant_v_fp8(Tensor v, str tensor_layout) -> (Tensor v_fp8, Tensor v_scale)",
    // Its Triton implementation (SAGEATTN_SK1_PROLOGUE=triton, as for the prologue), and Triton's JIT for
    // qk_int8_attention where the build precompiled no kernel (their GPU kernels are registered from Python:
    // torch_sage/triton_jit_ops.py).
    "_quant_v_fp8_triton(Tensor v, str tensor_layout) -> (Tensor v_fp8, Tensor v_scale)",
    // Attention on quantized inputs. v is float16/bfloat16 (accurate mode) or float8_e4m3fn with v_scale (fast mode).
    "qk_int8_attention(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor v, "
    "Tensor? v_scale, SymInt qo_len, str tensor_layout, bool is_causal, ScalarType out_dtype) -> "
    "(Tensor out, Tensor lse)",
    // The fast mode of qk_int8_attention from a 16-bit v: quant_v_fp8 then qk_int8_attention, the same bits. On a GPU
    // whose chosen kernel is hand-written, V's quantization writes that kernel's V^T itself (gpu_attention.cpp).
    "_qk_int8_attention_fast(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor v, "
    "SymInt qo_len, str tensor_layout, bool is_causal, ScalarType out_dtype) -> (Tensor out, Tensor lse)",
    "_qk_int8_attention_triton(Tensor q_int8, Tensor q_scale, Tensor k_int8, Tensor k_scale, Tensor v, "
    "Tensor? v_scale, SymInt qo_len, str tensor_layout, bool is_causal, ScalarType out_dtype) -> "
    "(Tensor out, Tensor lse)",
    // The whole call, as users make it.
    "attention(Tensor q, Tensor k, Tensor v, str tensor_layout=\"HND\", bool is_causal=False, "
    "float? sm_scale=None, bool smooth_k=True, str pv_mode=\"auto\") -> Tensor",
    "attention_with_lse(Tensor q, Tensor k, Tensor v, str tensor_layout=\"HND\", bool is_causal=False, "
    "float? sm_scale=None, bool smooth_k=True, str pv_mode=\"auto\") -> (Tensor out, Tensor lse)",
};

std::string op_name(const char* schema) { return std::string(schema, std::strchr(schema, '(') - schema); }

}  // namespace

TORCH_LIBRARY(sage, m) {
  for (const char* schema : kSchemas) m.def(schema);
}

// No op has a backward: a backward through any of them raises instead of returning a wrong gradient.
TORCH_LIBRARY_IMPL(sage, Autograd, m) {
  for (const char* schema : kSchemas) {
    m.impl(op_name(schema).c_str(), torch::autograd::autogradNotImplementedFallback());
  }
}
