// CUDA/HIP kernels of sage::quant_qk_int8 and sage::quant_v_fp8: tensors -> QuantQKParams / QuantVParams -> the
// hand-written launchers in csrc/hip; and sage::attention's own GPU prologue, the same kernels with its intermediates
// carved from one allocation. SAGEATTN_SK1_PROLOGUE=triton routes both ops to their Triton implementations
// (registered from Python).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <string>

#include "gpu_prologue.h"
#include "input_checks.h"
#include "settings.h"
#include "gpu_arch.h"
#include "prologue_outputs.h"
#include "quant_qk_int8.h"
#include "quant_v_fp8.h"

namespace sage {

QuantQKParams quant_qk_params(const at::Tensor& q, const at::Tensor& k, bool hnd, double sm_scale, bool smooth_k,
                              const QuantQKShapes& shapes) {
  const HeadView vq = head_view(q, hnd), vk = head_view(k, hnd);
  QuantQKParams p{};
  p.q = q.const_data_ptr();
  p.k = k.const_data_ptr();
  p.dtype = q.scalar_type() == at::kHalf ? InDtype::kFloat16 : InDtype::kBFloat16;
  p.batch = vq.batch;
  p.heads_q = vq.heads;
  p.heads_k = vk.heads;
  p.q_len = vq.tokens;
  p.k_len = vk.tokens;
  p.head_dim = vq.dim;
  p.q_stride_b = vq.stride_b;
  p.q_stride_h = vq.stride_h;
  p.q_stride_n = vq.stride_n;
  p.k_stride_b = vk.stride_b;
  p.k_stride_h = vk.stride_h;
  p.k_stride_n = vk.stride_n;
  p.q_len_pad = shapes.q_int8[2];
  p.k_len_pad = shapes.k_int8[2];
  p.head_dim_pad = shapes.q_int8[3];
  p.q_mult = q_multiplier(sm_scale);
  p.smooth_k = smooth_k;
  p.overlap_launch = call_settings().overlap_launches;
  return p;
}

void point_at(QuantQKParams& p, const QuantQK& r) {
  p.q_int8 = r.q_int8.data_ptr<int8_t>();
  p.q_scale = r.q_scale.data_ptr<float>();
  p.k_int8 = r.k_int8.data_ptr<int8_t>();
  p.k_scale = r.k_scale.data_ptr<float>();
  p.k_mean = p.smooth_k ? r.k_mean.data_ptr<float>() : nullptr;
}

namespace {

using QuantOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Scratch of `bytes` bytes on like's device, 8-byte aligned.
at::Tensor workspace_of(int64_t bytes, const at::Tensor& like) {
  return at::empty({(bytes + 7) / 8}, like.options().dtype(at::kDouble));
}

QuantOut triton_prologue(const at::Tensor& q, const at::Tensor& k, c10::string_view layout, double sm_scale,
                         bool smooth_k) {
  static auto triton = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("sage::_quant_qk_int8_triton", "")
                           .typed<QuantOut(const at::Tensor&, const at::Tensor&, c10::string_view, double, bool)>();
  return triton.call(q, k, layout, sm_scale, smooth_k);
}

// After op's launch returned err: true when the build has no kernel image for this NVIDIA arch
// (TORCH_CUDA_ARCH_LIST left it out). The launcher read, and so cleared, that error and nothing ran, so the Triton
// kernels, compiled on first use, take the call, as the attention kernel's fallback does (warned once). Any other
// error raises; false when the launch succeeded.
bool triton_takes_call(int err, [[maybe_unused]] const c10::Device& device, const char* op) {
#if !defined(USE_ROCM)
  if (err == cudaErrorNoKernelImageForDevice) {
    TORCH_WARN_ONCE("sage: torch_sage was built without the quantization kernels for this GPU (", device_arch(device),
                    "); using the Triton prologue, compiled on first use. Rebuild with ",
                    "TORCH_CUDA_ARCH_LIST including this GPU's compute capability to precompile it.");
    return true;
  }
#endif
  TORCH_CHECK(err == 0, op, ": kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return false;
}

QuantOut quant_qk_int8_gpu(const at::Tensor& q, const at::Tensor& k, c10::string_view layout_view, double sm_scale,
                           bool smooth_k) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  device_arch(q.device());  // a GPU torch_sage does not run on: its error first
  const std::string layout(layout_view);
  const bool hnd = is_hnd_layout(layout);
  check_qkv(q, k, nullptr, hnd, /*allow_fp32=*/false);
  if (call_settings().triton_prologue) return triton_prologue(q, k, layout, sm_scale, smooth_k);
  const c10::cuda::CUDAGuard guard(q.device());
  const QuantQKShapes s = quant_qk_shapes(q, k, hnd, smooth_k);
  QuantQKParams p = quant_qk_params(q, k, hnd, sm_scale, smooth_k, s);
  const QuantQK r = allocate_quant_qk(s, q.options());
  point_at(p, r);
  at::Tensor workspace;
  if (const int64_t bytes = quant_qk_int8_workspace_bytes(p)) {
    workspace = workspace_of(bytes, q);
    p.workspace = workspace.data_ptr();
  }
  const int err = launch_quant_qk_int8(p, c10::cuda::getCurrentCUDAStream().stream());
  if (triton_takes_call(err, q.device(), "sage::quant_qk_int8")) {
    return triton_prologue(q, k, layout, sm_scale, smooth_k);
  }
  return {r.q_int8, r.q_scale, r.k_int8, r.k_scale, r.k_mean};
}

using QuantVOut = std::tuple<at::Tensor, at::Tensor>;

QuantVOut triton_quant_v(const at::Tensor& v, c10::string_view layout) {
  static auto triton = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("sage::_quant_v_fp8_triton", "")
                           .typed<QuantVOut(const at::Tensor&, c10::string_view)>();
  return triton.call(v, layout);
}

QuantVOut quant_v_fp8_gpu(const at::Tensor& v, c10::string_view layout_view) {
  const SettingsScope settings;  // settings.h: this call's one reading of the environment
  device_arch(v.device());
  const std::string layout(layout_view);
  const bool hnd = is_hnd_layout(layout);
  check_input(v, "v", /*allow_fp32=*/false);
  if (call_settings().triton_prologue) return triton_quant_v(v, layout);
  const c10::cuda::CUDAGuard guard(v.device());
  QuantVParams p = quant_v_params(v, hnd);
  at::Tensor v_fp8 = at::empty(v.sizes(), v.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor v_scale = at::empty({p.batch, p.heads, p.head_dim}, v.options().dtype(at::kFloat));
  const HeadView ho = head_view(v_fp8, hnd);
  p.v_fp8 = static_cast<uint8_t*>(v_fp8.data_ptr());
  p.out_stride_b = ho.stride_b;
  p.out_stride_h = ho.stride_h;
  p.out_stride_n = ho.stride_n;
  p.v_scale = v_scale.data_ptr<float>();
  at::Tensor workspace;
  if (const int64_t bytes = quant_v_fp8_workspace_bytes(p)) {
    workspace = workspace_of(bytes, v);
    p.workspace = workspace.data_ptr();
  }
  const int err = launch_quant_v_fp8(p, c10::cuda::getCurrentCUDAStream().stream());
  if (triton_takes_call(err, v.device(), "sage::quant_v_fp8")) return triton_quant_v(v, layout);
  return {v_fp8, v_scale};
}

}  // namespace

c10::SmallVector<at::Tensor, 8> carve(const at::Tensor& like, std::initializer_list<Part> parts) {
  constexpr int64_t kAlign = 512;  // the caching allocator's: each part as aligned as its own at::empty would be
  c10::SmallVector<int64_t, 8> offsets;
  int64_t bytes = 0;
  for (const Part& part : parts) {
    offsets.push_back(bytes);
    bytes += round_up(c10::multiply_integers(part.sizes) * static_cast<int64_t>(c10::elementSize(part.dtype)), kAlign);
  }
  const at::Tensor buffer = at::empty({bytes}, like.options().dtype(at::kByte));
  c10::SmallVector<at::Tensor, 8> tensors;
  const int64_t* offset = offsets.begin();
  for (const Part& part : parts) {
    // As Tensor::view(dtype) makes it: the buffer's storage seen with another element type, here without a
    // dispatcher call.
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(buffer.storage()),
                                                     buffer.key_set(), c10::scalarTypeToTypeMeta(part.dtype));
    impl->set_storage_offset(*offset++ / static_cast<int64_t>(c10::elementSize(part.dtype)));
    impl->set_sizes_contiguous(part.sizes);
    tensors.emplace_back(std::move(impl));
  }
  return tensors;
}

std::optional<QuantQK> quant_qk_int8_one_allocation(const at::Tensor& q, const at::Tensor& k, bool hnd,
                                                    double sm_scale, bool smooth_k) {
  device_arch(q.device());  // a GPU torch_sage does not run on: its error first
  if (call_settings().triton_prologue) return std::nullopt;
  const c10::cuda::CUDAGuard guard(q.device());
  const QuantQKShapes s = quant_qk_shapes(q, k, hnd, smooth_k);
  QuantQKParams p = quant_qk_params(q, k, hnd, sm_scale, smooth_k, s);
  const int64_t workspace_bytes = quant_qk_int8_workspace_bytes(p);  // from the sizes alone
  const auto parts = carve(q, {{s.q_int8, at::kChar}, {s.q_scale, at::kFloat}, {s.k_int8, at::kChar},
                               {s.k_scale, at::kFloat}, {s.k_mean, at::kFloat}, {{workspace_bytes}, at::kByte}});
  const QuantQK r{parts[0], parts[1], parts[2], parts[3], parts[4]};
  point_at(p, r);
  p.workspace = workspace_bytes > 0 ? parts[5].data_ptr() : nullptr;
  const int err = launch_quant_qk_int8(p, c10::cuda::getCurrentCUDAStream().stream());
  if (triton_takes_call(err, q.device(), "sage::quant_qk_int8")) return std::nullopt;
  return r;
}

QuantVParams quant_v_params(const at::Tensor& v, bool hnd) {
  const HeadView hv = head_view(v, hnd);
  QuantVParams p{};
  p.v = v.const_data_ptr();
  p.dtype = v.scalar_type() == at::kHalf ? InDtype::kFloat16 : InDtype::kBFloat16;
  p.batch = hv.batch;
  p.heads = hv.heads;
  p.tokens = hv.tokens;
  p.head_dim = hv.dim;
  p.stride_b = hv.stride_b;
  p.stride_h = hv.stride_h;
  p.stride_n = hv.stride_n;
  p.head_dim_pad = padded_head_dim(hv.dim);
  p.overlap_launch = call_settings().overlap_launches;
  return p;
}

TORCH_LIBRARY_IMPL(sage, CUDA, m) {
  m.impl("quant_qk_int8", &quant_qk_int8_gpu);
  m.impl("quant_v_fp8", &quant_v_fp8_gpu);
}

}  // namespace sage
