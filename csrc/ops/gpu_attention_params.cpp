#include "gpu_attention_params.h"

#include <string>

#include "gpu_arch.h"
#include "input_checks.h"
#include "settings.h"

namespace sage {

AttentionParams attention_params(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse) {
  const HeadView ho = head_view(out, a.hnd);
  AttentionParams p{};
  p.q = a.q_int8.const_data_ptr<int8_t>();
  p.q_scale = a.q_scale.const_data_ptr<float>();
  p.k = a.k_int8.const_data_ptr<int8_t>();
  p.k_scale = a.k_scale.const_data_ptr<float>();
  p.out = out.data_ptr();
  p.out_type = a.out_dtype == at::kHalf       ? OutType::kFloat16
               : a.out_dtype == at::kBFloat16 ? OutType::kBFloat16
                                              : OutType::kFloat32;
  p.o_stride_b = ho.stride_b;
  p.o_stride_h = ho.stride_h;
  p.o_stride_n = ho.stride_n;
  p.lse = lse.data_ptr<float>();
  p.batch = a.batch;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_k;
  p.qo_len = a.qo_len;
  p.kv_len = a.kv_len;
  p.nq_pad = a.q_int8.size(2);
  p.nk_pad = a.k_int8.size(2);
  p.head_dim = a.head_dim;
  p.head_dim_pad = a.q_int8.size(3);
  p.causal = a.is_causal;
  p.overlap_launch = call_settings().overlap_launches;
  return p;
}

void set_given_v(AttentionParams& p, const AttentionArgs& a) {
  const HeadView hv = head_view(a.v, a.hnd);
  p.v = a.v.const_data_ptr();
  p.v_type = a.fp8 ? VType::kFloat8 : a.v.scalar_type() == at::kBFloat16 ? VType::kBFloat16 : VType::kFloat16;
  p.v_stride_b = hv.stride_b;
  p.v_stride_h = hv.stride_h;
  p.v_stride_n = hv.stride_n;
  p.v_scale = a.fp8 ? a.v_scale->const_data_ptr<float>() : nullptr;
}

at::Tensor attach_workspace(AttentionParams& p, int64_t bytes, const at::Tensor& like) {
  if (bytes <= 0) return at::Tensor();
  at::Tensor workspace = at::empty({bytes}, like.options().dtype(at::kByte));
  p.workspace = workspace.data_ptr();
  return workspace;
}

KernelCall kernel_call(const AttentionArgs& a, int arch, bool fast) {
  return KernelCall{arch, fast, a.q_int8.size(3), a.qo_len, a.kv_len};
}

int arch_number(const c10::Device& device) {
  const std::string arch = device_arch(device);
  return arch.rfind("sm_", 0) == 0 ? std::stoi(arch.substr(3)) : 0;
}

}  // namespace sage
