// mmbench.cu: variants of the BF16 matmul kernel against ops.cu's, bit for
// bit and timed (a device-side exploration, not shipped; BENCHMARKS.md,
// "Kernel variants"). On the GPU machine, from the repository root:
//
//	nvcc -arch=sm_90 -std=c++17 -O3 --fmad=false -ftz=false -prec-div=true \
//	    -prec-sqrt=true -o /tmp/mmbench validation/cudarun/mmbench.cu && /tmp/mmbench
//
// Each line: shape, tokens, variant (R rows a warp, TT tokens a group, U
// chunks in flight a lane, SW token groups neighbours in the grid), median
// of 5 timings, and whether y equals ops.cu's matmul_bf16 bit for bit.
#include "../../backend/cuda/kernels/ops.cu"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <string>

// R rows a warp, Q tokens a group, U chunks in flight a lane, SW: token
// groups fastest in the grid (neighbouring blocks share W rows in L2).
template <int R, int Q, int U, bool SW>
__global__ void __launch_bounds__(256) mmv(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T, i64 ngroups) {
  i64 bx, by;
  if (SW) { bx = blockIdx.x / ngroups; by = blockIdx.x % ngroups; } else { bx = blockIdx.x; by = blockIdx.y; }
  const int lane = threadIdx.x & 31;
  const i64 n0 = (bx * (blockDim.x / 32) + (threadIdx.x / 32)) * R;
  if (n0 >= N) return;
  const int nr = (int)min((i64)R, N - n0);
  const i64 t0 = by * Q;
  const int nt = (int)min((i64)Q, T - t0);
  const uint16_t *w = W + n0 * K;
  const i64 chunks = K / 8;
  float acc[R][Q];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int u = 0; u < Q; u++) acc[r][u] = 0.0f;
  for (i64 c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 raw[U][R];
#pragma unroll
    for (int j = 0; j < U; j++)
#pragma unroll
      for (int r = 0; r < R; r++)
        if (r < nr && c0 + 32 * j < chunks) raw[j][r] = __ldcs(reinterpret_cast<const uint4 *>(w + r * K + (c0 + 32 * j) * 8));
#pragma unroll
    for (int j = 0; j < U; j++) {
      const i64 c = c0 + 32 * j;
      if (c < chunks) {
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) widen8(raw_bf16{raw[j][r]}, wv[r]);  // ops.cu's widening
#pragma unroll
        for (int u = 0; u < Q; u++) {
          if (u < nt) {
            float xv[8];
            load8(x + (t0 + u) * K + c * 8, true, xv);
#pragma unroll
            for (int r = 0; r < R; r++)
              if (r < nr) {
#pragma unroll
                for (int k = 0; k < 8; k++) acc[r][u] = fadd(acc[r][u], fmul(wv[r][k], xv[k]));
              }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int u = 0; u < Q; u++) {
      float v = canon::warp_combine(acc[r][u]);
      if (lane == 0 && r < nr && u < nt) y[(t0 + u) * N + n0 + r] = v;
    }
}

#define CK(e) do { cudaError_t err = (e); if (err != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err)); exit(1); } } while (0)

static float ms(cudaEvent_t a, cudaEvent_t b) { float m; cudaEventElapsedTime(&m, a, b); return m; }

typedef void (*launcher)(float *, const uint16_t *, const float *, i64, i64, i64);

template <int R, int Q, int U, bool SW>
void run_v(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  i64 rb = (N + 8 * R - 1) / (8 * R), g = (T + Q - 1) / Q;
  if (SW) mmv<R, Q, U, SW><<<dim3(rb * g), 256>>>(y, W, x, N, K, T, g);
  else mmv<R, Q, U, SW><<<dim3(rb, g), 256>>>(y, W, x, N, K, T, g);
}
void run_ref1(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_bf16<<<dim3((N + 7) / 8, (T + 7) / 8), 256>>>(y, W, x, N, K, T);
}
void run_ref4(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_bf16_r4<<<dim3((N + 31) / 32, (T + 7) / 8), 256>>>(y, W, x, N, K, T);
}

struct V { const char *name; launcher f; };

int main(int argc, char **argv) {
  V vs[] = {
      {"ref r1", run_ref1}, {"ref r4", run_ref4},
      {"R1 TT8 U1", run_v<1, 8, 1, false>}, {"R1 TT8 U2", run_v<1, 8, 2, false>}, {"R1 TT8 U4", run_v<1, 8, 4, false>},
      {"R1 TT1 U4", run_v<1, 1, 4, false>}, {"R1 TT1 U8", run_v<1, 1, 8, false>}, {"R2 TT1 U4", run_v<2, 1, 4, false>},
      {"R4 TT8 U1", run_v<4, 8, 1, false>}, {"R4 TT8 U1 SW", run_v<4, 8, 1, true>}, {"R4 TT8 U2 SW", run_v<4, 8, 2, true>},
      {"R4 TT16 U1", run_v<4, 16, 1, false>}, {"R2 TT16 U1", run_v<2, 16, 1, false>}, {"R2 TT16 U2", run_v<2, 16, 2, false>},
      {"R2 TT8 U2 SW", run_v<2, 8, 2, true>}, {"R8 TT8 U1 SW", run_v<8, 8, 1, true>}, {"R4 TT4 U2 SW", run_v<4, 4, 2, true>},
      {"R1 TT16 U2", run_v<1, 16, 2, false>},
  };
  const int nv = sizeof(vs) / sizeof(vs[0]);
  struct S { const char *n; i64 N, K; } shapes[] = {{"head", 248320, 3072}, {"wide", 12288, 3072}, {"up", 1024, 3072}, {"down", 3072, 1024}};
  int Ts[] = {1, 2, 4, 8, 16, 32};
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  srand(7);
  for (auto &s : shapes) {
    std::vector<uint16_t> hw(s.N * s.K);
    for (auto &v : hw) { float f = ((rand() & 0xffff) / 65536.0f - 0.5f) * 0.08f; uint32_t u; memcpy(&u, &f, 4); v = u >> 16; if ((rand() & 1023) == 0) v = rand() & 0xffff; }
    i64 Tmax = 32;
    std::vector<float> hx(Tmax * s.K);
    for (auto &v : hx) v = ((rand() & 0xffff) / 65536.0f - 0.5f) * 4.0f;
    uint16_t *W; float *x, *y, *y0;
    CK(cudaMalloc(&W, hw.size() * 2)); CK(cudaMalloc(&x, hx.size() * 4));
    CK(cudaMalloc(&y, Tmax * s.N * 4)); CK(cudaMalloc(&y0, Tmax * s.N * 4));
    CK(cudaMemcpy(W, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    int reps = s.N > 100000 ? 10 : 50;
    for (int T : Ts) {
      size_t ybytes = (size_t)T * s.N * 4;
      std::vector<char> ref(ybytes), got(ybytes);
      double bytes = (double)s.N * s.K * 2;
      for (int v = 0; v < nv; v++) {
        CK(cudaMemset(y, 0xff, ybytes));
        vs[v].f(y, W, x, s.N, s.K, T);
        CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), y, ybytes, cudaMemcpyDeviceToHost));
        if (v == 0) ref = got;
        bool same = memcmp(ref.data(), got.data(), ybytes) == 0;
        std::vector<float> t;
        for (int i = 0; i < 5; i++) {
          cudaEventRecord(e0);
          for (int k = 0; k < reps; k++) vs[v].f(y, W, x, s.N, s.K, T);
          cudaEventRecord(e1); cudaEventSynchronize(e1);
          t.push_back(ms(e0, e1) / reps);
        }
        std::sort(t.begin(), t.end());
        double m = t[2];
        printf("%-5s T=%-2d %-14s %8.4f ms  (min %.4f max %.4f)  %6.0f GB/s  %5.2f Tmuladd/s  %s\n", s.n, T, vs[v].name, m, t[0], t[4],
               bytes / m / 1e6, (double)s.N * s.K * T / m / 1e9, same ? "same" : "DIFFERENT");
      }
    }
    cudaFree(W); cudaFree(x); cudaFree(y); cudaFree(y0);
  }
  return 0;
}
