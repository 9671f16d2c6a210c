// The ceiling of warp-level mma.sync on the GPU it runs on: back-to-back independent products from every SM, as
// TFLOPS (TOPS for int8), beside which the mma kernel's speed (csrc/mma) is read. No torch.
// Build and run on the GPU machine:  nvcc -O3 -arch=sm_90 -o /tmp/mma_peak benchmarks/mma_peak.cu && /tmp/mma_peak
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kChains = 8;     // independent accumulators a warp: enough to cover the product's latency
constexpr int kIters = 4096;

// kind 0: f16 m16n8k16 (f32 accumulators), 1: bf16 m16n8k16, 2: s8 m16n8k32 (s32 accumulators), 3: f16 m16n8k16
// with f16 accumulators
template <int KIND>
__global__ void peak(float* sink, uint32_t seed) {
  uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u}, b0 = seed * 3u, b1 = seed * 5u;
  float d[kChains][4] = {};
  int32_t e[kChains][4] = {};
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (KIND == 0) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      } else if constexpr (KIND == 1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      } else if constexpr (KIND == 3) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
                     : "+r"(e[c][0]), "+r"(e[c][1])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      } else {
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+r"(e[c][0]), "+r"(e[c][1]), "+r"(e[c][2]), "+r"(e[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
      }
    }
  }
  float s = 0.0f;
  for (int c = 0; c < kChains; ++c)
    for (int r = 0; r < 4; ++r) s += d[c][r] + static_cast<float>(e[c][r]);
  if (s == 1.2345f) sink[threadIdx.x] = s;  // keeps the products
}

template <int KIND>
void run(const char* name, int sms, int warps) {
  float* sink;
  cudaMalloc(&sink, 4096);
  const dim3 grid(sms * 4), block(32 * warps / 4);  // 4 CTAs an SM, `warps` warps an SM in all
  peak<KIND><<<grid, block>>>(sink, 7u);  // warm-up
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0);
  peak<KIND><<<grid, block>>>(sink, 7u);
  cudaEventRecord(t1);
  cudaEventSynchronize(t1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, t0, t1);
  const double macs = (KIND == 2 ? 16.0 * 8 * 32 : 16.0 * 8 * 16) * kChains * kIters * grid.x * (block.x / 32);
  std::printf("%-22s %2d warps/SM  %8.1f T(FL)OPS\n", name, warps, 2.0 * macs / (ms * 1e-3) / 1e12);
  cudaFree(sink);
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (int warps : {4, 8, 16}) {
    run<0>("f16 m16n8k16 f32", prop.multiProcessorCount, warps);
    run<1>("bf16 m16n8k16 f32", prop.multiProcessorCount, warps);
    run<2>("s8 m16n8k32 s32", prop.multiProcessorCount, warps);
    run<3>("f16 m16n8k16 f16", prop.multiProcessorCount, warps);
  }
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
