#include "input_checks.h"

namespace sage {

bool is_hnd_layout(const std::string& layout) {
  TORCH_CHECK(layout == "HND" || layout == "NHD",
              "sage: tensor_layout must be \"HND\" ([batch, heads, tokens, head_dim]) or \"NHD\" "
              "([batch, tokens, heads, head_dim]), got \"", layout, "\"");
  return layout == "HND";
}

HeadView head_view(const at::Tensor& t, bool hnd) {
  const int h = hnd ? 1 : 2, n = hnd ? 2 : 1;
  return HeadView{t.size(0), t.size(h), t.size(n), t.size(3), t.stride(0), t.stride(h), t.stride(n)};
}

at::Tensor as_hnd(const at::Tensor& t, bool hnd) { return hnd ? t : t.transpose(1, 2); }

at::Tensor as_computed(const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t.to(at::kBFloat16) : t; }

void check_input(const at::Tensor& t, const char* name, bool allow_fp32) {
  TORCH_CHECK(t.dim() == 4, "sage: ", name, " must be 4-D ([B, H, N, D] for HND or [B, N, H, D] for NHD), got ",
              t.dim(), "-D with shape ", t.sizes());
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16 || (allow_fp32 && dt == at::kFloat), "sage: ", name,
              " must be float16 or bfloat16", allow_fp32 ? " (float32 is accepted and computed as bfloat16)" : "",
              ", got ", dt);
  const int64_t d = t.size(3);
  TORCH_CHECK(d >= 1 && d <= kMaxHeadDim, "sage: head_dim must be between 1 and ", kMaxHeadDim, ", got ", d,
              " (", name, " has shape ", t.sizes(), ")");
  TORCH_CHECK(t.stride(3) == 1 || d == 1, "sage: the last dimension (head_dim) of ", name,
              " must be contiguous (stride 1), got strides ", t.strides(), "; call .contiguous() first");
}

void check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor* v, bool hnd, bool allow_fp32) {
  check_input(q, "q", allow_fp32);
  check_input(k, "k", allow_fp32);
  if (v) check_input(*v, "v", allow_fp32);
  for (const at::Tensor* t : {&k, v}) {
    if (!t) continue;
    const char* name = t == &k ? "k" : "v";
    TORCH_CHECK(t->device() == q.device(), "sage: q and ", name, " must be on the same device, got ", q.device(),
                " and ", t->device());
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "sage: q, k and v must have the same dtype, got q ",
                q.scalar_type(), " and ", name, " ", t->scalar_type());
  }
  const HeadView vq = head_view(q, hnd), vk = head_view(k, hnd);
  TORCH_CHECK(vq.batch == vk.batch, "sage: q and k must have the same batch size, got ", vq.batch, " and ",
              vk.batch);
  TORCH_CHECK(vq.dim == vk.dim, "sage: q and k must have the same head_dim, got ", vq.dim, " and ", vk.dim);
  TORCH_CHECK(vk.heads >= 1 && vq.heads % vk.heads == 0, "sage: the number of query heads (", vq.heads,
              ") must be a multiple of the number of key/value heads (", vk.heads,
              ") (layout ", hnd ? "HND" : "NHD", ")");
  if (v) {
    TORCH_CHECK(v->sizes() == k.sizes(), "sage: k and v must have the same shape, got ", k.sizes(), " and ",
                v->sizes());
  }
}

}  // namespace sage
