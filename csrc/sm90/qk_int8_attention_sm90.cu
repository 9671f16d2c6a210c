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
// This file also holds the host side of both sm90 kernels (tensor maps, the V transpose, the launch); the
// warp-specialized kernel is qk_int8_attention_sm90_ws.cu, and attention_parts.cuh what the two share.
#include <cstring>

#include "../hip/vt_transpose.cuh"
#include "attention_parts.cuh"

namespace sage {
namespace sm90 {
namespace {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kStages = 2;     // K tiles in flight

// Q, a K ring of kStages and a V ring of kVStages (accurate mode: after 1024 bytes of barriers). 16-bit V at head_dim
// 128 has one stage: 74 KiB a CTA, so that three CTAs share an SM (two stages: 106 KiB, two).
// Fast mode: each V^T stage is followed by a 1 KB group of 8 more rows (tensor_sum_rows), and the barriers live in
// the first group's unread rows (row 1), so that three D=128 CTAs still share an SM.
template <int D, bool FP8>
struct Smem {
  using T = Tiles<D, FP8>;
  static constexpr int kVStages = !FP8 && D == 128 ? 1 : kStages;
  static constexpr int kQ = FP8 ? 0 : T::kAlign;  // accurate mode: barriers in the first 1024 bytes
  static constexpr int kK = kQ + T::kQBytes;
  static constexpr int kV = kK + kStages * T::kKBytes;
  static constexpr int kBars = FP8 ? kV + T::kVBytes + 128 : 0;
  static constexpr int kBytes = kV + kVStages * T::kVStageBytes;
  static constexpr int kAllocBytes = kBytes + T::kAlign;  // slack to align the dynamic base
};

struct Barriers {
  static constexpr int kStages = sm90::kStages, kReleases = 0;  // no "empty" barriers: __syncthreads frees a stage
  uint64_t q_full;
  uint64_t k_full[kStages];
  uint64_t v_full[kStages];
};

// CTAs an SM that the register budget is held to (168 registers a thread for three, 128 for four); shared memory
// allows as many (Smem).
template <int D>
constexpr int kCtasPerSm = D == 64 ? 4 : 3;

// An sm_90 SM has 228 KiB of shared memory, and each CTA costs its dynamic bytes and 1 KiB the runtime reserves.
template <int D, bool FP8>
constexpr bool kFitsCtasPerSm = kCtasPerSm<D> * (Smem<D, FP8>::kAllocBytes + 1024) <= 228 * 1024;
static_assert(kFitsCtasPerSm<64, false> && kFitsCtasPerSm<64, true> && kFitsCtasPerSm<128, false> &&
                  kFitsCtasPerSm<128, true>,
              "shared memory for kCtasPerSm CTAs an SM");

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

// ---- host -------------------------------------------------------------------------------------------------------

using EncodeTiled = decltype(&cuTensorMapEncodeTiled);

EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                                             &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiled>(p) : nullptr;
  }();
  return fn;
}

// A tiled tensor map; dims and box innermost first, strides in bytes for dims 1.. (rank - 1 of them).
bool make_map(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const uint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(map, type, rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

int64_t vt_tokens(const QKAttentionParams& p) { return vt::vt_tokens(p.kv_len); }

template <int D, bool BF16, typename Out, bool CAUSAL, bool FP8>
struct SerialLaunch {
  static int run(const QKAttentionParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                 const CUtensorMap& v_map, cudaStream_t stream) {
    return launch_row_tiles<qk_int8_attention_kernel<D, BF16, Out, CAUSAL, FP8>, Smem<D, FP8>::kAllocBytes, kRows,
                            kThreads>(p, q_map, k_map, v_map, stream);
  }
};

}  // namespace

int64_t qk_attention_workspace_bytes(const QKAttentionParams& p) { return vt::transpose_workspace_bytes(p); }

const char* qk_attention_unsupported(const QKAttentionParams& p) {
  if (p.head_dim_pad != 64 && p.head_dim_pad != 128) return "padded head_dim is not 64 or 128";
  // A multiple of 8: V rows of whole 16-byte TMA units, out pairs (FlashAttention-3 asks the same).
  if (p.head_dim < 8 || p.head_dim > p.head_dim_pad || p.head_dim % 8 != 0) return "head_dim is not a multiple of 8";
  if (p.kv_len < 1 || p.qo_len < 1) return "no keys or no queries";
  if (p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) return "heads";
  if (p.batch * p.heads_q > INT32_MAX || p.nq_pad > INT32_MAX || p.nk_pad > INT32_MAX) return "sizes beyond int32";
  if (p.heads_q > 65535 || p.batch > 65535) return "grid y / z hold heads and batch";
  const auto misaligned = [](const void* ptr, int64_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  // TMA: 16-byte aligned base and strides, strides below 2^40 bytes.
  if (misaligned(p.q, 16) || misaligned(p.k, 16)) return "a base address is not 16-byte aligned";
  if (p.v_type == VType::kFloat8Vt) {
    if (p.v_scale == nullptr || misaligned(p.v, 16)) return "fast mode buffers";
  } else if (p.v_type == VType::kFloat8) {
    if (const char* why = vt::transpose_unsupported(p, p.workspace)) return why;
  } else {
    if (misaligned(p.v, 16)) return "v is not 16-byte aligned";
    for (const int64_t s : {p.v_stride_b, p.v_stride_h, p.v_stride_n}) {
      if (s <= 0 || (s * 2) % 16 != 0 || s * 2 >= (int64_t(1) << 40)) return "v's strides are not TMA strides";
    }
  }
  // The epilogue stores column pairs.
  const int64_t out_bytes = p.out_type == OutType::kFloat32 ? 4 : 2;
  if (misaligned(p.out, 2 * out_bytes)) return "out is not aligned for pair stores";
  for (const int64_t s : {p.o_stride_b, p.o_stride_h, p.o_stride_n}) {
    if (s % 2 != 0) return "out's strides are odd";
  }
  return nullptr;
}

int launch_qk_int8_attention(const QKAttentionParams& p, void* stream_ptr) {
  if (qk_attention_unsupported(p) != nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const uint64_t d = static_cast<uint64_t>(p.head_dim_pad), dv = static_cast<uint64_t>(p.head_dim);
  const CUtensorMapSwizzle qk_swizzle = d == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const bool fp8 = p.v_type == VType::kFloat8 || p.v_type == VType::kFloat8Vt;
  const uint32_t keys = keys_per_step(p.schedule == Schedule::kWarpSpecialized, fp8);  // K, V box rows
  CUtensorMap q_map, k_map, v_map;
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nq_pad), static_cast<uint64_t>(p.batch * p.heads_q)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nq_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), kRows, 1};
    if (!make_map(&q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.q, dims, strides, box, qk_swizzle)) {
      return kNoTensorMap;
    }
  }
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nk_pad), static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nk_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), keys, 1};
    if (!make_map(&k_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.k, dims, strides, box, qk_swizzle)) {
      return kNoTensorMap;
    }
  }
  if (fp8) {
    const uint64_t nt = static_cast<uint64_t>(vt_tokens(p));
    const uint64_t dims[3] = {nt, d, static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {nt, d * nt};
    const uint32_t box[3] = {kBlockN, static_cast<uint32_t>(d), 1};
    const bool given = p.v_type == VType::kFloat8Vt;  // else the transpose below writes it into the workspace
    if (!make_map(&v_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, given ? p.v : p.workspace, dims, strides, box,
                  CU_TENSOR_MAP_SWIZZLE_128B)) {
      return kNoTensorMap;
    }
  }
  if (p.v_type == VType::kFloat8) {
    const int err = vt::launch_transpose_v_fp8(p, p.workspace, stream);
    if (err != 0) return err;
  } else if (p.v_type != VType::kFloat8Vt) {
    // head_dim columns: the box's columns past them (padding) are filled with zeros by the TMA.
    const uint64_t dims[4] = {dv, static_cast<uint64_t>(p.kv_len), static_cast<uint64_t>(p.heads_kv),
                              static_cast<uint64_t>(p.batch)};
    const uint64_t strides[3] = {static_cast<uint64_t>(p.v_stride_n) * 2, static_cast<uint64_t>(p.v_stride_h) * 2,
                                 static_cast<uint64_t>(p.v_stride_b) * 2};
    const uint32_t box[4] = {64, keys, 1, 1};
    const CUtensorMapDataType type =
        p.v_type == VType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    if (!make_map(&v_map, type, 4, p.v, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B)) {
      return kNoTensorMap;
    }
  }
  return p.schedule == Schedule::kWarpSpecialized
             ? detail::launch_warp_specialized(p, q_map, k_map, v_map, stream)
             : launch_for_types<SerialLaunch>(p, q_map, k_map, v_map, stream);
}

}  // namespace sm90
}  // namespace sage
