// CPU kernels of the quantization ops: the executable form of docs/SEMANTICS.md that the GPU
// prologue must match bit for bit.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/Float8_e4m3fn.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "input_checks.h"
#include "settings.h"
#include "prologue_outputs.h"

namespace sage {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The per-block scale rule: amax / qmax, NaN when the block holds a non-finite value.
inline float block_scale(float amax, bool finite, float qmax) { return finite ? amax / qmax : kNaN; }

inline int8_t quantize_int8(float x, float scale) {
  if (!(scale > 0.0f)) return 0;
  float r = std::nearbyint(x / scale);  // round half to even (default rounding mode)
  r = std::min(127.0f, std::max(-127.0f, r));
  return static_cast<int8_t>(r);
}

// Quantizes rows [row0, row0 + rows) of one head; x = float(in) * mult - shift[d].
template <typename T>
void quantize_block(const T* in, int64_t stride_n, int64_t rows, int64_t dim, int64_t dim_pad, int64_t block_rows,
                    float mult, bool use_mult, const float* shift, int8_t* out, float* scale_out) {
  auto value = [&](int64_t n, int64_t d) {
    float x = static_cast<float>(in[n * stride_n + d]);
    if (use_mult) x = x * mult;
    if (shift) x = x - shift[d];
    return x;
  };
  float amax = 0.0f;
  bool finite = true;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t d = 0; d < dim; ++d) {
      const float x = value(n, d);
      finite = finite && std::isfinite(x);
      amax = std::max(amax, std::abs(x));
    }
  }
  const float scale = block_scale(amax, finite, 127.0f);
  *scale_out = scale;
  for (int64_t n = 0; n < block_rows; ++n) {
    int8_t* row = out + n * dim_pad;
    for (int64_t d = 0; d < dim_pad; ++d) row[d] = (n < rows && d < dim) ? quantize_int8(value(n, d), scale) : 0;
  }
}

// Quantizes every block of one [B, H, N, D] input into contiguous [B, H, N_pad, D_pad] int8.
template <typename T>
void quantize_all(const T* in, const HeadView& v, int64_t block, float mult, bool use_mult, const float* mean,
                  int8_t* out, float* scales) {
  const int64_t n_pad = round_up(v.tokens, block), dim_pad = padded_head_dim(v.dim);
  const int64_t nblocks = n_pad / block, total = v.batch * v.heads * nblocks;
  at::parallel_for(0, total, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t blk = i % nblocks, bh = i / nblocks, b = bh / v.heads, h = bh % v.heads;
      const int64_t row0 = blk * block;
      const T* src = in + b * v.stride_b + h * v.stride_h + row0 * v.stride_n;
      quantize_block(src, v.stride_n, std::min(block, v.tokens - row0), v.dim, dim_pad, block, mult, use_mult,
                     mean ? mean + bh * v.dim : nullptr, out + (bh * n_pad + row0) * dim_pad, scales + i);
    }
  });
}

// k_mean[b, h, d]: the sum over tokens runs in float64, then one rounding to float32.
template <typename T>
void key_mean(const T* in, const HeadView& v, float* mean) {
  at::parallel_for(0, v.batch * v.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> sum(v.dim);
    for (int64_t bh = begin; bh < end; ++bh) {
      const T* src = in + (bh / v.heads) * v.stride_b + (bh % v.heads) * v.stride_h;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t n = 0; n < v.tokens; ++n)
        for (int64_t d = 0; d < v.dim; ++d) sum[d] += static_cast<double>(static_cast<float>(src[n * v.stride_n + d]));
      for (int64_t d = 0; d < v.dim; ++d) mean[bh * v.dim + d] = static_cast<float>(sum[d] / v.tokens);
    }
  });
}

QuantQK quant_qk_int8_cpu(const at::Tensor& q, const at::Tensor& k, const std::string& layout, double sm_scale,
                          bool smooth_k) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const bool hnd = is_hnd_layout(layout);
  check_qkv(q, k, nullptr, hnd, /*allow_fp32=*/false);
  QuantQK r = allocate_quant_qk(quant_qk_shapes(q, k, hnd, smooth_k), q.options());
  const HeadView vq = head_view(q, hnd), vk = head_view(k, hnd);
  const float mult = q_multiplier(sm_scale);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* qp = static_cast<const T*>(q.const_data_ptr());
    const T* kp = static_cast<const T*>(k.const_data_ptr());
    float* mean = nullptr;
    if (smooth_k && vk.tokens > 0) {
      mean = r.k_mean.data_ptr<float>();
      key_mean(kp, vk, mean);
    } else if (smooth_k) {
      r.k_mean.zero_();
    }
    quantize_all(qp, vq, kBlockQ, mult, true, nullptr, r.q_int8.data_ptr<int8_t>(), r.q_scale.data_ptr<float>());
    quantize_all(kp, vk, kBlockK, 1.0f, false, mean, r.k_int8.data_ptr<int8_t>(), r.k_scale.data_ptr<float>());
  };
  AT_DISPATCH_REDUCED_FLOATING_TYPES(q.scalar_type(), "quant_qk_int8", [&] { run(scalar_t{}); });
  return r;
}

std::tuple<at::Tensor, at::Tensor> quant_v_fp8_cpu(const at::Tensor& v, const std::string& layout) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  const bool hnd = is_hnd_layout(layout);
  check_input(v, "v", /*allow_fp32=*/false);
  const HeadView hv = head_view(v, hnd);
  at::Tensor v_fp8 = at::empty(v.sizes(), v.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor v_scale = at::empty({hv.batch, hv.heads, hv.dim}, v.options().dtype(at::kFloat));
  const HeadView ho = head_view(v_fp8, hnd);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(v.const_data_ptr());
    auto* dst = static_cast<c10::Float8_e4m3fn*>(v_fp8.data_ptr());
    float* scales = v_scale.data_ptr<float>();
    at::parallel_for(0, hv.batch * hv.heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> amax(hv.dim);
      std::vector<char> finite(hv.dim);
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / hv.heads, h = bh % hv.heads;
        const T* in = src + b * hv.stride_b + h * hv.stride_h;
        auto* out = dst + b * ho.stride_b + h * ho.stride_h;
        std::fill(amax.begin(), amax.end(), 0.0f);
        std::fill(finite.begin(), finite.end(), 1);
        for (int64_t n = 0; n < hv.tokens; ++n)
          for (int64_t d = 0; d < hv.dim; ++d) {
            const float x = static_cast<float>(in[n * hv.stride_n + d]);
            finite[d] = finite[d] && std::isfinite(x);
            amax[d] = std::max(amax[d], std::abs(x));
          }
        float* s = scales + bh * hv.dim;
        for (int64_t d = 0; d < hv.dim; ++d) s[d] = block_scale(amax[d], finite[d], kFp8Max);
        for (int64_t n = 0; n < hv.tokens; ++n)
          for (int64_t d = 0; d < hv.dim; ++d) {
            float y = 0.0f;
            if (s[d] > 0.0f) y = std::min(kFp8Max, std::max(-kFp8Max, static_cast<float>(in[n * hv.stride_n + d]) / s[d]));
            out[n * ho.stride_n + d] = c10::Float8_e4m3fn(y);
          }
      }
    });
  };
  AT_DISPATCH_REDUCED_FLOATING_TYPES(v.scalar_type(), "quant_v_fp8", [&] { run(scalar_t{}); });
  return {v_fp8, v_scale};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> quant_qk_int8_cpu_op(
    const at::Tensor& q, const at::Tensor& k, c10::string_view layout, double sm_scale, bool smooth_k) {
  QuantQK r = quant_qk_int8_cpu(q, k, std::string(layout), sm_scale, smooth_k);
  return {r.q_int8, r.q_scale, r.k_int8, r.k_scale, r.k_mean};
}

std::tuple<at::Tensor, at::Tensor> quant_v_fp8_cpu_op(const at::Tensor& v, c10::string_view layout) {
  return quant_v_fp8_cpu(v, std::string(layout));
}

}  // namespace

TORCH_LIBRARY_IMPL(sage, CPU, m) {
  m.impl("quant_qk_int8", &quant_qk_int8_cpu_op);
  m.impl("quant_v_fp8", &quant_v_fp8_cpu_op);
}

}  // namespace sage
