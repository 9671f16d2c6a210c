// The numeric contract of docs/SEMANTICS.md, defined once for C++: csrc/ops (ATen host code and CPU kernels),
// csrc/hip (the hand-written prologue) and csrc/sm90 include it. No torch, no CUDA: plain constexpr.
// Python defines the same rules once in torch_sage/contract.py; test/test_contract.py compiles this header and
// checks that the two agree.
#pragma once
#include <cstdint>

namespace sage {

constexpr int64_t kBlockQ = 128;  // query tokens per int8 block (one float32 scale each)
constexpr int64_t kBlockK = 64;   // key tokens per int8 block
constexpr int64_t kMaxHeadDim = 256;
constexpr float kFp8Max = 448.0f;  // largest finite float8_e4m3fn
constexpr double kLog2Fp8Max = 8.807354922057604;  // log2(kFp8Max): the fast mode makes p * kFp8Max as exp2(... + it)
constexpr double kLog2e = 1.4426950408889634;  // scores are in base 2: q is scaled by sm_scale * log2(e)
// |sm_scale| at most this: beyond it the float32 scores can overflow where exact attention stays finite (with float16
// inputs |q . k| <= 256 * 65504^2 ~ 1.1e12, times 1.44e6 is ~1.6e18, far inside float32; at 1e36 the scores of
// ordinary inputs are inf and every row NaN). Real models use 1/sqrt(head_dim) or a small multiple.
constexpr double kMaxSmScale = 1e6;

constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// head_dim is zero-padded to the sizes the kernels are built for (64, 128, 256).
constexpr int64_t padded_head_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

}  // namespace sage
