// The accuracy guard on the CPU: the flags of csrc/guard_rules.h from per-block statistics, then the flagged blocks'
// rows computed again (guard.h). The counts it keeps are sage::_guard_counts.
#include "guard.h"

#include <torch/library.h>

#include <atomic>
#include <vector>

#include "../contract.h"
#include "../guard_rules.h"

namespace sage {

namespace {

std::atomic<int64_t> guarded_calls{0}, guarded_blocks{0};

at::Tensor as_hnd(const at::Tensor& t, bool hnd) { return hnd ? t : t.transpose(1, 2); }

// [B, H, blocks, size * D] of t, zero-padded to whole blocks of size tokens, as the prologue's int8 tensors are.
at::Tensor token_blocks(const at::Tensor& t, int64_t size) {
  const int64_t pad = round_up(t.size(2), size) - t.size(2);
  const at::Tensor padded = pad == 0 ? t : at::constant_pad_nd(t, {0, 0, 0, pad});
  return padded.reshape({t.size(0), t.size(1), -1, size * t.size(3)});
}

// absmax / 127 and rms of each block: [B, H, blocks] each, float64.
std::pair<at::Tensor, at::Tensor> block_stats(const at::Tensor& blocks) {
  return {blocks.abs().amax(-1) / 127.0, blocks.square().mean(-1).sqrt()};
}

// [B, Hq, query blocks] bool: guard_rules.h's flag of each query block (HND inputs).
at::Tensor flagged_blocks(const at::Tensor& q16, const at::Tensor& k16, double sm_scale, bool smooth_k) {
  at::Tensor kd = k16.to(at::kDouble);
  if (smooth_k) kd = kd - kd.mean({2}, /*keepdim=*/true);
  const auto [s_q, rms_q] = block_stats(token_blocks(q16.to(at::kDouble) * sm_scale, kBlockQ));
  const auto [s_k, rms_k] = block_stats(token_blocks(kd, kBlockK));
  const at::Tensor max_s_k = s_k.amax(-1), max_rms_k = rms_k.amax(-1);  // [B, Hkv]
  const int64_t group = q16.size(1) / k16.size(1), d = q16.size(3);
  at::Tensor flags = at::zeros(s_q.sizes(), s_q.options().dtype(at::kBool));
  const auto sq = s_q.accessor<double, 3>(), rq = rms_q.accessor<double, 3>();
  const auto msk = max_s_k.accessor<double, 2>(), mrk = max_rms_k.accessor<double, 2>();
  auto f = flags.accessor<bool, 3>();
  for (int64_t b = 0; b < s_q.size(0); ++b)
    for (int64_t h = 0; h < s_q.size(1); ++h)
      for (int64_t i = 0; i < s_q.size(2); ++i)
        f[b][h][i] = guard::block_flagged(
            guard::block_error_variance(d, sq[b][h][i], rq[b][h][i], msk[b][h / group], mrk[b][h / group]));
  return flags;
}

}  // namespace

void guard_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& q16, const at::Tensor& k16,
               const at::Tensor& v16, bool hnd, bool is_causal, double sm_scale, bool smooth_k, at::Tensor& out,
               at::Tensor& lse) {
  const at::Tensor qh = as_hnd(q, hnd), kh = as_hnd(k, hnd);
  const int64_t qo_len = qh.size(2), kv_len = kh.size(2);
  if (qh.numel() == 0 || kv_len == 0) return;
  const at::Tensor flags = flagged_blocks(as_hnd(q16, hnd), as_hnd(k16, hnd), sm_scale, smooth_k);
  const std::vector<int64_t> hits = [&] {
    const at::Tensor idx = flags.nonzero().contiguous();  // [hits, 3]: b, h, block
    return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  }();
  if (hits.empty()) return;
  ++guarded_calls;
  guarded_blocks += static_cast<int64_t>(hits.size() / 3);
  const at::Tensor qf = qh.to(at::kFloat), kf = kh.to(at::kFloat), vf = as_hnd(v16, hnd).to(at::kFloat);
  const at::Tensor out_h = as_hnd(out, hnd);
  const int64_t group = qh.size(1) / kh.size(1);
  const at::Tensor keys = at::arange(kv_len, qf.options().dtype(at::kLong));
  for (size_t n = 0; n < hits.size(); n += 3) {
    const int64_t b = hits[n], h = hits[n + 1], r0 = hits[n + 2] * kBlockQ;
    const int64_t rows = std::min<int64_t>(kBlockQ, qo_len - r0);
    at::Tensor s = at::matmul(qf[b][h].narrow(0, r0, rows), kf[b][h / group].t()).mul_(sm_scale);
    if (is_causal) {  // upper-left: query i sees keys 0..i
      const at::Tensor queries = at::arange(r0, r0 + rows, keys.options()).unsqueeze(1);
      s.masked_fill_(keys.unsqueeze(0) > queries, -std::numeric_limits<float>::infinity());
    }
    const at::Tensor m = std::get<0>(s.max(-1, /*keepdim=*/true));
    const at::Tensor p = (s - m).exp_();
    const at::Tensor l = p.sum(-1, /*keepdim=*/true);
    const at::Tensor o = at::matmul(p.to(v16.scalar_type()).to(at::kFloat), vf[b][h / group]).div_(l);
    out_h[b][h].narrow(0, r0, rows).copy_(o);
    lse[b][h].narrow(0, r0, rows).copy_((m + l.log()).squeeze(-1));
  }
}

// Not in op_schemas.cpp's table: no tensor in, nothing to dispatch, no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  // [calls the guard acted on, query blocks it computed again], since the process started.
  m.def("_guard_counts() -> int[]", [] { return std::vector<int64_t>{guarded_calls.load(), guarded_blocks.load()}; });
}

}  // namespace sage
