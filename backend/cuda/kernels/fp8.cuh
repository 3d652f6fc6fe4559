// fp8.cuh: the canonical block-FP8 linear layer (EXACTNESS.md, "Block-FP8
// linear layers (W8A8)") as the work of one warp, computing exactly the
// bits of canon.QuantizeFP8 and canon.DotFP8. fp8.cu launches it; the
// functions compile as host C too (without __CUDACC__, with the warp's
// exchanges supplied by the includer), which is how backend/cuda/fp8host
// checks them against canon without a GPU.
//
// For y = W·x with W [N,K] stored as E4M3 codes and one scale per bn×bk
// block:
//   1. f8_quantize_warp, one warp per (row t, group g) of x: a = max|x_k|
//      over the group, s = RN(a/448), q_k = EncodeE4M3(RN(x_k/s)) (0 when s
//      is 0), kept as the integer E4M3Int(q_k) = q_k·2^9; a NaN or an
//      infinity in the group flags it (the whole output row is then NaN).
//   2. f8_matmul_warp, one warp per weight row and up to F8_TT tokens: for
//      each group g in order, P = Σ_k E4M3Int(w_k)·E4M3Int(q_k) exactly in
//      64-bit integers (each lane's part, then the xor butterfly: integer
//      addition is exact in any order), p = RN(P)·2^-18, and y =
//      RN(y + RN(RN(p·s_g)·S[n/bn][g])) from +0.
// Every float operation is an explicitly rounded intrinsic on the device
// (plain float arithmetic on the host, built without contraction); no FMA,
// no atomics, no tensor cores.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__
#define F8_FN __device__ __forceinline__
#define F8_FADD(a, b) __fadd_rn(a, b)
#define F8_FMUL(a, b) __fmul_rn(a, b)
#define F8_FDIV(a, b) __fdiv_rn(a, b)
#define F8_LL2F(v) __ll2float_rn(v)
#define F8_F2I(f) __float2int_rn(f)
#define F8_MAX(a, b) fmaxf(a, b)
#define F8_BITS(f) __float_as_uint(f)
#define F8_FLOAT(u) __uint_as_float(u)
#define F8_ANY(p) __any_sync(0xffffffffu, p)
#define F8_XOR_F32(v, o) __shfl_xor_sync(0xffffffffu, v, o)
#define F8_XOR_I64(v, o) __shfl_xor_sync(0xffffffffu, v, o)
// F8_LOAD4 reads four int32 from a 16-byte aligned p (one load).
#define F8_LOAD4(q, p)                                       \
  do {                                                       \
    const int4 v_ = *reinterpret_cast<const int4 *>(p);      \
    (q)[0] = v_.x, (q)[1] = v_.y, (q)[2] = v_.z, (q)[3] = v_.w; \
  } while (0)
#else
// The host includer defines F8_ANY, F8_XOR_F32 and F8_XOR_I64 (the warp's
// exchanges) and includes <math.h> and <string.h>.
#define F8_FN static inline
#define F8_FADD(a, b) ((float)(a) + (float)(b))
#define F8_FMUL(a, b) ((float)(a) * (float)(b))
#define F8_FDIV(a, b) ((float)(a) / (float)(b))
#define F8_LL2F(v) ((float)(v))
#define F8_F2I(f) ((int)rintf(f))
#define F8_MAX(a, b) fmaxf(a, b)
#define F8_LOAD4(q, p) memcpy((q), (p), 16)
static inline uint32_t F8_BITS(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float F8_FLOAT(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#endif

// f8_encode is canon.EncodeE4M3: round to the nearest E4M3 value, ties to
// even, saturating at ±448; NaN gives 0x7F.
F8_FN uint32_t f8_encode(float x) {
  const uint32_t b = F8_BITS(x);
  const uint32_t sign = (b >> 24) & 0x80u;
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (a >= 0x43e00000u) return sign | 0x7eu;  // |x| >= 448
  if (a < 0x3c800000u) {
    // |x| < 2^-6, the subnormal range: |x|·2^9 is exact and below 8;
    // rounded to an integer (ties to even) it is the code.
    return sign | (uint32_t)F8_F2I(F8_FMUL(F8_FLOAT(a), 512.0f));
  }
  const uint32_t e = (a >> 23) - 127u + 7u;  // 1 … 15
  const uint32_t m = a & 0x7fffffu;
  uint32_t q = m >> 20;
  const uint32_t rem = m & 0xfffffu;
  if (rem > (1u << 19) || (rem == (1u << 19) && (q & 1u))) q++;
  return sign | ((e << 3) + q);
}

// f8_int is canon.E4M3Int: the value of code b times 2^9, an integer of
// magnitude at most 229376 (0 for the NaN codes).
F8_FN int32_t f8_int(uint32_t b) {
  if ((b & 0x7fu) == 0x7fu) return 0;
  const int32_t e = (int32_t)((b >> 3) & 15u), m = (int32_t)(b & 7u);
  const int32_t v = e == 0 ? m : (8 + m) << (e - 1);
  return (b & 0x80u) ? -v : v;
}

// f8_f16 widens an IEEE half-precision bit pattern exactly (backend.F16).
F8_FN float f8_f16(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0) {
    // m·2^-24: m is exact in float32 and the scaling by a power of two
    // stays normal.
    return F8_FLOAT(F8_BITS(F8_FMUL((float)m, 5.9604644775390625e-08f)) | sign);
  }
  if (e == 31) return F8_FLOAT(sign | 0x7f800000u | (m << 13));
  return F8_FLOAT(sign | ((e + 112u) << 23) | (m << 13));
}

// Scale dtypes (f8_matmul_warp's sdt): how the weight scales are stored.
#define F8_SCALE_F32 0
#define F8_SCALE_BF16 1
#define F8_SCALE_F16 2

F8_FN float f8_scale(const void *S, int64_t sdt, int64_t i) {
  if (sdt == F8_SCALE_F32) return ((const float *)S)[i];
  const uint32_t h = ((const uint16_t *)S)[i];
  return sdt == F8_SCALE_BF16 ? F8_FLOAT(h << 16) : f8_f16(h);
}

F8_FN int64_t f8_min(int64_t a, int64_t b) { return a < b ? a : b; }

// f8_sum is the exact sum of every lane's v, on every lane.
F8_FN int64_t f8_sum(int64_t v) {
  for (int o = 16; o >= 1; o >>= 1) v += F8_XOR_I64(v, o);
  return v;
}

// f8_quantize_warp is warp w of fp8_quantize: xi[t·K+k] = E4M3Int(q_k),
// s[t·G+g] = RN(a/448) and bad[t·G+g] = 1 if group g of row t holds a NaN
// or an infinity (else 0), for (t, g) = (w/G, w%G), G = ceil(K/bk).
F8_FN void f8_quantize_warp(int32_t *xi, float *s, int32_t *bad, const float *x, int64_t K, int64_t bk, int64_t w, int lane) {
  const int64_t G = (K + bk - 1) / bk;
  const int64_t t = w / G, g = w % G;
  const int64_t k0 = g * bk, k1 = f8_min(K, k0 + bk);
  const float *xr = x + t * K;
  int32_t *qr = xi + t * K;
  float a = 0.0f;
  int nonfinite = 0;
  for (int64_t k = k0 + lane; k < k1; k += 32) {
    const float v = F8_FLOAT(F8_BITS(xr[k]) & 0x7fffffffu);
    if (!(v <= 3.40282346638528859812e+38f)) {
      nonfinite = 1;
    } else {
      a = F8_MAX(a, v);  // exact, and every v >= +0
    }
  }
  nonfinite = F8_ANY(nonfinite);
  for (int o = 16; o >= 1; o >>= 1) a = F8_MAX(a, F8_XOR_F32(a, o));
  const float sg = nonfinite ? 0.0f : F8_FDIV(a, 448.0f);
  for (int64_t k = k0 + lane; k < k1; k += 32) {
    qr[k] = sg == 0.0f ? 0 : f8_int(f8_encode(F8_FDIV(xr[k], sg)));
  }
  if (lane == 0) {
    s[t * G + g] = sg;
    bad[t * G + g] = nonfinite;
  }
}

// F8_TT is the most tokens one warp of matmul_fp8 computes.
#define F8_TT 8

// f8_matmul_warp is the warp of matmul_fp8 for weight row n and tokens
// t0 … t0+F8_TT−1 (those below T): y[t·N+n] = the block-FP8 product of W
// row n (its codes; its scales S, stored as sdt, row n/bn of ceil(N/bn) ×
// G) and row t of the quantised activations (xi, s, bad of
// f8_quantize_warp), NaN for a row with a flagged group. Each lane reads
// its weight codes once for all the tokens, four at a time when every row
// and group starts on a multiple of four and the pointers allow.
F8_FN void f8_matmul_warp(float *y, const uint8_t *W, const void *S, int64_t sdt, const int32_t *xi, const float *s,
                          const int32_t *bad, int64_t N, int64_t K, int64_t T, int64_t bn, int64_t bk, int64_t n, int64_t t0,
                          int lane) {
  const int nt = (int)f8_min(F8_TT, T - t0);
  const int64_t G = (K + bk - 1) / bk;
  const uint8_t *w = W + n * K;
  const int64_t srow = (n / bn) * G;
  const int v4 = (K % 4 == 0) && (bk % 4 == 0) && (((uintptr_t)W & 3) == 0) && (((uintptr_t)xi & 15) == 0);
  float acc[F8_TT];
  int nan[F8_TT];
  for (int u = 0; u < F8_TT; u++) {
    acc[u] = 0.0f;
    nan[u] = 0;
  }
  for (int64_t g = 0; g < G; g++) {
    const int64_t k0 = g * bk, k1 = f8_min(K, k0 + bk);
    int64_t P[F8_TT];
    for (int u = 0; u < F8_TT; u++) P[u] = 0;
    if (v4) {
      for (int64_t k = k0 + 4 * lane; k < k1; k += 128) {
        const uint32_t c = *(const uint32_t *)(w + k);
        const int32_t w0 = f8_int(c & 0xffu), w1 = f8_int((c >> 8) & 0xffu);
        const int32_t w2 = f8_int((c >> 16) & 0xffu), w3 = f8_int(c >> 24);
        for (int u = 0; u < F8_TT; u++) {
          if (u < nt) {
            int32_t q[4];
            F8_LOAD4(q, xi + (t0 + u) * K + k);
            P[u] += (int64_t)w0 * q[0] + (int64_t)w1 * q[1] + (int64_t)w2 * q[2] + (int64_t)w3 * q[3];
          }
        }
      }
    } else {
      for (int64_t k = k0 + lane; k < k1; k += 32) {
        const int32_t wk = f8_int(w[k]);
        for (int u = 0; u < F8_TT; u++) {
          if (u < nt) P[u] += (int64_t)wk * xi[(t0 + u) * K + k];
        }
      }
    }
    const float sw = f8_scale(S, sdt, srow + g);
    for (int u = 0; u < F8_TT; u++) {
      if (u < nt) {
        const int64_t sum = f8_sum(P[u]);
        const float p = F8_FMUL(F8_LL2F(sum), 3.814697265625e-06f);  // ·2^-18, exact
        acc[u] = F8_FADD(acc[u], F8_FMUL(F8_FMUL(p, s[(t0 + u) * G + g]), sw));
        nan[u] |= bad[(t0 + u) * G + g];
      }
    }
  }
  if (lane == 0) {
    for (int u = 0; u < F8_TT; u++) {
      if (u < nt) y[(t0 + u) * N + n] = nan[u] ? F8_FLOAT(0x7fc00000u) : acc[u];
    }
  }
}
