// fp8.cu: the block-FP8 kernels (fp8.cuh: the canonical block-FP8 linear
// layer, EXACTNESS.md "Block-FP8 linear layers (W8A8)"), a module of its
// own (fp8.compute_*.ptx) so that the validated kernels of ops.cu keep
// their PTX. Built by gen.sh with the flags of ops.cu.
//
// Launch ABI (gorgonia.org/cu copies every argument as 8 bytes): pointers,
// integers as long long. Blocks of 8 warps.
#include "fp8.cuh"

typedef long long i64;

extern "C" {

// fp8_quantize: one warp per (row t, group g) of the T×K activations x,
// w = t·G + g (fp8.cuh, f8_quantize_warp).
__global__ void fp8_quantize(int32_t *xi, float *s, int32_t *bad, const float *x, i64 T, i64 K, i64 bk) {
  const i64 w = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (w >= T * ((K + bk - 1) / bk)) return;  // whole warps only
  f8_quantize_warp(xi, s, bad, x, K, bk, w, threadIdx.x & 31);
}

// matmul_fp8: one warp per weight row (8 rows a block along x) and group
// of up to F8_TT tokens (along y) (fp8.cuh, f8_matmul_warp).
__global__ void matmul_fp8(float *y, const uint8_t *W, const void *S, i64 sdt, const int32_t *xi, const float *s,
                           const int32_t *bad, i64 N, i64 K, i64 T, i64 bn, i64 bk) {
  const i64 n = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (n >= N) return;  // whole warps only
  f8_matmul_warp(y, W, S, sdt, xi, s, bad, N, K, T, bn, bk, n, (i64)blockIdx.y * F8_TT, threadIdx.x & 31);
}

}  // extern "C"
