// The Triton kernel of sage::qk_int8_attention (gpu_triton_attention.h): tensors -> the arguments of the kernel
// compiled at build time (build_tools/aot_build.py) -> the launcher of triton_images.h. A kernel the build did not
// precompile (another GPU arch, or a specialization outside the set) runs through Triton's JIT instead:
// sage::_qk_int8_attention_triton, registered from Python (torch_sage/triton_jit_ops.py), after a one-time warning.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "gpu_triton_attention.h"
#include "input_checks.h"
#include "triton_images.h"
#include "triton_variant.h"

namespace sage {
namespace {

const char* triton_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    case at::kFloat: return "fp32";
    case at::kFloat8_e4m3fn: return "fp8e4nv";
    default: TORCH_CHECK(false, "sage: no Triton kernel takes ", t);
  }
}

// The image key of a call: the table's template (aot_build.py ATTENTION_KEY) with the call's values.
std::string attention_key(int64_t head_dim_pad, bool causal, const char* v, const char* out, bool fast) {
  const std::string key = aot::fill_template(aot::kAttentionKeyTemplate, {{"head_dim_pad", std::to_string(head_dim_pad)},
                                                                           {"causal", causal ? "1" : "0"},
                                                                           {"v", v},
                                                                           {"out", out},
                                                                           {"variant", fast ? "fast" : "any"}});
  TORCH_CHECK(!key.empty(), "sage: the precompiled-image table's key template \"", aot::kAttentionKeyTemplate,
              "\" names a field this launcher does not fill: rebuild torch_sage");
  return key;
}

void warn_jit(const std::string& arch, const std::string& key) {
  const bool arch_built = aot::has_arch(arch);
  const char* var =
#if defined(USE_ROCM)
      "PYTORCH_ROCM_ARCH";
#else
      "TORCH_CUDA_ARCH_LIST";
#endif
  if (arch_built) {
    TORCH_WARN_ONCE("sage: no precompiled Triton kernel for ", key, " on ", arch,
                    " (a specialization outside the built set): Triton compiles it on first use.");
  } else {
    TORCH_WARN_ONCE("sage: this torch_sage build has no precompiled kernels for ", arch,
                    ": Triton compiles them on first use (seconds per kernel). Rebuild torch_sage with ", var,
                    " naming this GPU (", arch, ") to precompile them.");
  }
}

void run(const aot::Image& img, const c10::Device& device, const std::string& signature, int64_t gx, int64_t gy,
         int64_t gz, void** args) {
  TORCH_CHECK(gx <= std::numeric_limits<int32_t>::max() && gy <= 65535 && gz <= 65535,
              "sage: launch grid (", gx, ", ", gy, ", ", gz, ") of ", img.key,
              " exceeds the GPU's limits (y and z at most 65535)");
  const std::string err = aot::launch(img, device.index(), signature, static_cast<unsigned>(gx),
                                      static_cast<unsigned>(gy), static_cast<unsigned>(gz), args,
                                      c10::cuda::getCurrentCUDAStream(device.index()).stream());
  TORCH_CHECK(err.empty(), "sage: ", err);
}

int32_t as_i32(int64_t v, const char* what) {
  TORCH_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), "sage: ", what, " ", v,
              " does not fit the kernel's 32-bit argument");
  return static_cast<int32_t>(v);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> triton_attention(const AttentionArgs& a, const at::Tensor& out,
                                                    const at::Tensor& lse, const std::string& arch) {
  using AttentionOut = std::tuple<at::Tensor, at::Tensor>;
  const at::Tensor &q_int8 = a.q_int8, &q_scale = a.q_scale, &k_int8 = a.k_int8, &k_scale = a.k_scale;
  const std::optional<at::Tensor>& v_scale = a.v_scale;
  const bool is_causal = a.is_causal;
  const at::ScalarType out_dtype = a.out_dtype;
  const std::string layout = a.hnd ? "HND" : "NHD";
  const int64_t dp = q_int8.size(3);
  const char *vt = triton_type(a.v.scalar_type()), *ot = triton_type(out_dtype);

  at::Tensor v = a.v;
  HeadView hv = head_view(v, a.hnd);
  const HeadView ho = head_view(out, a.hnd);
  bool fast = false;
  const auto pick = [&]() {
    fast = triton_unmasked_variant(a.head_dim, dp, reinterpret_cast<uintptr_t>(v.const_data_ptr()),
                                   {hv.stride_b, hv.stride_h, hv.stride_n, ho.stride_b, ho.stride_h, ho.stride_n});
    return attention_key(dp, is_causal, vt, ot, fast);
  };
  std::string key = pick();
  const aot::Image* img = aot::find_image(arch, key);
  if (img != nullptr && hv.stride_n * img->tile_n > std::numeric_limits<int32_t>::max()) {
    // The kernel's tile offsets are 32-bit (block bases are 64-bit): repack a V with a huge token stride.
    v = v.contiguous();
    hv = head_view(v, a.hnd);
    key = pick();
    img = aot::find_image(arch, key);
  }
  if (img == nullptr) {
    warn_jit(arch, key);
    static auto jit = c10::Dispatcher::singleton()
                          .findSchemaOrThrow("sage::_qk_int8_attention_triton", "")
                          .typed<AttentionOut(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                              const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                              c10::SymInt, c10::string_view, bool, at::ScalarType)>();
    return jit.call(q_int8, q_scale, k_int8, k_scale, a.v, v_scale, c10::SymInt(a.qo_len), layout, is_causal,
                    out_dtype);
  }
  TORCH_CHECK(ho.stride_n * img->tile_m <= std::numeric_limits<int32_t>::max(),
              "sage: the output's token stride ", ho.stride_n, " is too large for the kernel's 32-bit tile offsets");

  // Arguments in the kernel's order (torch_sage/triton_attention.py::_qk_int8_attn_fwd; types: aot_build.py).
  const void* p_q = q_int8.const_data_ptr();
  const void* p_qs = q_scale.const_data_ptr();
  const void* p_k = k_int8.const_data_ptr();
  const void* p_ks = k_scale.const_data_ptr();
  const void* p_v = v.const_data_ptr();
  const void* p_vs = a.fp8 ? v_scale->const_data_ptr() : p_qs;  // unread in the accurate mode
  void* p_o = out.data_ptr();
  void* p_lse = lse.data_ptr();
  int64_t s_vb = hv.stride_b, s_vh = hv.stride_h, s_ob = ho.stride_b, s_oh = ho.stride_h;  // "any": 64-bit
  int32_t s_vb32 = static_cast<int32_t>(s_vb), s_vh32 = static_cast<int32_t>(s_vh);      // "fast": 32-bit
  int32_t s_ob32 = static_cast<int32_t>(s_ob), s_oh32 = static_cast<int32_t>(s_oh);
  int32_t s_vn = as_i32(hv.stride_n, "V's token stride"), s_on = as_i32(ho.stride_n, "the output's token stride");
  int32_t heads_q = as_i32(a.heads_q, "heads"), heads_kv = as_i32(a.heads_k, "heads");
  int32_t n_q = as_i32(a.qo_len, "qo_len"), n_k = as_i32(a.kv_len, "kv_len");
  int32_t nq_pad = as_i32(q_int8.size(2), "qo_len"), nk_pad = as_i32(k_int8.size(2), "kv_len");
  int32_t head_dim = static_cast<int32_t>(a.head_dim);
  void* args[] = {&p_q, &p_qs, &p_k, &p_ks, &p_v, &p_vs, &p_o, &p_lse,
                  fast ? static_cast<void*>(&s_vb32) : &s_vb, fast ? static_cast<void*>(&s_vh32) : &s_vh, &s_vn,
                  fast ? static_cast<void*>(&s_ob32) : &s_ob, fast ? static_cast<void*>(&s_oh32) : &s_oh, &s_on,
                  &heads_q, &heads_kv, &n_q, &n_k, &nq_pad, &nk_pad, &head_dim};
  const char* bh = fast ? "i32" : "i64";  // batch/head strides
  const std::string signature = std::string("*i8,*fp32,*i8,*fp32,*") + vt + ",*fp32,*" + ot + ",*fp32," + bh + "," +
                                bh + ",i32," + bh + "," + bh + ",i32,i32,i32,i32,i32,i32,i32,i32";
  run(*img, q_int8.device(), signature, (a.qo_len + img->tile_m - 1) / img->tile_m, a.heads_q, a.batch, args);
  return {out, lse};
}

}  // namespace sage
