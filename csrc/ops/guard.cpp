// The accuracy guard on the CPU: the flags of csrc/guard_rules.h from per-block statistics, then the flagged blocks'
// rows computed again (guard.h). The counts it keeps are sage::_guard_counts.
#include "guard.h"

#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "../contract.h"
#include "../guard_rules.h"
#include "input_checks.h"

namespace sage {

namespace {

std::atomic<int64_t> guarded_calls{0}, guarded_blocks{0};

// Per block of size tokens of one head's [N, D] float64 values: absmax / 127, and the rms over the block's real
// rows (a partial last block is not diluted by its padding).
std::pair<at::Tensor, at::Tensor> block_stats(const at::Tensor& head, int64_t size) {
  const int64_t n = head.size(0), d = head.size(1), blocks = (n + size - 1) / size, pad = blocks * size - n;
  const at::Tensor t = (pad == 0 ? head : at::constant_pad_nd(head, {0, 0, 0, pad})).reshape({blocks, size * d});
  at::Tensor rows = at::full({blocks}, static_cast<double>(size), t.options());
  rows[blocks - 1] = static_cast<double>(n - (blocks - 1) * size);
  return {t.abs().amax(-1) / 127.0, (t.square().sum(-1) / (rows * static_cast<double>(d))).sqrt()};
}

double root_mean_square(const at::Tensor& x) { return x.square().mean().sqrt().item<double>(); }

// [B, Hq, query blocks] float64: guard_rules.h's variance of each query block (HND 16-bit inputs, Nq and Nk > 0).
// One head at a time, so that the float64 copies stay the size of a head.
at::Tensor block_variances(const at::Tensor& q16, const at::Tensor& k16, double sm_scale, bool smooth_k) {
  const int64_t batch = q16.size(0), heads_q = q16.size(1), heads_kv = k16.size(1), d = q16.size(3);
  const int64_t group = heads_q / heads_kv;
  at::Tensor var = at::empty({batch, heads_q, (q16.size(2) + kBlockQ - 1) / kBlockQ}, q16.options().dtype(at::kDouble));
  auto out = var.accessor<double, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t hk = 0; hk < heads_kv; ++hk) {
      at::Tensor kd = k16[b][hk].to(at::kDouble);
      if (smooth_k) kd = kd - kd.mean({0}, /*keepdim=*/true);
      const auto [s_k, rms_k] = block_stats(kd, kBlockK);
      const double mean_s_k = root_mean_square(s_k), mean_rms_k = root_mean_square(rms_k);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const auto [s_q, rms_q] = block_stats(q16[b][h].to(at::kDouble) * sm_scale, kBlockQ);
        const auto sq = s_q.accessor<double, 1>(), rq = rms_q.accessor<double, 1>();
        for (int64_t i = 0; i < s_q.size(0); ++i)
          out[b][h][i] = guard::block_error_variance(d, sq[i], rq[i], mean_s_k, mean_rms_k);
      }
    }
  }
  return var;
}

at::Tensor flags_of(const at::Tensor& variances) {
  at::Tensor flags = at::empty(variances.sizes(), variances.options().dtype(at::kBool));
  const double* v = variances.data_ptr<double>();
  bool* f = flags.data_ptr<bool>();
  for (int64_t i = 0; i < variances.numel(); ++i) f[i] = guard::block_flagged(v[i]);
  return flags;
}

// sage::_guard_block_estimates: each query block's estimate (the standard deviation, in nats) and its flag, for
// benchmarks/accuracy.py and the tests; float32 inputs as the op computes them (bfloat16).
std::tuple<at::Tensor, at::Tensor> guard_block_estimates(const at::Tensor& q, const at::Tensor& k,
                                                          c10::string_view layout, double sm_scale, bool smooth_k) {
  const bool hnd = is_hnd_layout(std::string(layout));
  check_qkv(q, k, nullptr, hnd, /*allow_fp32=*/true);
  TORCH_CHECK(head_view(q, hnd).tokens > 0 && head_view(k, hnd).tokens > 0,
              "sage::_guard_block_estimates: needs queries and keys");
  const at::Tensor var = block_variances(as_hnd(as_computed(q), hnd), as_hnd(as_computed(k), hnd), sm_scale, smooth_k);
  return {var.sqrt(), flags_of(var)};
}

}  // namespace

void guard_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& q16, const at::Tensor& k16,
               const at::Tensor& v16, bool hnd, bool is_causal, double sm_scale, bool smooth_k, at::Tensor& out,
               at::Tensor& lse) {
  const at::Tensor qh = as_hnd(q, hnd), kh = as_hnd(k, hnd);
  const int64_t qo_len = qh.size(2), kv_len = kh.size(2);
  if (qh.numel() == 0 || kv_len == 0) return;
  const at::Tensor flags = flags_of(block_variances(as_hnd(q16, hnd), as_hnd(k16, hnd), sm_scale, smooth_k));
  const std::vector<int64_t> hits = [&] {
    const at::Tensor idx = flags.nonzero().contiguous();  // [hits, 3]: b, h, block
    return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  }();
  if (hits.empty()) return;
  ++guarded_calls;
  guarded_blocks += static_cast<int64_t>(hits.size() / 3);
  const at::Tensor vh = as_hnd(v16, hnd), out_h = as_hnd(out, hnd);
  const int64_t group = qh.size(1) / kh.size(1);
  const at::Tensor keys = at::arange(kv_len, qh.options().dtype(at::kLong));
  int64_t cached = -1;  // the KV head (b * Hkv + hk) whose float32 k and v are below: hits come in order
  at::Tensor kf, vf;
  for (size_t n = 0; n < hits.size(); n += 3) {
    const int64_t b = hits[n], h = hits[n + 1], hk = h / group, r0 = hits[n + 2] * kBlockQ;
    const int64_t rows = std::min<int64_t>(kBlockQ, qo_len - r0);
    if (b * kh.size(1) + hk != cached) {
      cached = b * kh.size(1) + hk;
      kf = kh[b][hk].to(at::kFloat);
      vf = vh[b][hk].to(at::kFloat);
    }
    at::Tensor s = at::matmul(qh[b][h].narrow(0, r0, rows).to(at::kFloat), kf.t()).mul_(sm_scale);
    if (is_causal) {  // upper-left: query i sees keys 0..i
      const at::Tensor queries = at::arange(r0, r0 + rows, keys.options()).unsqueeze(1);
      s.masked_fill_(keys.unsqueeze(0) > queries, -std::numeric_limits<float>::infinity());
    }
    const at::Tensor m = std::get<0>(s.max(-1, /*keepdim=*/true));
    const at::Tensor p = (s - m).exp_();
    const at::Tensor l = p.sum(-1, /*keepdim=*/true);
    const at::Tensor o = at::matmul(p.to(v16.scalar_type()).to(at::kFloat), vf).div_(l);
    out_h[b][h].narrow(0, r0, rows).copy_(o);
    lse[b][h].narrow(0, r0, rows).copy_((m + l.log()).squeeze(-1));
  }
}

// Not in op_schemas.cpp's table: the counts (no tensor in) and the rule exposed for tests and studies (one kernel for
// every device that has data, no fake: not an op for graphs), as rule_ops.cpp's.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  // [calls the guard acted on, query blocks it computed again], since the process started.
  m.def("_guard_counts() -> int[]", [] { return std::vector<int64_t>{guarded_calls.load(), guarded_blocks.load()}; });
  m.def("_guard_block_estimates(Tensor q, Tensor k, str tensor_layout, float sm_scale, bool smooth_k) -> "
        "(Tensor sigma, Tensor flagged)",
        &guard_block_estimates);
}

}  // namespace sage
