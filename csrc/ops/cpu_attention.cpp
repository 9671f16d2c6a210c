// CPU kernel of sage::qk_int8_attention: the online softmax of docs/SEMANTICS.md, step for step.
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "qk_attention_args.h"
#include "input_checks.h"
#include "settings.h"
#include "prologue_outputs.h"

namespace sage {
namespace {

// V is float16, bfloat16 (accurate mode: P is rounded to V's type) or float8_e4m3fn (fast mode).
// vf: V as float32 [B, Hkv, Nk, D] contiguous (every V type converts to float32 exactly).
template <typename Out, typename V>
void attention_rows(const AttentionArgs& a, const at::Tensor& vf, const at::Tensor& out, const at::Tensor& lse) {
  const int8_t* qi = a.q_int8.const_data_ptr<int8_t>();
  const int8_t* ki = a.k_int8.const_data_ptr<int8_t>();
  const float* qs = a.q_scale.const_data_ptr<float>();
  const float* ks = a.k_scale.const_data_ptr<float>();
  constexpr bool kFp8 = std::is_same_v<V, c10::Float8_e4m3fn>;
  const float* vs = kFp8 ? a.v_scale->const_data_ptr<float>() : nullptr;
  const HeadView ho = head_view(out, a.hnd);
  Out* op = static_cast<Out*>(out.data_ptr());
  const float* vp = vf.const_data_ptr<float>();
  float* lp = lse.data_ptr<float>();
  const int64_t B = a.batch, Hq = a.heads_q, Hk = a.heads_k, Nq = a.qo_len, Nk = a.kv_len, D = a.head_dim;
  const int64_t Dp = a.q_int8.size(3), nq_pad = a.q_int8.size(2), nk_pad = a.k_int8.size(2);
  const int64_t nq_blocks = nq_pad / kBlockQ, nk_blocks = nk_pad / kBlockK, group = Hq / Hk;
  const float kInf = std::numeric_limits<float>::infinity();

  at::parallel_for(0, B * Hq * Nq, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(D), s(kBlockK);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t i = row % Nq, bh = row / Nq, b = bh / Hq, h = bh % Hq, hk = h / group, bhk = b * Hk + hk;
      const int8_t* qrow = qi + (bh * nq_pad + i) * Dp;
      const float q_scale = qs[bh * nq_blocks + i / kBlockQ];
      const int64_t last_key = a.is_causal ? std::min(Nk, i + 1) : Nk;  // upper-left aligned mask
      float m = -kInf, l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j0 = 0; j0 < last_key; j0 += kBlockK) {
        const int64_t cnt = std::min(kBlockK, last_key - j0);
        const float k_scale = ks[bhk * nk_blocks + j0 / kBlockK];
        float block_max = -kInf;
        for (int64_t j = 0; j < cnt; ++j) {
          const int8_t* krow = ki + (bhk * nk_pad + j0 + j) * Dp;
          int32_t dot = 0;
          for (int64_t d = 0; d < Dp; ++d) dot += int32_t(qrow[d]) * int32_t(krow[d]);
          s[j] = static_cast<float>(dot) * q_scale * k_scale;
          block_max = std::fmax(block_max, s[j]);
        }
        const float m_new = std::fmax(m, block_max);
        const float alpha = std::exp2(m - m_new);
        l *= alpha;
        for (int64_t d = 0; d < D; ++d) acc[d] *= alpha;
        for (int64_t j = 0; j < cnt; ++j) {
          const float p = std::exp2(s[j] - m_new);
          l += p;
          const float* vrow = vp + (bhk * Nk + j0 + j) * D;
          const float pq = static_cast<float>(V(kFp8 ? p * kFp8Max : p));
          for (int64_t d = 0; d < D; ++d) acc[d] += pq * vrow[d];
        }
        m = m_new;
      }
      Out* orow = op + b * ho.stride_b + h * ho.stride_h + i * ho.stride_n;
      const float* vsc = kFp8 ? vs + bhk * D : nullptr;
      for (int64_t d = 0; d < D; ++d) {
        float o = 0.0f;  // no key at all: output 0, as SDPA gives
        if (last_key > 0) o = kFp8 ? acc[d] * vsc[d] / kFp8Max / l : acc[d] / l;
        orow[d] = static_cast<Out>(o);
      }
      lp[row] = last_key > 0 ? (m + std::log2(l)) * static_cast<float>(M_LN2) : -kInf;
    }
  });
}

std::tuple<at::Tensor, at::Tensor> qk_int8_attention_cpu(const at::Tensor& q_int8, const at::Tensor& q_scale,
                                                         const at::Tensor& k_int8, const at::Tensor& k_scale,
                                                         const at::Tensor& v, const c10::optional<at::Tensor>& v_scale,
                                                         int64_t qo_len, c10::string_view layout, bool is_causal,
                                                         at::ScalarType out_dtype) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const AttentionArgs a = check_attention_args(q_int8, q_scale, k_int8, k_scale, v, v_scale, qo_len,
                                               std::string(layout), is_causal, out_dtype);
  auto [out, lse] = allocate_attention_out(a);
  if (out.numel() == 0) return {out, lse};
  const at::Tensor vf = (a.hnd ? v : v.transpose(1, 2)).to(at::kFloat).contiguous();
  auto run = [&](auto tag) {
    using Out = decltype(tag);
    switch (a.v.scalar_type()) {
      case at::kHalf: attention_rows<Out, at::Half>(a, vf, out, lse); break;
      case at::kBFloat16: attention_rows<Out, at::BFloat16>(a, vf, out, lse); break;
      default: attention_rows<Out, c10::Float8_e4m3fn>(a, vf, out, lse); break;
    }
  };
  switch (out_dtype) {
    case at::kHalf: run(at::Half{}); break;
    case at::kBFloat16: run(at::BFloat16{}); break;
    default: run(float{}); break;
  }
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(sage, CPU, m) { m.impl("qk_int8_attention", &qk_int8_attention_cpu); }

}  // namespace sage
