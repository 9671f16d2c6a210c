// Which attention kernel runs a call of sage::qk_int8_attention (and of sage::attention's fused fast mode): the
// one place of that rule, a pure function of the GPU, the build, the settings and the call's shape. No ATen:
// test/test_kernel_choice.py checks it on the CPU through sage::_attention_kernel_choice (kernel_choice.cpp).
#pragma once
#include <cstdint>

namespace sage {

// SAGEATTN_SK1_SM90 (parsed in settings.cpp): the hand-written Hopper kernel where it is faster (kAuto),
// wherever it can run in the serial (kForce) or warp-specialized (kForceWs) schedule, or never (kOff).
enum class Sm90Use { kOff, kAuto, kForce, kForceWs };
// SAGEATTN_SK1_MMA (parsed in settings.cpp): the hand-written mma.sync kernel on the GPUs it is made for, sm_80 to
// sm_89 and sm_120/121, in the modes mma_default names (kAuto); on every NVIDIA GPU from sm_80 on, sm_90 included, in
// both modes (kForce, for tests and benchmarks on the H100); or never (kOff).
enum class MmaUse { kOff, kAuto, kForce };

struct KernelSettings {
  Sm90Use sm90 = Sm90Use::kAuto;
  MmaUse mma = MmaUse::kAuto;
};

enum class AttentionKernel { kTriton, kSm90Serial, kSm90Ws, kMma };

// What the choice reads of a call.
struct KernelCall {
  int arch;  // NVIDIA compute capability as 10 major + minor (80, 86, 89, 90, 120); 0 on AMD
  bool fast;  // fp8 V (the fast mode)
  int64_t head_dim_pad, qo_len, kv_len;
};

// The kernels this build compiled (setup.py: SAGE_WITH_SM90, SAGE_WITH_MMA).
struct BuiltKernels {
  bool sm90, mma;
};

// Below this many keys the fast mode runs the Triton kernel on sm_90: there the sm90 path's fixed costs (the V
// transpose or the V^T quantization, its longer launch) outweigh its faster steps (measured on the H100 and H200,
// docs/FINDINGS.md).
constexpr int64_t kMinSm90FastKeys = 512;

// The warp-specialized schedule is faster than the serial one only in the accurate mode at head_dim 128 on calls of
// thousands of tokens, causal ones included (it steps by 192 keys); at head_dim 64, in the fast mode and at
// 256-1024 tokens the serial one is faster (measured on the H100 and H200, docs/FINDINGS.md).
constexpr int64_t kMinWsTokens = 4096;

// The GPUs the mma kernel is made to be the default on.
constexpr bool mma_target_arch(int arch) { return (arch >= 80 && arch < 90) || arch == 120 || arch == 121; }

// Whether SAGEATTN_SK1_MMA unset runs the mma kernel on those GPUs, per mode. No card it is made for has run it, so
// the choice rests on the H100, where it and the Triton kernel compiled as mma.sync code (that kernel's code on those
// cards) both run: there the mma kernel was faster in the fast mode, and in the accurate mode not at every shape
// (docs/FINDINGS.md). So the fast mode runs it, and the accurate mode keeps the Triton kernel until it is ahead.
constexpr bool kMmaDefaultAccurate = false;
constexpr bool kMmaDefaultFast = true;

constexpr bool mma_default(int arch, bool fast) {
  return (fast ? kMmaDefaultFast : kMmaDefaultAccurate) && mma_target_arch(arch);
}

// The kernel for a call. A hand-written kernel chosen here may still refuse the call for what the choice does not
// read (alignment, grid limits, no image for the device): its launcher then says so and the Triton kernel runs.
inline AttentionKernel choose_kernel(const KernelCall& c, const KernelSettings& s, const BuiltKernels& built) {
  const bool tiles = c.head_dim_pad == 64 || c.head_dim_pad == 128;  // both hand-written kernels' head_dims
  if (!tiles || c.arch == 0) return AttentionKernel::kTriton;
  const bool mma_on = built.mma && (s.mma == MmaUse::kForce || (s.mma == MmaUse::kAuto && mma_default(c.arch, c.fast)));
  // The mma kernel's fast mode needs e4m3 tensor cores (sm_89 and newer); on sm_80 / sm_86 it is the Triton kernel's.
  if (mma_on && c.arch >= 80 && (!c.fast || c.arch >= 89)) return AttentionKernel::kMma;
  if (built.sm90 && c.arch == 90 && s.sm90 != Sm90Use::kOff) {
    if (s.sm90 == Sm90Use::kAuto && c.fast && c.kv_len < kMinSm90FastKeys) return AttentionKernel::kTriton;
    const bool auto_ws = s.sm90 == Sm90Use::kAuto && !c.fast && c.head_dim_pad == 128 && c.qo_len >= kMinWsTokens &&
                         c.kv_len >= kMinWsTokens;
    return s.sm90 == Sm90Use::kForceWs || auto_ws ? AttentionKernel::kSm90Ws : AttentionKernel::kSm90Serial;
  }
  return AttentionKernel::kTriton;
}

inline const char* kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kSm90Serial: return "sm90";
    case AttentionKernel::kSm90Ws: return "sm90-ws";
    case AttentionKernel::kMma: return "mma";
    default: return "triton";
  }
}

}  // namespace sage
