// Hopper kernel of sage::qk_int8_attention, both P.V modes (qk_int8_attention_sm90.h). Design (part 1 of the Hopper
// work): one warpgroup (128 threads) per CTA of kRows = 64 query rows, three CTAs an SM at head_dim 128 (at most 168
// registers a thread and 74 KiB of shared memory) and four at 64 (kCtasPerSm), whose softmax and wgmma interleave;
// thread 0 issues every TMA load. K tiles of kBlockN = 128 keys in a two-stage ring, V in two stages or one
// (Smem), each stage with its own "full" mbarrier, so that Q.K^T of a block starts as soon as its K has landed; a
// stage is refilled once every warp is past the wgmma that read it. Loads (the producer part) and math (the
// consumer part) are separate functions.
//
// Per key block: S = Q.K^T on wgmma m64n128k32 s32.s8.s8 (both operands K-major in shared memory), scaled by the
// block's q and k scales; online softmax in base 2 (row statistics in float32, rows shared by the 4 lanes of a
// quad). Accurate mode: P rounded to V's 16-bit type and fed from registers (the S accumulator layout is the
// A-fragment layout) to wgmma m64n{64,128}k16 with V from shared memory as an MN-major B operand. Fast mode: P as
// e4m3 (times 448) from registers to wgmma m64n{64,128}k32 e4m3 with V^T (K-major; tokens permuted to match the
// registers, written by transpose_v_fp8_kernel) into a fresh float32 accumulator per key block.
//
// The warp-specialized kernel is qk_int8_attention_sm90_ws.cu, attention_parts.cuh what the two share, launch.cu the
// host side of both (tensor maps, the V transpose, the launch).
#include "attention_parts.cuh"

namespace sage {
namespace sm90 {
namespace {

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<D>)
    qk_int8_attention_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map, const KernelArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Smem<D, FP8>;
  using T = Tiles<D, FP8>;
  constexpr bool kSums = kTensorSums<CAUSAL, FP8>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = aligned_smem(smem_raw);
  Barriers* bars = reinterpret_cast<Barriers*>(smem + L::kBars);
  uint8_t* k_tiles = smem + L::kK;
  uint8_t* v_tiles = smem + L::kV;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const CtaTile<CAUSAL, kRows> tile(a);
  const int m0 = tile.m0, h = tile.h, b = tile.b, hk = tile.hk, bh = tile.bh, bhk = tile.bhk;
  const int n_blocks = tile.n_blocks;

  if constexpr (kSums) tensor_sum_rows<D>(v_tiles);
  start_cta(bars, &q_map, &k_map, &v_map);
  if (tid == 0) {
    mbar_arrive_expect_tx(&bars->q_full, T::kQBytes);
    tma_load_3d(smem + L::kQ, &q_map, &bars->q_full, 0, m0, bh);
    for (int n = 0; n < kStages && n < n_blocks; ++n) {
      load_k<D, FP8>(k_tiles + n * T::kKBytes, &k_map, &bars->k_full[n], n * kBlockN, bhk);
      if (n < L::kVStages) {
        load_v<D, FP8>(v_tiles + n * T::kVStageBytes, &v_map, &bars->v_full[n], n * kBlockN, bhk, hk, b);
      }
    }
  }

  // Thread (warp, lane) holds rows r0 = 16 * warp + lane / 4 and r0 + 8 of the tile (OnlineSoftmax).
  const int r0 = 16 * warp + lane / 4, cq = 2 * (lane % 4);
  const float q_scale = a.q_scale[static_cast<int64_t>(bh) * (a.nq_pad / kBlockQ) + m0 / kBlockQ];
  const float* k_scales = a.k_scale + static_cast<int64_t>(bhk) * (a.nk_pad / kBlockK);
  const float kInf = __int_as_float(0x7f800000);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  const uint32_t q_addr = smem_addr(smem + L::kQ);
  mbar_wait(&bars->q_full, 0);

  // Blocks before n_full need no mask: they end at or before kv_len and (causal) at or before the tile's first row.
  const int n_full = min(a.kv_len / kBlockN, CAUSAL ? (m0 + 1) / kBlockN : n_blocks);

  OnlineSoftmax<BF16, CAUSAL, FP8> softmax{{-kInf, -kInf}, {0.0f, 0.0f}, q_scale, k_scales, a.kv_len, a.nk_pad,
                                           m0 + r0};
  // One block after the other: Q.K^T, softmax, P.V. (Issuing block n + 1's Q.K^T before block n's P.V, to run
  // the softmax beside it, needs a second S and P register set, more than three CTAs an SM leave a thread
  // (kCtasPerSm), and two CTAs an SM doing so were slower; docs/FINDINGS.md.) The other CTAs on the SM fill the
  // tensor cores meanwhile.
  for (int n = 0; n < n_blocks; ++n) {
    int32_t s_acc[kBlockN / 2];
    float pf[kBlockN / 2];
    uint32_t p[kPRegs<FP8>];
    float alpha[2];
    const int k_stage = n % kStages;
    mbar_wait(&bars->k_full[k_stage], (n / kStages) & 1);
    wgmma_fence();
    qk_tile<D>(s_acc, q_addr, smem_addr(k_tiles + k_stage * T::kKBytes));
    wgmma_commit();
    const auto ks = softmax.load_k_scales(n);  // in flight during the wgmma
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) fence_operand(s_acc[i]);
    // Every warp is past Q.K^T of block n: its K stage takes block n + kStages.
    __syncthreads();
    if (tid == 0 && n + kStages < n_blocks) {
      load_k<D, FP8>(k_tiles + k_stage * T::kKBytes, &k_map, &bars->k_full[k_stage], (n + kStages) * kBlockN, bhk);
    }
    if (n < n_full) {  // the packing in each branch lets ptxas merge e4m3 pairs in place (no PRMT)
      softmax.template scores<false, true, !kSums>(n, s_acc, ks, cq, pf, alpha);
      softmax.pack(pf, p);
    } else {
      softmax.template scores<true, true, !kSums>(n, s_acc, ks, cq, pf, alpha);
      softmax.pack(pf, p);
    }

    // P.V of block n: into O (accurate; O rescaled first) or into a fresh accumulator (fast).
    const int v_stage = n % L::kVStages;
    mbar_wait(&bars->v_full[v_stage], (n / L::kVStages) & 1);
    const uint32_t v_addr = smem_addr(v_tiles + v_stage * T::kVStageBytes);
    float o_blk[FP8 ? kBlockAccRegs<D, kSums> : 1];
    if constexpr (!FP8) {
      rescale_o<D>(o, alpha);
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) fence_operand(o[i]);
#pragma unroll
    for (int i = 0; i < kPRegs<FP8>; ++i) fence_operand(p[i]);  // the A fragment is written before the fence
    wgmma_fence();
    if constexpr (FP8) {
      pv_tile_fp8<D, kSums>(o_blk, p, v_addr);
    } else {
      pv_tile<D, BF16>(o, p, v_addr);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < D / 2; ++r) {
      if constexpr (FP8) {
        fence_operand(o_blk[r]);
        o[r] = fmaf(o[r], alpha[(r / 2) % 2], o_blk[r]);
      } else {
        fence_operand(o[r]);
      }
    }
    if constexpr (kSums) softmax.template add_tensor_sums<D>(o_blk, alpha);
    // Every warp is past P.V of block n: its V stage takes block n + kVStages.
    __syncthreads();
    if (tid == 0 && n + L::kVStages < n_blocks) {
      load_v<D, FP8>(v_tiles + v_stage * T::kVStageBytes, &v_map, &bars->v_full[v_stage], (n + L::kVStages) * kBlockN,
                     bhk, hk, b);
    }
  }

  store_rows<D, Out, FP8>(a, o, softmax, b, h, bhk, m0 + r0, cq, lane);
#else
  __trap();  // built without sm_90a: the host never launches it there (it dispatches on sm_90 only)
#endif
}

// ---- host ----------------------------------------------------------------------------------------------------------

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
struct SerialLaunch {
  static int run(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                 const CUtensorMap& v_map, cudaStream_t stream) {
    return launch_row_tiles<qk_int8_attention_kernel<D, BF16, Out, CAUSAL, FP8>, Smem<D, FP8>::kAllocBytes, kRows,
                            kThreads>(p, q_map, k_map, v_map, stream);
  }
};

}  // namespace

namespace detail {

int launch_serial(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                  const CUtensorMap& v_map, cudaStream_t stream) {
  return launch_for_types<SerialLaunch>(p, q_map, k_map, v_map, stream);
}

}  // namespace detail
}  // namespace sm90
}  // namespace sage
