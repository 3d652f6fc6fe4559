// probe.cu: runs backend/cuda/kernels/canon.cuh on a GPU and writes
// aggregates of its results as JSON, for validation/gpuprobe (Go) to compare
// with canon bit for bit. Build and run on the GPU machine:
//
//   nvcc -O2 -arch=sm_90 --fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
//        -I backend/cuda/kernels -o probe validation/gpuprobe/probe.cu
//   ./probe > results.json
//
// Everything it computes is defined in gpuprobe.go: the splitmix64 mix, the
// aggregate (wrapping sum of mix(index<<32 | bits) with NaN made 0x7fc00000),
// the generated matrices, the shapes. Keep the two files in step.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "canon.cuh"

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

__device__ __forceinline__ uint64_t leaf(uint64_t index, float v) {
  uint32_t b = __float_as_uint(v);
  if (v != v) b = 0x7fc00000u;
  return mix64((index << 32) | b);
}

// gen_bits: the float32 test value number i of stream seed (gpuprobe.go genBits).
__host__ __device__ __forceinline__ uint32_t gen_bits(uint64_t seed, uint64_t i) {
  uint64_t u = mix64(seed * 0x9E3779B97F4A7C15ULL + i);
  uint32_t sign = (uint32_t)(u & 1) << 31;
  if (((u >> 40) & 63) == 0) return sign;  // ±0
  uint32_t e = 107 + (uint32_t)((u >> 1) % 28);
  uint32_t mant = (uint32_t)(u >> 8) & 0x7fffff;
  return sign | (e << 23) | mant;
}

enum Fn { FExp, FSigmoid, FSiLU, FSoftplus, FRsqrt, NFn };
static const char *fnNames[NFn] = {"exp", "sigmoid", "silu", "softplus", "rsqrt"};

__device__ __forceinline__ float apply(int f, float x) {
  switch (f) {
    case FExp: return canon::exp(x);
    case FSigmoid: return canon::sigmoid(x);
    case FSiLU: return canon::silu(x);
    case FSoftplus: return canon::softplus(x);
    default: return canon::rsqrt(x);
  }
}

// sweep: aggregate of f over inputs [first, first+count) spaced by step,
// indexed by input number; nans counts NaN results.
__global__ void sweep(int f, uint64_t first, uint64_t step, uint64_t count, unsigned long long *agg,
                      unsigned long long *nans) {
  uint64_t sum = 0, nan = 0;
  for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < count; j += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t i = first + j * step;
    float v = apply(f, __uint_as_float((uint32_t)i));
    sum += leaf(i, v);
    nan += (v != v);
  }
  for (int o = 16; o >= 1; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    nan += __shfl_xor_sync(0xffffffffu, nan, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(agg, (unsigned long long)sum);
    atomicAdd(nans, (unsigned long long)nan);
  }
}

__global__ void gen_w(uint16_t *w, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    w[i] = (uint16_t)(gen_bits(seed, i) >> 16);
}

__global__ void gen_x(float *x, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
    x[i] = __uint_as_float(gen_bits(seed, i));
}

// matvec: one warp per row.
__global__ void matvec(const uint16_t *w, const float *x, float *y, int rows, int k) {
  int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (row >= rows) return;  // whole warps leave together (blockDim % 32 == 0)
  float v = canon::dot_bf16_warp(w + (size_t)row * k, x, k);
  if ((threadIdx.x & 31) == 0) y[row] = v;
}

__global__ void agg_rows(const float *y, int rows, unsigned long long *agg) {
  uint64_t sum = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) sum += leaf(i, y[i]);
  for (int o = 16; o >= 1; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(agg, (unsigned long long)sum);
}

struct Shape {
  int rows, k;
};
// gpuprobe.go dotShapes: the real Qwen3.5-122B-A10B projections (expert up/gate
// 1024x3072, down 3072x1024, LM head 248320x3072) and ragged lengths.
static const Shape shapes[] = {{1, 8}, {7, 13}, {64, 270}, {33, 520}, {300, 2049}, {1024, 3072}, {3072, 1024}, {248320, 3072}};

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  unsigned long long *d_agg, *d_nan;
  CHECK(cudaMalloc(&d_agg, 8));
  CHECK(cudaMalloc(&d_nan, 8));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));

  printf("{\n  \"device\": \"%s\",\n  \"cuda_runtime\": %d,\n", prop.name, CUDART_VERSION);

  // 1. Every float32 input, in 256 chunks of 2^24 consecutive bit patterns.
  printf("  \"sweep\": {\n");
  float sweepMs = 0;
  for (int f = 0; f < NFn; f++) {
    printf("    \"%s\": {\"chunks\": [", fnNames[f]);
    unsigned long long nanTotal = 0;
    for (int c = 0; c < 256; c++) {
      CHECK(cudaMemset(d_agg, 0, 8));
      CHECK(cudaMemset(d_nan, 0, 8));
      CHECK(cudaEventRecord(t0));
      sweep<<<prop.multiProcessorCount * 8, 256>>>(f, (uint64_t)c << 24, 1, 1ULL << 24, d_agg, d_nan);
      CHECK(cudaEventRecord(t1));
      CHECK(cudaGetLastError());
      unsigned long long agg, nan;
      CHECK(cudaMemcpy(&agg, d_agg, 8, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(&nan, d_nan, 8, cudaMemcpyDeviceToHost));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      sweepMs += ms;
      nanTotal += nan;
      printf("%s\"%016llx\"", c ? ", " : "", agg);
    }
    printf("], \"nan\": %llu}%s\n", nanTotal, f + 1 < NFn ? "," : "");
  }
  printf("  },\n  \"sweep_ms\": %.1f,\n", sweepMs);

  // 2. Matrix-vector products with generated BF16 weights.
  printf("  \"dots\": [\n");
  int ns = sizeof(shapes) / sizeof(shapes[0]);
  for (int s = 0; s < ns; s++) {
    int rows = shapes[s].rows, k = shapes[s].k;
    uint64_t wseed = 1000 + s, xseed = 2000 + s;
    uint16_t *w;
    float *x, *y;
    CHECK(cudaMalloc(&w, (size_t)rows * k * 2 + 16));
    CHECK(cudaMalloc(&x, (size_t)k * 4 + 16));
    CHECK(cudaMalloc(&y, (size_t)rows * 4));
    gen_w<<<1024, 256>>>(w, (uint64_t)rows * k, wseed);
    gen_x<<<64, 256>>>(x, k, xseed);
    CHECK(cudaGetLastError());
    int threads = 256;
    int blocks = (int)(((size_t)rows * 32 + threads - 1) / threads);
    CHECK(cudaEventRecord(t0));
    matvec<<<blocks, threads>>>(w, x, y, rows, k);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaGetLastError());
    CHECK(cudaMemset(d_agg, 0, 8));
    agg_rows<<<256, 256>>>(y, rows, d_agg);
    unsigned long long agg;
    CHECK(cudaMemcpy(&agg, d_agg, 8, cudaMemcpyDeviceToHost));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    printf("    {\"rows\": %d, \"k\": %d, \"w_seed\": %llu, \"x_seed\": %llu, \"agg\": \"%016llx\", \"ms\": %.3f",
           rows, k, (unsigned long long)wseed, (unsigned long long)xseed, agg, ms);
    if (rows <= 64) {
      float *h = (float *)malloc((size_t)rows * 4);
      CHECK(cudaMemcpy(h, y, (size_t)rows * 4, cudaMemcpyDeviceToHost));
      printf(", \"y\": [");
      for (int i = 0; i < rows; i++) printf("%s%u", i ? ", " : "", *(uint32_t *)&h[i]);
      printf("]");
      free(h);
    }
    printf("}%s\n", s + 1 < ns ? "," : "");
    CHECK(cudaFree(w));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
  }
  printf("  ]\n}\n");
  return 0;
}
