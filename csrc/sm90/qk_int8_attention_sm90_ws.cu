// Warp-specialized Hopper kernel of sage::qk_int8_attention (Schedule::kWarpSpecialized), both P.V modes.
//
// A CTA of 384 threads covers 128 query rows. Warpgroup 0 is the producer: it gives most of its registers back
// (setmaxnreg) and one thread issues every TMA load into a ring of kStages K and V tiles, each stage with a "full"
// mbarrier (the TMA's bytes) and an "empty" one (one arrival from each consumer warp once its wgmma has read it).
// Warpgroups 1 and 2 are consumers of 64 rows each, with 240 registers a thread. Per key block n a consumer:
//   waits for K(n) and V(n - 1), takes its turn, issues Q.K^T(n) and P.V(n - 1), passes the turn,
//   waits for Q.K^T(n) and releases K(n), runs the softmax of block n beside its own P.V(n - 1),
//   waits for P.V(n - 1), releases V(n - 1), rescales O, and packs P(n).
// Turns (named barriers 1 and 2) make the two consumers issue their products in alternation, so that one's softmax
// runs while the other's products keep the tensor cores busy. The fast mode's arithmetic is that of the serial
// kernel, in the same order (attention_parts.cuh), so both give the same bits; the accurate mode takes 192-key blocks
// (keys_per_step), so its online softmax rounds at other steps than the serial kernel's.
#include "attention_parts.cuh"

namespace sage {
namespace sm90 {
namespace {

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
__global__ void __launch_bounds__(kWsThreads, 1)
    qk_int8_attention_ws_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                const __grid_constant__ CUtensorMap v_map, const KernelArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WsSmem<D, FP8>;
  constexpr int N = kWsKeys<FP8>;
  using T = Tiles<D, FP8, N>;
  constexpr bool kSums = kTensorSums<CAUSAL, FP8>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = aligned_smem(smem_raw);
  WsBarriers* bars = reinterpret_cast<WsBarriers*>(smem);
  uint8_t* k_tiles = smem + L::kK;
  uint8_t* v_tiles = smem + L::kV;

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / kWarpgroup, 0);  // warp-uniform role
  // Both consumers run every key block of the CTA. Causal, the last block may lie wholly past the first consumer's
  // rows (192-key blocks, 128-row CTAs): those rows then see only -inf there, so that block leaves their m, l and O
  // as they were (alpha = 1, P = 0).
  const CtaTile<CAUSAL, kWsRows, N> tile(a);
  const int m0 = tile.m0, h = tile.h, b = tile.b, hk = tile.hk, bh = tile.bh, bhk = tile.bhk;
  const int n_blocks = tile.n_blocks;

  if (kSums && tid < kWarpgroup) tensor_sum_rows<D>(v_tiles);
  start_cta(bars, &q_map, &k_map, &v_map);

  if (wg == 0) {
    // ---- producer ----
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      mbar_arrive_expect_tx(&bars->q_full, kConsumers * T::kQBytes);
      for (int c = 0; c < kConsumers; ++c) {
        tma_load_3d(smem + L::kQ + c * T::kQBytes, &q_map, &bars->q_full, 0, m0 + c * kRows, bh);
      }
      // In the order the consumers use them: K(n) beside V(n - 1). A stage is refilled after both consumers
      // released the block kWsStages before (that release is the stage's empty barrier's completion n / S - 1).
      for (int n = 0; n <= n_blocks; ++n) {
        if (n < n_blocks) {
          const int s = n % kWsStages;
          if (n >= kWsStages) mbar_wait(&bars->k_empty[s], ((n / kWsStages) - 1) & 1);
          load_k<D, FP8, N>(k_tiles + s * T::kKBytes, &k_map, &bars->k_full[s], n * N, bhk);
        }
        if (n > 0) {
          const int nv = n - 1, s = nv % kWsStages;
          if (nv >= kWsStages) mbar_wait(&bars->v_empty[s], ((nv / kWsStages) - 1) & 1);
          load_v<D, FP8, N>(v_tiles + s * T::kVStageBytes, &v_map, &bars->v_full[s], nv * N, bhk, hk, b);
        }
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1, ctid = tid % kWarpgroup, warp = ctid / 32, lane = tid % 32;
  const int my_turn = kTurnBarrier + cw, next_turn = kTurnBarrier + (cw + 1) % kConsumers;
  const bool last = cw == kConsumers - 1;  // the one that hands the first turn to consumer 0
  const int row0 = m0 + cw * kRows;
  const int r0 = 16 * warp + lane / 4, cq = 2 * (lane % 4);
  const float q_scale = a.q_scale[static_cast<int64_t>(bh) * (a.nq_pad / kBlockQ) + m0 / kBlockQ];
  const float* k_scales = a.k_scale + static_cast<int64_t>(bhk) * (a.nk_pad / kBlockK);
  const float kInf = __int_as_float(0x7f800000);
  // Blocks before n_full need no mask: they end at or before kv_len and (causal) at or before the first row.
  const int n_full = min(a.kv_len / N, CAUSAL ? (row0 + 1) / N : n_blocks);
  const uint32_t q_addr = smem_addr(smem + L::kQ + cw * T::kQBytes);
  const auto k_addr = [&](int n) { return smem_addr(k_tiles + (n % kWsStages) * T::kKBytes); };
  const auto v_addr = [&](int n) { return smem_addr(v_tiles + (n % kWsStages) * T::kVStageBytes); };
  const auto release = [&](uint64_t* empty) {
    if (lane == 0) mbar_arrive(empty);
  };

  OnlineSoftmax<BF16, CAUSAL, FP8, N> softmax{{-kInf, -kInf}, {0.0f, 0.0f}, q_scale, k_scales, a.kv_len, a.nk_pad,
                                              row0 + r0};
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float o_blk[FP8 ? kBlockAccRegs<D, kSums> : 1];
  uint32_t p[kPRegs<FP8, N>];
  float alpha_prev[2];  // fast mode: block n - 1's alpha, applied when its P.V is added to O

  // Block n's k scales: the accurate mode loads them before waiting for the block's Q.K^T (early_scales), so that
  // their latency passes during the wgmma; the fast mode inside each branch below, where the softmax starts (loaded
  // before the wait, or once ahead of the branches, they hold registers that its causal D=128 instantiation lacks).
  // The causal fast consumers keep the float maxima, which need fewer registers there than INTEGER_MAX.
  using KScales = typename decltype(softmax)::KScales;
  const auto early_scales = [&](int n) { return FP8 ? KScales{} : softmax.load_k_scales(n); };
  const auto softmax_block = [&](int n, const int32_t (&s_acc)[N / 2], const KScales early, float (&pf)[N / 2],
                                 float (&alpha)[2]) {
    if (n < n_full) {
      softmax.template scores<false, !(CAUSAL && FP8), !kSums>(n, s_acc, FP8 ? softmax.load_k_scales(n) : early, cq, pf,
                                                       alpha);
    } else {
      softmax.template scores<true, true, !kSums>(n, s_acc, FP8 ? softmax.load_k_scales(n) : early, cq, pf, alpha);
    }
  };
  const auto fence_pv_operands = [&]() {  // O (or the fresh block accumulator) and P are written before the fence
#pragma unroll
    for (int i = 0; i < D / 2; ++i) fence_operand(o[i]);
#pragma unroll
    for (int i = 0; i < kPRegs<FP8, N>; ++i) fence_operand(p[i]);
  };
  const auto issue_pv = [&](int n) {
    if constexpr (FP8) {
      pv_tile_fp8<D, kSums>(o_blk, p, v_addr(n));
    } else {
      pv_tile<D, BF16, N>(o, p, v_addr(n));
    }
    wgmma_commit();
  };
  const auto fence_softmax = [](float (&pf)[N / 2], float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) fence_operand(pf[i]);
    fence_operand(alpha[0]);
    fence_operand(alpha[1]);
  };
  const auto fence_pv_result = [&]() {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) {
      if constexpr (FP8) {
        fence_operand(o_blk[i]);
      } else {
        fence_operand(o[i]);
      }
    }
  };
  const auto add_fast_block = [&]() {  // fast mode: O = O * alpha(n - 1) + P.V(n - 1), as the serial kernel does
    if constexpr (FP8) {
#pragma unroll
      for (int r = 0; r < D / 2; ++r) o[r] = fmaf(o[r], alpha_prev[(r / 2) % 2], o_blk[r]);
    }
    if constexpr (kSums) softmax.template add_tensor_sums<D>(o_blk, alpha_prev);
  };

  if (last) named_bar_arrive(kTurnBarrier, kTurnThreads);  // consumer 0 goes first
  mbar_wait(&bars->q_full, 0);

  // Block 0: Q.K^T alone.
  {
    int32_t s_acc[N / 2];
    float pf[N / 2];
    float alpha[2];
    mbar_wait(&bars->k_full[0], 0);
    named_bar_sync(my_turn, kTurnThreads);
    wgmma_fence();
    qk_tile<D, N>(s_acc, q_addr, k_addr(0));
    wgmma_commit();
    named_bar_arrive(next_turn, kTurnThreads);
    const KScales ks = early_scales(0);
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) fence_operand(s_acc[i]);
    release(&bars->k_empty[0]);
    softmax_block(0, s_acc, ks, pf, alpha);
    softmax.pack(pf, p);  // O is still 0: nothing to rescale
    alpha_prev[0] = alpha[0];
    alpha_prev[1] = alpha[1];
  }

  // Blocks 1 .. n_blocks - 1: Q.K^T(n) and P.V(n - 1) in flight together, the softmax of n beside P.V(n - 1).
  for (int n = 1; n < n_blocks; ++n) {
    int32_t s_acc[N / 2];
    float pf[N / 2];
    float alpha[2];
    mbar_wait(&bars->k_full[n % kWsStages], (n / kWsStages) & 1);
    mbar_wait(&bars->v_full[(n - 1) % kWsStages], ((n - 1) / kWsStages) & 1);
    named_bar_sync(my_turn, kTurnThreads);
    fence_pv_operands();
    wgmma_fence();
    qk_tile<D, N>(s_acc, q_addr, k_addr(n));
    wgmma_commit();
    issue_pv(n - 1);
    named_bar_arrive(next_turn, kTurnThreads);
    const KScales ks = early_scales(n);
    wgmma_wait<1>();  // Q.K^T(n) is done, P.V(n - 1) may still run
#pragma unroll
    for (int i = 0; i < N / 2; ++i) fence_operand(s_acc[i]);
    release(&bars->k_empty[n % kWsStages]);
    softmax_block(n, s_acc, ks, pf, alpha);
    fence_softmax(pf, alpha);  // the softmax stays before the wait, beside P.V(n - 1), and P is packed after it
    wgmma_wait<0>();
    fence_softmax(pf, alpha);
    fence_pv_result();
    release(&bars->v_empty[(n - 1) % kWsStages]);
    if constexpr (FP8) {
      add_fast_block();
      alpha_prev[0] = alpha[0];
      alpha_prev[1] = alpha[1];
    } else {
      rescale_o<D>(o, alpha);
    }
    softmax.pack(pf, p);
  }

  // The last block's P.V. The last consumer keeps its final turn: consumer 0 has no turn left to take.
  {
    const int n = n_blocks - 1;
    mbar_wait(&bars->v_full[n % kWsStages], (n / kWsStages) & 1);
    named_bar_sync(my_turn, kTurnThreads);
    fence_pv_operands();
    wgmma_fence();
    issue_pv(n);
    if (!last) named_bar_arrive(next_turn, kTurnThreads);
    wgmma_wait<0>();
    fence_pv_result();
    release(&bars->v_empty[n % kWsStages]);
    add_fast_block();
  }

  store_rows<D, Out, FP8>(a, o, softmax, b, h, bhk, row0 + r0, cq, lane);
#else
  __trap();  // built without sm_90a: the host never launches it there (it dispatches on sm_90 only)
#endif
}

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
struct WsLaunch {
  static int run(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                 const CUtensorMap& v_map, cudaStream_t stream) {
    return launch_row_tiles<qk_int8_attention_ws_kernel<D, BF16, Out, CAUSAL, FP8>, WsSmem<D, FP8>::kAllocBytes,
                            kWsRows, kWsThreads>(p, q_map, k_map, v_map, stream);
  }
};

}  // namespace

namespace detail {

int launch_warp_specialized(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                            const CUtensorMap& v_map, cudaStream_t stream) {
  return launch_for_types<WsLaunch>(p, q_map, k_map, v_map, stream);
}

}  // namespace detail
}  // namespace sm90
}  // namespace sage
