// canon.cuh: Tarfa's canonical arithmetic (engine/canon, EXACTNESS.md) as
// CUDA device code. Every function here must give the same bits as its Go
// counterpart in engine/canon; validation/gpuprobe checks them on every
// float32 input (transcendentals) and on real matrix shapes (dot products).
//
// Rules: every product and sum is an explicitly rounded intrinsic
// (__fmul_rn/__fadd_rn, __dmul_rn/__dadd_rn/__ddiv_rn), so no compiler
// setting can contract them into FMA; build with --fmad=false -ftz=false
// -prec-div=true -prec-sqrt=true anyway, and never --use_fast_math.
// NaN payloads are not canonical (GPUs return their canonical NaN where
// amd64 returns the "real indefinite"); NaN-ness is.
#pragma once

#include <stdint.h>

namespace canon {

// ---- float64 kernels (fdlibm, as in engine/canon/math.go) ----

__device__ __forceinline__ double dmul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double dadd(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double dsub(double a, double b) { return __dadd_rn(a, -b); }
__device__ __forceinline__ double ddiv(double a, double b) { return __ddiv_rn(a, b); }

// scalb: y * 2**k for y in [0.5, 2], k in [-1100, 1030] (math.go scalb).
__device__ __forceinline__ double scalb(double y, int k) {
  if (k > 1023) {
    y = dmul(y, 0x1p1023);
    k -= 1023;
  } else if (k < -1022) {
    y = dmul(y, 0x1p-1022);
    k += 1022;
  }
  if (k < -1022) k = -1022;
  if (k > 1023) k = 1023;
  return dmul(y, __longlong_as_double((long long)(k + 1023) << 52));
}

// exp64: fdlibm exp with explicit rounding (math.go exp64).
__device__ __forceinline__ double exp64(double x) {
  const double ln2Hi = 6.93147180369123816490e-01;
  const double ln2Lo = 1.90821492927058770002e-10;
  const double log2e = 1.44269504088896338700e+00;
  const double overflow = 7.09782712893383973096e+02;
  const double underflow = -7.45133219101941108420e+02;
  const double nearZero = 1.0 / (1 << 28);
  const double p1 = 1.66666666666666657415e-01;
  const double p2 = -2.77777777770155933842e-03;
  const double p3 = 6.61375632143793436117e-05;
  const double p4 = -1.65339022054652515390e-06;
  const double p5 = 4.13813679705723846039e-08;
  if (x != x) return x;
  if (x > overflow) return __longlong_as_double(0x7ff0000000000000LL);
  if (x < underflow) return 0;
  if (-nearZero < x && x < nearZero) return dadd(1, x);
  int k = 0;
  if (x < 0) {
    k = (int)dsub(dmul(log2e, x), 0.5);  // truncation toward zero, as Go's int()
  } else if (x > 0) {
    k = (int)dadd(dmul(log2e, x), 0.5);
  }
  double hi = dsub(x, dmul((double)k, ln2Hi));
  double lo = dmul((double)k, ln2Lo);
  double r = dsub(hi, lo);
  double t = dmul(r, r);
  double c = dsub(r, dmul(t, dadd(p1, dmul(t, dadd(p2, dmul(t, dadd(p3, dmul(t, dadd(p4, dmul(t, p5))))))))));
  double y = dsub(1, dsub(dsub(lo, ddiv(dmul(r, c), dsub(2, c))), hi));
  return scalb(y, k);
}

// frexp for a positive finite x: f in [0.5, 1) and e with x = f * 2**e.
__device__ __forceinline__ double frexp_pos(double x, int *e) {
  int ee = 0;
  if (x < 0x1p-1022) {
    x = dmul(x, 0x1p52);
    ee = -52;
  }
  unsigned long long b = (unsigned long long)__double_as_longlong(x);
  ee += (int)((b >> 52) & 0x7ff) - 1022;
  b = (b & ~(0x7ffULL << 52)) | (1022ULL << 52);
  *e = ee;
  return __longlong_as_double((long long)b);
}

// log64: fdlibm log with explicit rounding (math.go log64).
__device__ __forceinline__ double log64(double x) {
  const double ln2Hi = 6.93147180369123816490e-01;
  const double ln2Lo = 1.90821492927058770002e-10;
  const double l1 = 6.666666666666735130e-01;
  const double l2 = 3.999999999940941908e-01;
  const double l3 = 2.857142874366239149e-01;
  const double l4 = 2.222219843214978396e-01;
  const double l5 = 1.818357216161805012e-01;
  const double l6 = 1.531383769920937332e-01;
  const double l7 = 1.479819860511658591e-01;
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  if (x != x || x == inf) return x;
  if (x < 0) return __longlong_as_double(0x7ff8000000000000LL);
  if (x == 0) return -inf;
  int ki;
  double f1 = frexp_pos(x, &ki);
  if (f1 < 0.70710678118654752440) {  // math.Sqrt2/2 as a float64 constant
    f1 = dmul(f1, 2);
    ki--;
  }
  double f = dsub(f1, 1);
  double k = (double)ki;
  double s = ddiv(f, dadd(2, f));
  double s2 = dmul(s, s);
  double s4 = dmul(s2, s2);
  double t1 = dmul(s2, dadd(l1, dmul(s4, dadd(l3, dmul(s4, dadd(l5, dmul(s4, l7)))))));
  double t2 = dmul(s4, dadd(l2, dmul(s4, dadd(l4, dmul(s4, l6)))));
  double R = dadd(t1, t2);
  double hfsq = dmul(dmul(0.5, f), f);
  return dsub(dmul(k, ln2Hi), dsub(dsub(hfsq, dadd(dmul(s, dadd(hfsq, R)), dmul(k, ln2Lo))), f));
}

// log1p64 for y >= 0 (math.go log1p64).
__device__ __forceinline__ double log1p64(double y) {
  double u = dadd(1, y);
  if (u == 1) return y;
  if (u == __longlong_as_double(0x7ff0000000000000LL)) return u;
  return dmul(log64(u), ddiv(y, dsub(u, 1)));
}

// ---- float32 functions (math.go) ----

__device__ __forceinline__ float exp(float x) { return __double2float_rn(exp64((double)x)); }

__device__ __forceinline__ float sigmoid(float x) {
  return __double2float_rn(ddiv(1, dadd(1, exp64(-(double)x))));
}

__device__ __forceinline__ float silu(float x) {
  double d = (double)x;
  return __double2float_rn(ddiv(d, dadd(1, exp64(-d))));
}

__device__ __forceinline__ float softplus(float x) {
  if (x > 20) return x;
  return __double2float_rn(log1p64(exp64((double)x)));
}

// rsqrt: 1/Sqrt(x), both correctly rounded (reduce.go Rsqrt).
__device__ __forceinline__ float rsqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

__device__ __forceinline__ float bf16(uint16_t u) { return __uint_as_float((unsigned)u << 16); }

// ---- the canonical reduction (reduce.go) ----

// warp_combine is Combine: the xor butterfly over offsets 16, 8, 4, 2, 1;
// lane i adds its value first (v[i] + v[i^o]), every lane ends with lane 0's.
__device__ __forceinline__ float warp_combine(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// dot_bf16_warp is DotBF16(w[0:n], x[0:n]) computed by one full warp: lane l
// owns chunks c = l, l+32, ... of 8 terms and adds their rounded products in
// increasing k from +0; the tail chunk is partial. All 32 lanes must call it.
// w must be 16-byte aligned when n % 8 == 0 (one uint4 load per chunk).
__device__ __forceinline__ float dot_bf16_warp(const uint16_t *w, const float *x, int n) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  const int chunks = n / 8;
  const bool aligned = ((reinterpret_cast<uintptr_t>(w) & 15) == 0) && ((reinterpret_cast<uintptr_t>(x) & 15) == 0);
  for (int c = lane; c < chunks; c += 32) {
    const int k = c * 8;
    uint16_t ww[8];
    float xx[8];
    if (aligned) {
      uint4 wv = *reinterpret_cast<const uint4 *>(w + k);
      float4 x0 = *reinterpret_cast<const float4 *>(x + k);
      float4 x1 = *reinterpret_cast<const float4 *>(x + k + 4);
      ww[0] = wv.x & 0xffff; ww[1] = wv.x >> 16; ww[2] = wv.y & 0xffff; ww[3] = wv.y >> 16;
      ww[4] = wv.z & 0xffff; ww[5] = wv.z >> 16; ww[6] = wv.w & 0xffff; ww[7] = wv.w >> 16;
      xx[0] = x0.x; xx[1] = x0.y; xx[2] = x0.z; xx[3] = x0.w;
      xx[4] = x1.x; xx[5] = x1.y; xx[6] = x1.z; xx[7] = x1.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) {
        ww[j] = w[k + j];
        xx[j] = x[k + j];
      }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) acc = __fadd_rn(acc, __fmul_rn(bf16(ww[j]), xx[j]));
  }
  // The partial chunk belongs to lane chunks % 32.
  if (lane == chunks % 32) {
    for (int k = chunks * 8; k < n; k++) acc = __fadd_rn(acc, __fmul_rn(bf16(w[k]), x[k]));
  }
  return warp_combine(acc);
}

}  // namespace canon
