// Which of the two precompiled Triton attention variants a call may run, as plain C++ (no torch): the one
// definition of the rule. gpu_triton_kernels.cpp applies it to pick the image; torch_sage/triton_attention.py (the
// JIT kernel) through sage::_triton_unmasked_variant (rule_ops.cpp). build_tools/aot_build.py declares what the
// "fast" image assumes (_ATTN_FAST_ALIGNED divisible by 16, 32-bit strides); test/test_aot_build.py checks that
// every call this rule admits meets that declaration.
#pragma once

#include <cstdint>
#include <limits>

namespace sage {

// True when a call may run the "fast" variant: no head_dim masks (head_dim is its padded size), V's address and
// the batch/head/token strides of V and out (in elements) divisible by 16 and within 32 bits; else "any".
inline bool triton_unmasked_variant(int64_t head_dim, int64_t head_dim_pad, uint64_t v_address,
                                    const int64_t (&strides)[6]) {
  if (head_dim != head_dim_pad || v_address % 16 != 0) return false;
  for (const int64_t s : strides) {
    if (s % 16 != 0 || s > std::numeric_limits<int32_t>::max()) return false;
  }
  return true;
}

}  // namespace sage
