// Host side of both sm90 kernels (qk_int8_attention_sm90.h): which params they take, their TMA tensor maps, the V
// transpose of a given fp8 V, and the launch of the serial (qk_int8_attention_sm90.cu) or warp-specialized
// (qk_int8_attention_sm90_ws.cu) schedule.
#include "../common/vt_transpose.cuh"
#include "attention_parts.cuh"

namespace sage {
namespace sm90 {
namespace {

static_assert(sizeof(CUtensorMap) == sizeof(TensorMaps::q) && alignof(TensorMaps) % alignof(CUtensorMap) == 0,
              "TensorMaps holds CUtensorMaps");

CUtensorMap* as_map(unsigned char* bytes) { return reinterpret_cast<CUtensorMap*>(bytes); }
const CUtensorMap& as_map(const unsigned char* bytes) { return *reinterpret_cast<const CUtensorMap*>(bytes); }

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

bool encode_tensor_maps(const QKAttentionParams& p, TensorMaps* maps) {
  const uint64_t d = static_cast<uint64_t>(p.head_dim_pad), dv = static_cast<uint64_t>(p.head_dim);
  const CUtensorMapSwizzle qk_swizzle = d == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const bool fp8 = p.v_type == VType::kFloat8 || p.v_type == VType::kFloat8Vt;
  const uint32_t keys = keys_per_step(p.schedule == Schedule::kWarpSpecialized, fp8);  // K, V box rows
  CUtensorMap *q_map = as_map(maps->q), *k_map = as_map(maps->k), *v_map = as_map(maps->v);
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nq_pad), static_cast<uint64_t>(p.batch * p.heads_q)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nq_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), kRows, 1};
    if (!make_map(q_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.q, dims, strides, box, qk_swizzle)) return false;
  }
  {
    const uint64_t dims[3] = {d, static_cast<uint64_t>(p.nk_pad), static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {d, d * static_cast<uint64_t>(p.nk_pad)};
    const uint32_t box[3] = {static_cast<uint32_t>(d), keys, 1};
    if (!make_map(k_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, p.k, dims, strides, box, qk_swizzle)) return false;
  }
  if (fp8) {
    const uint64_t nt = static_cast<uint64_t>(vt::vt_tokens(p.kv_len));
    const uint64_t dims[3] = {nt, d, static_cast<uint64_t>(p.batch * p.heads_kv)};
    const uint64_t strides[2] = {nt, d * nt};
    const uint32_t box[3] = {kBlockN, static_cast<uint32_t>(d), 1};
    // A given v_fp8: the V^T its transpose writes into the workspace at launch.
    const bool given = p.v_type == VType::kFloat8Vt;
    return make_map(v_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, given ? p.v : p.workspace, dims, strides, box,
                    CU_TENSOR_MAP_SWIZZLE_128B);
  }
  // head_dim columns: the box's columns past them (padding) are filled with zeros by the TMA.
  const uint64_t dims[4] = {dv, static_cast<uint64_t>(p.kv_len), static_cast<uint64_t>(p.heads_kv),
                            static_cast<uint64_t>(p.batch)};
  const uint64_t strides[3] = {static_cast<uint64_t>(p.v_stride_n) * 2, static_cast<uint64_t>(p.v_stride_h) * 2,
                               static_cast<uint64_t>(p.v_stride_b) * 2};
  const uint32_t box[4] = {64, keys, 1, 1};
  const CUtensorMapDataType type =
      p.v_type == VType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return make_map(v_map, type, 4, p.v, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

int launch_qk_int8_attention(const QKAttentionParams& p, const TensorMaps& maps, void* stream_ptr) {
  if (qk_attention_unsupported(p) != nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.v_type == VType::kFloat8) {
    const int err = vt::launch_transpose_v_fp8(p, p.workspace, stream);
    if (err != 0) return err;
  }
  return p.schedule == Schedule::kWarpSpecialized
             ? detail::launch_warp_specialized(p, as_map(maps.q), as_map(maps.k), as_map(maps.v), stream)
             : detail::launch_serial(p, as_map(maps.q), as_map(maps.k), as_map(maps.v), stream);
}

}  // namespace sm90
}  // namespace sage
