// Tensors -> sm90::QKAttentionParams -> the launcher in csrc/sm90 (see gpu_sm90_attention.h).
#if defined(SAGE_WITH_SM90)
#include "gpu_sm90_attention.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_arch.h"
#include "gpu_prologue.h"
#include "input_checks.h"
#include "../sm90/qk_int8_attention_sm90.h"

namespace sage {

// Below this many keys the fast mode runs the Triton kernel: the sm90 path measured slower there, with its V
// transpose (F18: 256 keys 0.077 ms against the Triton kernel's 0.059, 512 keys 0.095 against 0.099) and without it,
// the V quantized straight into V^T (F29: 256 keys 0.053 against 0.049).
constexpr int64_t kMinFastKeys = 512;

// The warp-specialized schedule measured faster than the serial one only in the accurate mode at head_dim 128, on
// calls of thousands of tokens (F21, three runs on the H200: 1.17-1.21x cuDNN against 1.12-1.17x at 32760 and 75600
// tokens, 0.95-1.02x against 0.94-0.99x at 2x24x16384, 2 runs of 3 at 4608), and causal since it steps by 192 keys
// (F45, H100: 0.986 against 1.103 ms at 1x32x8192); slower at head_dim 64, in the fast mode and at 256-1024 tokens.
constexpr int64_t kMinWsTokens = 4096;

namespace {

// SAGEATTN_SK1_SM90 for a call on device, or nullopt where the kernel does not run: a GPU other than sm_90, or "0".
std::optional<Sm90Use> sm90_use_on(const c10::Device& device) {
  if (device_arch(device) != "sm_90") return std::nullopt;
  const Sm90Use use = sm90_use();
  if (use == Sm90Use::kOff) return std::nullopt;
  return use;
}

sm90::Schedule pick_schedule(const AttentionArgs& a, bool fast, int64_t head_dim_pad, Sm90Use use) {
  const bool auto_ws = use == Sm90Use::kAuto && !fast && head_dim_pad == 128 && a.qo_len >= kMinWsTokens &&
                       a.kv_len >= kMinWsTokens;
  return use == Sm90Use::kForceWs || auto_ws ? sm90::Schedule::kWarpSpecialized : sm90::Schedule::kSerial;
}

// Whether the kernel is wanted for the call at all: the measured limits of Sm90Use::kAuto and the padded head_dims
// it has (checked before any allocation).
bool sm90_wanted(const AttentionArgs& a, bool fast, Sm90Use use) {
  if (use == Sm90Use::kAuto && fast && a.kv_len < kMinFastKeys) return false;
  return a.q_int8.size(3) == 64 || a.q_int8.size(3) == 128;
}

// Everything but V (pointer, type, strides, v_scale, workspace).
sm90::QKAttentionParams params_without_v(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse,
                                         bool fast, Sm90Use use) {
  const HeadView ho = head_view(out, a.hnd);
  sm90::QKAttentionParams p{};
  p.q = a.q_int8.const_data_ptr<int8_t>();
  p.q_scale = a.q_scale.const_data_ptr<float>();
  p.k = a.k_int8.const_data_ptr<int8_t>();
  p.k_scale = a.k_scale.const_data_ptr<float>();
  p.out = out.data_ptr();
  p.out_type = a.out_dtype == at::kHalf       ? sm90::OutType::kFloat16
               : a.out_dtype == at::kBFloat16 ? sm90::OutType::kBFloat16
                                              : sm90::OutType::kFloat32;
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
  p.schedule = pick_schedule(a, fast, p.head_dim_pad, use);
  p.overlap_launch = overlap_launches();
  return p;
}

// Launches the kernel on params it takes; false when the TMA maps could not be encoded (warned once).
bool launch(const sm90::QKAttentionParams& p) {
  const int err = sm90::launch_qk_int8_attention(p, c10::cuda::getCurrentCUDAStream().stream());
  if (err == sm90::kNoTensorMap) {
    TORCH_WARN_ONCE("sage: the sm90 kernel could not encode its TMA tensor maps (driver too old?); using the "
                    "default kernels");
    return false;
  }
  TORCH_CHECK(err == 0, "sage::qk_int8_attention: the sm90 kernel failed to launch (CUDA error ", err, ")");
  return true;
}

}  // namespace

bool try_sm90_attention(const AttentionArgs& a, const at::Tensor& out, const at::Tensor& lse) {
  const std::optional<Sm90Use> use = sm90_use_on(a.q_int8.device());
  if (!use || !sm90_wanted(a, a.fp8, *use)) return false;
  const HeadView hv = head_view(a.v, a.hnd);
  sm90::QKAttentionParams p = params_without_v(a, out, lse, a.fp8, *use);
  p.v = a.v.const_data_ptr();
  p.v_type = a.fp8 ? sm90::VType::kFloat8
                   : a.v.scalar_type() == at::kBFloat16 ? sm90::VType::kBFloat16 : sm90::VType::kFloat16;
  p.v_stride_b = hv.stride_b;
  p.v_stride_h = hv.stride_h;
  p.v_stride_n = hv.stride_n;
  at::Tensor workspace;
  if (a.fp8) {
    p.v_scale = a.v_scale->const_data_ptr<float>();
    workspace = at::empty({sm90::qk_attention_workspace_bytes(p)}, a.v.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
  }
  if (sm90::qk_attention_unsupported(p) != nullptr) return false;
  return launch(p);
}

std::optional<std::tuple<at::Tensor, at::Tensor>> try_sm90_fast_attention(
    const at::Tensor& q_int8, const at::Tensor& q_scale, const at::Tensor& k_int8, const at::Tensor& k_scale,
    const at::Tensor& v, int64_t qo_len, const std::string& layout, bool is_causal, at::ScalarType out_dtype) {
  if (!v.is_cuda() || use_triton_prologue()) return std::nullopt;
  const std::optional<Sm90Use> use = sm90_use_on(v.device());
  if (!use) return std::nullopt;
  // V as given (16-bit): the checks of qk_int8_attention's accurate mode, which hold for the fast one too.
  const AttentionArgs a = check_attention_args(q_int8, q_scale, k_int8, k_scale, v, std::nullopt, qo_len, layout,
                                               is_causal, out_dtype);
  if (!sm90_wanted(a, /*fast=*/true, *use)) return std::nullopt;
  // The calls qk_int8_attention's sm90 path refuses for its V transpose's grid keep the Triton kernel here too: the
  // fast mode at that size has not run on the sm90 kernel.
  if (a.batch * a.heads_k > 65535) return std::nullopt;
  const c10::cuda::CUDAGuard guard(v.device());
  auto [out, lse] = allocate_attention_out(a);
  if (lse.numel() == 0) return std::nullopt;  // no query or no head: qk_int8_attention returns the empty outputs
  sm90::QKAttentionParams p = params_without_v(a, out, lse, /*fast=*/true, *use);
  QuantVParams quant = quant_v_params(v, a.hnd);
  const int64_t v_scale_shape[] = {quant.batch, quant.heads, quant.head_dim};
  const int64_t workspace_bytes = quant_v_fp8_workspace_bytes(quant);
  const auto parts = carve(v, {{v_scale_shape, at::kFloat}, {{workspace_bytes}, at::kByte},
                               {{sm90::vt_bytes(p)}, at::kByte}});
  p.v = parts[2].const_data_ptr();
  p.v_type = sm90::VType::kFloat8Vt;
  p.v_scale = parts[0].const_data_ptr<float>();
  if (sm90::qk_attention_unsupported(p) != nullptr) return std::nullopt;
  quant.v_scale = parts[0].data_ptr<float>();
  quant.workspace = workspace_bytes > 0 ? parts[1].data_ptr() : nullptr;
  quant.v_t = static_cast<uint8_t*>(parts[2].data_ptr());
  const int err = launch_quant_v_fp8(quant, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "sage::attention: the V quantization failed to launch (CUDA error ", err, ")");
  if (!launch(p)) return std::nullopt;
  return std::make_tuple(out, lse);
}

}  // namespace sage
#endif  // SAGE_WITH_SM90
