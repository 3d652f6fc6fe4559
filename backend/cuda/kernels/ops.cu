// ops.cu: one kernel per backend.Queue operation, computing exactly the bits
// of engine/cpu (EXACTNESS.md, "Operations"). Built to PTX by gen.sh with
// --fmad=false -ftz=false -prec-div=true -prec-sqrt=true (never fast math);
// every product and sum is an explicitly rounded intrinsic anyway.
//
// Reduction order (the one of EXACTNESS.md): term k of a sum goes to lane
// (k/8) mod 32, each lane adds its terms in increasing k from +0, and the 32
// lane totals are combined by the xor butterfly (offsets 16, 8, 4, 2, 1).
// Two forms compute that order:
//   - across a warp (canon::warp_combine): lane l of the warp is lane l of
//     the order (matrix products, norms, attention scores, softmax sums);
//   - inside one thread (Lanes below): the 32 lane totals are computed one
//     after the other and combined by the same butterfly in registers
//     (attention p·v, the DeltaNet reads, conv taps, combine, route sums).
// A lane that receives no term holds +0, and v + (+0) = v for every lane
// total (a total that starts at +0 is never −0), so the full butterfly
// equals the CPU's CombineN. No atomics; no tensor cores; no library calls.
//
// Launch ABI (gorgonia.org/cu copies every argument as 8 bytes): pointers,
// integers as long long, floats as float (the low 4 bytes of the slot).
#include "canon.cuh"
#include "blake3.cuh"

typedef long long i64;

namespace {

__device__ __forceinline__ float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float fsub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float fdiv(float a, float b) { return __fdiv_rn(a, b); }

// butterfly combines 32 lane totals held in registers (canon.Combine).
__device__ __forceinline__ float butterfly(float (&v)[32]) {
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
#pragma unroll
    for (int i = 0; i < o; i++) v[i] = fadd(v[i], v[i + o]);
  }
  return v[0];
}

// Lanes is the canonical sum computed by one thread whose terms arrive in
// increasing k (term k to lane (k/8) mod 32).
struct Lanes {
  float v[32];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < 32; i++) v[i] = 0.0f;
  }
  __device__ __forceinline__ void add(i64 k, float term) {
    int l = (int)((k >> 3) & 31);
    v[l] = fadd(v[l], term);
  }
  __device__ __forceinline__ float sum() { return butterfly(v); }
};

__device__ __forceinline__ bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// load8 reads 8 float32 values from p (16-byte loads when al).
__device__ __forceinline__ void load8(const float *p, bool al, float (&out)[8]) {
  if (al) {
    float4 a = *reinterpret_cast<const float4 *>(p);
    float4 b = *reinterpret_cast<const float4 *>(p + 4);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) out[j] = p[j];
  }
}

// load8 widens 8 BF16 values from p exactly (one 16-byte load when al).
__device__ __forceinline__ void load8(const uint16_t *p, bool al, float (&out)[8]) {
  if (al) {
    uint4 w = *reinterpret_cast<const uint4 *>(p);
    out[0] = __uint_as_float(w.x << 16); out[1] = __uint_as_float(w.x & 0xffff0000u);
    out[2] = __uint_as_float(w.y << 16); out[3] = __uint_as_float(w.y & 0xffff0000u);
    out[4] = __uint_as_float(w.z << 16); out[5] = __uint_as_float(w.z & 0xffff0000u);
    out[6] = __uint_as_float(w.w << 16); out[7] = __uint_as_float(w.w & 0xffff0000u);
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) out[j] = canon::bf16(p[j]);
  }
}

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t x) { return canon::bf16(x); }

// dot_warp is canon's DotF32/DotBF16 (w[0:n]·x[0:n]) computed by one full
// warp; every lane returns the result.
template <typename WT>
__device__ __forceinline__ float dot_warp(const WT *w, const float *x, i64 n) {
  const int lane = threadIdx.x & 31;
  const i64 chunks = n / 8;
  const bool al = aligned16(w) && aligned16(x) && (n % 8 == 0);
  float acc = 0.0f;
  for (i64 c = lane; c < chunks; c += 32) {
    float wv[8], xv[8];
    load8(w + c * 8, al, wv);
    load8(x + c * 8, al, xv);
#pragma unroll
    for (int j = 0; j < 8; j++) acc = fadd(acc, fmul(wv[j], xv[j]));
  }
  if (lane == (int)(chunks % 32)) {
    for (i64 k = chunks * 8; k < n; k++) acc = fadd(acc, fmul(widen(w[k]), x[k]));
  }
  return canon::warp_combine(acc);
}

// sumsq_warp is canon.SumSquares(x[0:n]) by one full warp.
__device__ __forceinline__ float sumsq_warp(const float *x, i64 n) { return dot_warp(x, x, n); }

__device__ __forceinline__ i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }

// ---- top-k in torch's order (canon/topk.go, libstdc++'s algorithms) ----

struct Pair {
  float v;
  int i;
};

__device__ __forceinline__ bool greater(const Pair &x, const Pair &y) {
  return (x.v != x.v && !(y.v != y.v)) || x.v > y.v;
}

__device__ __forceinline__ void swap_pair(Pair *a, int x, int y) {
  Pair t = a[x];
  a[x] = a[y];
  a[y] = t;
}

__device__ int lg(int n) {
  int r = -1;
  while (n > 0) {
    n >>= 1;
    r++;
  }
  return r;
}

__device__ void adjust_heap(Pair *a, int first, int hole, int n, Pair v) {
  int top = hole, child = hole;
  while (child < (n - 1) / 2) {
    child = 2 * (child + 1);
    if (greater(a[first + child], a[first + child - 1])) child--;
    a[first + hole] = a[first + child];
    hole = child;
  }
  if ((n & 1) == 0 && child == (n - 2) / 2) {
    child = 2 * (child + 1);
    a[first + hole] = a[first + child - 1];
    hole = child - 1;
  }
  int parent = (hole - 1) / 2;
  while (hole > top && greater(a[first + parent], v)) {
    a[first + hole] = a[first + parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  a[first + hole] = v;
}

__device__ void make_heap(Pair *a, int first, int last) {
  int n = last - first;
  if (n < 2) return;
  for (int parent = (n - 2) / 2;; parent--) {
    adjust_heap(a, first, parent, n, a[first + parent]);
    if (parent == 0) return;
  }
}

__device__ void pop_heap(Pair *a, int first, int last, int result) {
  Pair v = a[result];
  a[result] = a[first];
  adjust_heap(a, first, 0, last - first, v);
}

__device__ void heap_select(Pair *a, int first, int middle, int last) {
  make_heap(a, first, middle);
  for (int i = middle; i < last; i++) {
    if (greater(a[i], a[first])) pop_heap(a, first, middle, i);
  }
}

__device__ void sort_heap(Pair *a, int first, int last) {
  while (last - first > 1) {
    last--;
    pop_heap(a, first, last, last);
  }
}

__device__ void partial_sort(Pair *a, int first, int middle, int last) {
  heap_select(a, first, middle, last);
  sort_heap(a, first, middle);
}

__device__ void move_median_to_first(Pair *a, int result, int x, int y, int z) {
  int m;
  if (greater(a[x], a[y])) {
    if (greater(a[y], a[z])) m = y;
    else if (greater(a[x], a[z])) m = z;
    else m = x;
  } else if (greater(a[x], a[z])) m = x;
  else if (greater(a[y], a[z])) m = z;
  else m = y;
  swap_pair(a, result, m);
}

__device__ int unguarded_partition(Pair *a, int first, int last, int pivot) {
  for (;;) {
    while (greater(a[first], a[pivot])) first++;
    last--;
    while (greater(a[pivot], a[last])) last--;
    if (!(first < last)) return first;
    swap_pair(a, first, last);
    first++;
  }
}

__device__ int unguarded_partition_pivot(Pair *a, int first, int last) {
  int mid = first + (last - first) / 2;
  move_median_to_first(a, first, first + 1, mid, last - 1);
  return unguarded_partition(a, first + 1, last, first);
}

__device__ void unguarded_linear_insert(Pair *a, int last) {
  Pair v = a[last];
  int next = last - 1;
  while (greater(v, a[next])) {
    a[last] = a[next];
    last = next;
    next--;
  }
  a[last] = v;
}

__device__ void insertion_sort(Pair *a, int first, int last) {
  if (first == last) return;
  for (int i = first + 1; i < last; i++) {
    if (greater(a[i], a[first])) {
      Pair v = a[i];
      for (int j = i; j > first; j--) a[j] = a[j - 1];
      a[first] = v;
    } else {
      unguarded_linear_insert(a, i);
    }
  }
}

__device__ void nth_element(Pair *a, int first, int nth, int last) {
  if (first == last || nth == last) return;
  int depth = 2 * lg(last - first);
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(a, first, nth + 1, last);
      swap_pair(a, first, nth);
      return;
    }
    depth--;
    int cut = unguarded_partition_pivot(a, first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(a, first, last);
}

// introsort_loop is std::__introsort_loop with its recursion on the right
// part made explicit (a small stack: the depth is bounded by 2·lg(n)).
__device__ void introsort_loop(Pair *a, int first, int last, int depth) {
  const int sortThreshold = 16;
  int stackFirst[64], stackLast[64], stackDepth[64];
  int sp = 0;
  stackFirst[sp] = first; stackLast[sp] = last; stackDepth[sp] = depth; sp++;
  // The recursive version handles [cut, last) fully before continuing on
  // [first, cut); a stack of pending left parts reproduces that order.
  while (sp > 0) {
    sp--;
    first = stackFirst[sp]; last = stackLast[sp]; depth = stackDepth[sp];
    while (last - first > sortThreshold) {
      if (depth == 0) {
        partial_sort(a, first, last, last);
        break;
      }
      depth--;
      int cut = unguarded_partition_pivot(a, first, last);
      // Recurse on [cut, last) first: push the left part to resume later.
      stackFirst[sp] = first; stackLast[sp] = cut; stackDepth[sp] = depth; sp++;
      first = cut;
    }
  }
}

__device__ void final_insertion_sort(Pair *a, int first, int last) {
  const int sortThreshold = 16;
  if (last - first > sortThreshold) {
    insertion_sort(a, first, first + sortThreshold);
    for (int i = first + sortThreshold; i < last; i++) unguarded_linear_insert(a, i);
  } else {
    insertion_sort(a, first, last);
  }
}

__device__ void intro_sort(Pair *a, int first, int last) {
  if (first == last) return;
  introsort_loop(a, first, last, 2 * lg(last - first));
  final_insertion_sort(a, first, last);
}

}  // namespace

extern "C" {

// ---- data movement ----

// copy_rows: rows×cols values, row r of dst at r·ds, of src at r·ss.
__global__ void copy_rows(float *dst, i64 ds, const float *src, i64 ss, i64 rows, i64 cols) {
  i64 i = gtid();
  if (i >= rows * cols) return;
  i64 r = i / cols, c = i % cols;
  dst[r * ds + c] = src[r * ss + c];
}

// gather_rows: row j of dst = row idx[j] of src (m rows of n).
__global__ void gather_rows(float *dst, const float *src, const int *idx, i64 m, i64 n) {
  i64 i = gtid();
  if (i >= m * n) return;
  i64 j = i / n, c = i % n;
  dst[i] = src[(i64)idx[j] * n + c];
}

// scatter_rows: row idx[j] of dst = row j of src (m rows of n).
__global__ void scatter_rows(float *dst, const float *src, const int *idx, i64 m, i64 n) {
  i64 i = gtid();
  if (i >= m * n) return;
  i64 j = i / n, c = i % n;
  dst[(i64)idx[j] * n + c] = src[i];
}

// embed_bf16 / embed_f32: row t of dst = row ids[t] of the table, widened.
__global__ void embed_bf16(float *dst, const uint16_t *table, const int *ids, i64 T, i64 H) {
  i64 i = gtid();
  if (i >= T * H) return;
  i64 t = i / H, c = i % H;
  dst[i] = canon::bf16(table[(i64)ids[t] * H + c]);
}

__global__ void embed_f32(float *dst, const float *table, const int *ids, i64 T, i64 H) {
  i64 i = gtid();
  if (i >= T * H) return;
  i64 t = i / H, c = i % H;
  dst[i] = table[(i64)ids[t] * H + c];
}

}  // extern "C"

// ---- MatMul ----

// matmul: y[t·N+n] = dot(W row n, x row t). One warp per R consecutive
// weight rows and group of up to TT tokens: each lane loads its 8 weights of
// each row once per chunk and uses them for every token of the group, and
// each token's 8 activations once for all R rows; every (row, token) lane
// total is the canonical one (lane l: chunks l, l+32, … in increasing k; the
// partial chunk last, on lane chunks mod 32), so R does not change a bit.
// Blocks of 8 warps (8·R rows). With U > 1 (aligned rows only), a lane
// issues the loads of its next U chunks of each row before it uses the
// first (U·16 bytes of weights in flight a row, where one chunk's load
// would wait alone), then adds them in the same increasing order: the
// same bits for every U.
#define TT 8
// rawload reads one chunk of 8 weights as they are stored; widen8 makes the
// 8 floats of it (exactly: BF16 is a float's upper half).
struct raw_bf16 { uint4 q; };
struct raw_f32 { float4 a, b; };
template <typename WT> struct raw_of;
template <> struct raw_of<uint16_t> { typedef raw_bf16 type; };
template <> struct raw_of<float> { typedef raw_f32 type; };
__device__ __forceinline__ void rawload(raw_bf16 &r, const uint16_t *p) { r.q = *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void rawload(raw_f32 &r, const float *p) {
  r.a = *reinterpret_cast<const float4 *>(p);
  r.b = *reinterpret_cast<const float4 *>(p + 4);
}
__device__ __forceinline__ void widen8(const raw_bf16 &r, float (&out)[8]) {
  out[0] = __uint_as_float(r.q.x << 16); out[1] = __uint_as_float(r.q.x & 0xffff0000u);
  out[2] = __uint_as_float(r.q.y << 16); out[3] = __uint_as_float(r.q.y & 0xffff0000u);
  out[4] = __uint_as_float(r.q.z << 16); out[5] = __uint_as_float(r.q.z & 0xffff0000u);
  out[6] = __uint_as_float(r.q.w << 16); out[7] = __uint_as_float(r.q.w & 0xffff0000u);
}
__device__ __forceinline__ void widen8(const raw_f32 &r, float (&out)[8]) {
  out[0] = r.a.x; out[1] = r.a.y; out[2] = r.a.z; out[3] = r.a.w;
  out[4] = r.b.x; out[5] = r.b.y; out[6] = r.b.z; out[7] = r.b.w;
}
// mm_chunk adds one chunk's rounded products to every (row, token)
// accumulator: the chunk's 8 weights of each of the nr rows (wv, widened)
// times the 8 activations of each of the nt tokens at xc, xc + K, ….
template <int R, int TG>
__device__ __forceinline__ void mm_chunk(float (&acc)[R][TG], const float (&wv)[R][8], const float *xc, i64 K, int nr,
                                         int nt, bool alx) {
#pragma unroll
  for (int u = 0; u < TG; u++) {
    if (u < nt) {
      float xv[8];
      load8(xc + u * K, alx, xv);
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (r < nr) {
#pragma unroll
          for (int k = 0; k < 8; k++) acc[r][u] = fadd(acc[r][u], fmul(wv[r][k], xv[k]));
        }
      }
    }
  }
}

// Block (bx, by) computes rows bx·8·R … of W for tokens by·TG … (TG tokens
// a group: TT, or 1 for a kernel of one token, which holds one token's
// accumulators where TT would hold eight). AL: the caller guarantees
// aligned rows (W and x 16-byte aligned, K a multiple of 8), so the kernel
// has no unaligned path (fewer registers, more blocks a multiprocessor).
template <typename WT, int R, int U = 1, int TG = TT, bool AL = false>
__device__ __forceinline__ void matmul_body(float *y, const WT *W, const float *x, i64 N, i64 K, i64 T, i64 bx, i64 by) {
  const int lane = threadIdx.x & 31;
  const i64 n0 = (bx * (blockDim.x / 32) + (threadIdx.x / 32)) * R;
  if (n0 >= N) return;  // whole warps only
  const int nr = (int)min((i64)R, N - n0);
  const i64 t0 = by * TG;
  const int nt = (int)min((i64)TG, T - t0);
  const WT *w = W + n0 * K;
  const i64 chunks = K / 8;
  const bool alw = AL || (aligned16(W) && (K % 8 == 0));
  const bool alx = AL || (aligned16(x) && (K % 4 == 0));
  float acc[R][TG];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int u = 0; u < TG; u++) acc[r][u] = 0.0f;
  if ((U > 1 || AL) && alw && alx) {
    for (i64 c0 = lane; c0 < chunks; c0 += 32 * U) {
      typename raw_of<WT>::type raw[U][R];
#pragma unroll
      for (int j = 0; j < U; j++)
#pragma unroll
        for (int r = 0; r < R; r++)
          if (r < nr && c0 + 32 * j < chunks) rawload(raw[j][r], w + r * K + (c0 + 32 * j) * 8);
#pragma unroll
      for (int j = 0; j < U; j++) {
        const i64 c = c0 + 32 * j;
        if (c >= chunks) break;
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) widen8(raw[j][r], wv[r]);
        mm_chunk<R, TG>(acc, wv, x + t0 * K + c * 8, K, nr, nt, true);
      }
    }
  } else
  for (i64 c = lane; c < chunks; c += 32) {
    float wv[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
      if (r < nr) load8(w + r * K + c * 8, alw, wv[r]);
    }
    mm_chunk<R, TG>(acc, wv, x + t0 * K + c * 8, K, nr, nt, alx);
  }
  if (!AL && lane == (int)(chunks % 32)) {  // AL: K % 8 == 0, no partial chunk
    for (i64 k = chunks * 8; k < K; k++) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (r < nr) {
          float wk = widen(w[r * K + k]);
#pragma unroll
          for (int u = 0; u < TG; u++) {
            if (u < nt) acc[r][u] = fadd(acc[r][u], fmul(wk, x[(t0 + u) * K + k]));
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int u = 0; u < TG; u++) {
      float v = canon::warp_combine(acc[r][u]);
      if (lane == 0 && r < nr && u < nt) y[(t0 + u) * N + n0 + r] = v;
    }
  }
}

extern "C" {

__global__ void matmul_bf16(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<uint16_t, 1>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

__global__ void matmul_f32(float *y, const float *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<float, 1>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

// matmul_bf16_d4 / matmul_f32_d4: matmul_bf16 / matmul_f32 with four
// chunks of loads in flight a lane (U = 4; the same bits), for products
// of few tokens, whose time is the weights' reads.
__global__ void __launch_bounds__(256, 3) matmul_bf16_d4(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<uint16_t, 1, 4>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

__global__ void __launch_bounds__(256, 3) matmul_f32_d4(float *y, const float *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<float, 1, 4>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

// matmul_bf16_t1 / matmul_f32_t1: one token a group (TG = 1) and four
// chunks in flight a lane (the same bits), for products of one token: the
// grid's y is the token.
__global__ void __launch_bounds__(256) matmul_bf16_t1(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<uint16_t, 1, 4, 1>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

__global__ void __launch_bounds__(256) matmul_f32_t1(float *y, const float *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<float, 1, 4, 1>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

// matmul_bf16_r4a: matmul_bf16_r4 for aligned rows only (the caller checks
// W and x 16-byte aligned and K a multiple of 8): no unaligned path, so
// fewer registers and more blocks a multiprocessor (the same bits).
__global__ void __launch_bounds__(256) matmul_bf16_r4a(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<uint16_t, 4, 1, TT, true>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

// matmul_bf16_r4 / matmul_f32_r4: four weight rows a warp (the same bits as
// matmul_bf16 / matmul_f32), for steps of several tokens, where reading
// each token's activations once for four rows takes load off L1.
__global__ void matmul_bf16_r4(float *y, const uint16_t *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<uint16_t, 4>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

__global__ void matmul_f32_r4(float *y, const float *W, const float *x, i64 N, i64 K, i64 T) {
  matmul_body<float, 4>(y, W, x, N, K, T, blockIdx.x, blockIdx.y);
}

// matmul_group: G independent products in one launch (the experts of one
// MoE layer). Entry g owns blocks first … first + rb·⌈T/TT⌉ − 1 of the
// one-dimensional grid, row block fastest; each of its blocks runs exactly
// the block (bx, by) of matmul_bf16 or matmul_f32 over the entry: the same
// bits. Entries are sorted by first, which starts at 0.
struct mm_entry {
  float *y;
  const void *W;
  const float *x;
  i64 N, K, T, bf16, first, rb;
};

}  // extern "C"

template <int U, int TG = TT, int R = 1>
__device__ __forceinline__ void matmul_group_body(const mm_entry *e, i64 G) {
  const i64 b = blockIdx.x;
  i64 lo = 0, hi = G - 1;  // the last entry whose first is <= b
  while (lo < hi) {
    const i64 mid = (lo + hi + 1) / 2;
    if (e[mid].first <= b) lo = mid; else hi = mid - 1;
  }
  const mm_entry m = e[lo];
  const i64 r = b - m.first;
  if (m.bf16) {
    matmul_body<uint16_t, R, U, TG>(m.y, (const uint16_t *)m.W, m.x, m.N, m.K, m.T, r % m.rb, r / m.rb);
  } else {
    matmul_body<float, R, 1, TG>(m.y, (const float *)m.W, m.x, m.N, m.K, m.T, r % m.rb, r / m.rb);
  }
}

extern "C" {

__global__ void matmul_group(const mm_entry *e, i64 G) { matmul_group_body<1>(e, G); }

// matmul_group_d4 is matmul_group with matmul_bf16_d4's loads (U = 4) for
// BF16 weights (FP32 weights as in matmul_group).
__global__ void __launch_bounds__(256, 2) matmul_group_d4(const mm_entry *e, i64 G) { matmul_group_body<4>(e, G); }

// matmul_group_t1: matmul_group for entries of one token (TG = 1: an
// entry's blocks are its row blocks), BF16 weights four chunks deep.
__global__ void __launch_bounds__(256) matmul_group_t1(const mm_entry *e, i64 G) { matmul_group_body<4, 1>(e, G); }

// matmul_group_r4: matmul_group with four weight rows a warp (an entry's
// row blocks are of 32 rows), for entries of 4 tokens or more: each
// token's activations loaded once for four rows, as in matmul_bf16_r4.
__global__ void __launch_bounds__(256, 2) matmul_group_r4(const mm_entry *e, i64 G) { matmul_group_body<1, TT, 4>(e, G); }

// ---- softmax normaliser (backend.Normaliser): a row's max and ExpSum ----

// gomax is Go's max of two float32: a NaN if either is one, +0 above −0.
// It is commutative and associative, so any reduction order gives canon.Max.
__device__ __forceinline__ float gomax(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return __float_as_uint(a) == 0x80000000u ? b : a;
  return a > b ? a : b;
}

// softmax_norm: out[2r], out[2r+1] = canon.Max m of row r of x (rows × n)
// and canon.ExpSum(row, m). One block of SN_THREADS a row, in two passes
// over the row:
//   1. the max: each thread four running gomax over its strides, then the
//      block's tree (gomax is associative: any order gives canon.Max);
//   2. the sum, in canon.Sum's order over the terms canon.Exp(x − m): lane l
//      of warp 0 adds chunks l, l+32, … of 8 terms in increasing k from +0
//      (the partial chunk last, on its lane), then the butterfly. The other
//      warps compute the terms of the next tile of SN_TILE into shared
//      memory while warp 0 adds the current one (double-buffered), so the
//      row's time is warp 0's chain of adds, not one memory latency a chunk.
//      A tile is a whole number of rounds of 32 chunks, so a chunk's lane is
//      its index mod 32 in every tile, as in one pass.
#define SN_THREADS 1024
#define SN_TILE 4096
__global__ void __launch_bounds__(SN_THREADS) softmax_norm(float *out, const float *x, i64 rows, i64 n) {
  __shared__ float red[SN_THREADS];
  __shared__ float terms[2][SN_TILE];
  const i64 r = blockIdx.x;
  if (r >= rows) return;  // whole blocks only
  const float *row = x + r * n;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float ninf = __uint_as_float(0xff800000u);
  float v0 = ninf, v1 = ninf, v2 = ninf, v3 = ninf;
  i64 i = tid;
  for (; i + 3 * SN_THREADS < n; i += 4 * SN_THREADS) {
    v0 = gomax(v0, row[i]);
    v1 = gomax(v1, row[i + SN_THREADS]);
    v2 = gomax(v2, row[i + 2 * SN_THREADS]);
    v3 = gomax(v3, row[i + 3 * SN_THREADS]);
  }
  for (; i < n; i += SN_THREADS) v0 = gomax(v0, row[i]);
  red[tid] = gomax(gomax(v0, v1), gomax(v2, v3));
  __syncthreads();
  for (int o = SN_THREADS / 2; o > 0; o >>= 1) {
    if (tid < o) red[tid] = gomax(red[tid], red[tid + o]);
    __syncthreads();
  }
  const float m = red[0];
  const i64 tiles = (n + SN_TILE - 1) / SN_TILE;
  if (tiles > 0 && warp != 0) {  // tile 0's terms
    for (int j = tid - 32; j < SN_TILE && j < n; j += SN_THREADS - 32) terms[0][j] = canon::exp(__fsub_rn(row[j], m));
  }
  __syncthreads();
  float acc = 0.0f;
  for (i64 t = 0; t < tiles; t++) {
    const i64 base = t * SN_TILE;
    if (warp != 0) {
      if (t + 1 < tiles) {  // the next tile's terms, beside warp 0's adds
        const i64 nb = base + SN_TILE;
        float *dst = terms[(t + 1) & 1];
        for (int j = tid - 32; j < SN_TILE && nb + j < n; j += SN_THREADS - 32) dst[j] = canon::exp(__fsub_rn(row[nb + j], m));
      }
    } else {
      const float *src = terms[t & 1];
      for (int c = lane; c < SN_TILE / 8; c += 32) {
        const i64 k0 = base + (i64)c * 8;
        if (k0 >= n) break;
        const int len = (int)min((i64)8, n - k0);
        if (len == 8) {
#pragma unroll
          for (int q = 0; q < 8; q++) acc = fadd(acc, src[c * 8 + q]);
        } else {
          for (int q = 0; q < len; q++) acc = fadd(acc, src[c * 8 + q]);
        }
      }
    }
    __syncthreads();
  }
  if (warp == 0) {
    const float s = canon::warp_combine(acc);
    if (lane == 0) {
      out[2 * r] = m;
      out[2 * r + 1] = s;
    }
  }
}

// ---- argmax (backend.Argmaxer): a row's canon.Argmax ----

// argmax_rows: idx[r] = canon.Argmax of row r of x (rows × n): the lowest
// index among equal maxima (−0 == +0 as the comparison sees them), −1 for
// a row holding a NaN or of no values. One block of ARGMAX_THREADS a row:
// thread t scans t, t + ARGMAX_THREADS, … keeping the first of its largest
// (a strict >), then the block keeps the larger value, the lower index on
// equal ones: the index one scan finds, since every maximum is seen by
// exactly one thread and ties go to the lowest index at each merge.
#define ARGMAX_THREADS 1024
__global__ void __launch_bounds__(ARGMAX_THREADS) argmax_rows(int *idx, const float *x, i64 rows, i64 n) {
  __shared__ float sv[ARGMAX_THREADS];
  __shared__ i64 si[ARGMAX_THREADS];
  const i64 r = blockIdx.x;
  if (r >= rows) return;  // whole blocks only
  const float *row = x + r * n;
  i64 bi = -1;
  float bv = 0.0f;
  int nan = 0;
  for (i64 i = threadIdx.x; i < n; i += ARGMAX_THREADS) {
    const float v = row[i];
    if (v != v) {
      nan = 1;
    } else if (bi < 0 || v > bv) {
      bi = i;
      bv = v;
    }
  }
  nan = __syncthreads_or(nan);
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = ARGMAX_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      const i64 ai = si[threadIdx.x], ci = si[threadIdx.x + o];
      const float av = sv[threadIdx.x], cv = sv[threadIdx.x + o];
      if (ci >= 0 && (ai < 0 || cv > av || (cv == av && ci < ai))) {
        si[threadIdx.x] = ci;
        sv[threadIdx.x] = cv;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) idx[r] = nan ? -1 : (int)si[0];
}

// ---- norms: one warp per row ----

// rmsnorm: inv = Rsqrt(RN(Sum(x²)/n) + eps); y = RN(RN(x·inv)·scale).
__global__ void rmsnorm(float *y, const float *x, const float *scale, i64 rows, i64 n, float eps) {
  const int lane = threadIdx.x & 31;
  const i64 r = (i64)blockIdx.x * (blockDim.x / 32) + (threadIdx.x / 32);
  if (r >= rows) return;
  const float *xr = x + r * n;
  float *yr = y + r * n;
  float ss = sumsq_warp(xr, n);
  float inv = canon::rsqrt(fadd(fdiv(ss, (float)n), eps));
  for (i64 i = lane; i < n; i += 32) yr[i] = fmul(fmul(xr[i], inv), scale[i]);
}

// rmsnorm_row: rmsnorm with one block of RN_THREADS a row, for rows of up
// to RN_MAX values: the block loads the row into shared memory (every
// thread a stride: the loads in flight at once), warp 0 sums its squares
// there in sumsq_warp's order, and the block writes the outputs. A step's
// few long rows no longer wait one memory latency a chunk.
#define RN_THREADS 256
#define RN_MAX 8192
__global__ void __launch_bounds__(RN_THREADS) rmsnorm_row(float *y, const float *x, const float *scale, i64 rows, i64 n, float eps) {
  __shared__ __align__(16) float xs[RN_MAX];
  __shared__ float inv_s;
  const i64 r = blockIdx.x;
  if (r >= rows) return;  // whole blocks only
  const float *xr = x + r * n;
  float *yr = y + r * n;
  for (i64 i = threadIdx.x; i < n; i += RN_THREADS) xs[i] = xr[i];
  __syncthreads();
  if (threadIdx.x < 32) {
    const float ss = sumsq_warp(xs, n);
    if (threadIdx.x == 0) inv_s = canon::rsqrt(fadd(fdiv(ss, (float)n), eps));
  }
  __syncthreads();
  const float inv = inv_s;
  for (i64 i = threadIdx.x; i < n; i += RN_THREADS) yr[i] = fmul(fmul(xs[i], inv), scale[i]);
}

// gated_rmsnorm: y = RN(RN(w·RN(x·inv))·SiLU(z)).
__global__ void gated_rmsnorm(float *y, const float *x, const float *z, const float *w, i64 rows, i64 n, float eps) {
  const int lane = threadIdx.x & 31;
  const i64 r = (i64)blockIdx.x * (blockDim.x / 32) + (threadIdx.x / 32);
  if (r >= rows) return;
  const float *xr = x + r * n;
  const float *zr = z + r * n;
  float *yr = y + r * n;
  float ss = sumsq_warp(xr, n);
  float inv = canon::rsqrt(fadd(fdiv(ss, (float)n), eps));
  for (i64 i = lane; i < n; i += 32) yr[i] = fmul(fmul(w[i], fmul(xr[i], inv)), canon::silu(zr[i]));
}

// l2norm: inv = Rsqrt(Sum(x²) + eps); y = RN(x·inv), then RN(y·scale) if
// scale != 1.
__global__ void l2norm(float *y, const float *x, i64 rows, i64 n, float eps, float scale) {
  const int lane = threadIdx.x & 31;
  const i64 r = (i64)blockIdx.x * (blockDim.x / 32) + (threadIdx.x / 32);
  if (r >= rows) return;
  const float *xr = x + r * n;
  float *yr = y + r * n;
  float ss = sumsq_warp(xr, n);
  float inv = canon::rsqrt(fadd(ss, eps));
  for (i64 i = lane; i < n; i += 32) {
    float v = fmul(xr[i], inv);
    if (scale != 1.0f) v = fmul(v, scale);
    yr[i] = v;
  }
}

// ---- RoPE: one thread per (row of a head, pair) ----

__global__ void rope(float *x, i64 T, i64 heads, i64 hd, i64 h2, const float *cos, const float *sin) {
  i64 i = gtid();
  if (i >= T * heads * h2) return;
  i64 row = i / h2, j = i % h2;
  i64 t = row / heads;
  float *xr = x + row * hd;
  float c = cos[t * h2 + j], s = sin[t * h2 + j];
  float a = xr[j], b = xr[j + h2];
  xr[j] = fadd(fmul(a, c), fmul(-b, s));
  xr[j + h2] = fadd(fmul(b, c), fmul(a, s));
}

// ---- Attention: one block per query row (token, head) ----

// attention: scores s_u = RN(dot(k_u, q)·scale) for u < n (one warp per
// score), m = max, e_u = Exp(RN(s_u − m)), Z = Sum_u e_u (warp 0, lanes over
// positions), p_u = RN(e_u/Z), o[c] = Sum_u RN(p_u·v_u[c]) (one thread per
// c, the 32 lanes over positions one after the other). scratch holds maxn
// values per query row.
__global__ void attention(float *o, const float *q, const float *k, const float *v, float *scratch, i64 T, i64 pos0,
                          i64 nq, i64 nkv, i64 hd, float scale, i64 maxn) {
  __shared__ float sh[33];
  const i64 it = blockIdx.x;
  if (it >= T * nq) return;
  const i64 t = it / nq, h = it % nq;
  const i64 grp = nq / nkv;
  const i64 kv = (h / grp) * hd, row = nkv * hd;
  const i64 n = pos0 + t + 1;
  float *s = scratch + it * maxn;
  const float *qv = q + it * hd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (i64 u = warp; u < n; u += nw) {
    float d = dot_warp(k + u * row + kv, qv, hd);
    if (lane == 0) s[u] = fmul(d, scale);
  }
  __syncthreads();
  // The maximum is exact and order-free (NaN scores are skipped, as by the
  // CPU's comparison).
  float m = -__int_as_float(0x7f800000);
  for (i64 u = threadIdx.x; u < n; u += blockDim.x) {
    float x = s[u];
    if (x > m) m = x;
  }
  for (int off = 16; off >= 1; off >>= 1) {
    float other = __shfl_xor_sync(0xffffffffu, m, off);
    if (other > m) m = other;
  }
  if (lane == 0) sh[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mm = sh[0];
    for (int w = 1; w < nw; w++)
      if (sh[w] > mm) mm = sh[w];
    sh[32] = mm;
  }
  __syncthreads();
  m = sh[32];
  for (i64 u = threadIdx.x; u < n; u += blockDim.x) s[u] = canon::exp(fsub(s[u], m));
  __syncthreads();
  if (warp == 0) {
    float acc = 0.0f;
    for (i64 c = lane; c * 8 < n; c += 32) {
      for (int j = 0; j < 8; j++) {
        i64 u = c * 8 + j;
        if (u < n) acc = fadd(acc, s[u]);
      }
    }
    acc = canon::warp_combine(acc);
    if (lane == 0) sh[32] = acc;
  }
  __syncthreads();
  const float Z = sh[32];
  for (i64 u = threadIdx.x; u < n; u += blockDim.x) s[u] = fdiv(s[u], Z);
  __syncthreads();
  for (i64 c = threadIdx.x; c < hd; c += blockDim.x) {
    float lanes[32];
#pragma unroll
    for (int l = 0; l < 32; l++) {
      float acc = 0.0f;
      for (i64 ch = l; ch * 8 < n; ch += 32) {
        for (int j = 0; j < 8; j++) {
          i64 u = ch * 8 + j;
          if (u < n) acc = fadd(acc, fmul(s[u], v[u * row + kv + c]));
        }
      }
      lanes[l] = acc;
    }
    o[it * hd + c] = butterfly(lanes);
  }
}

// ---- Gated DeltaNet ----

// causal_conv: one thread per channel, tokens in order; y =
// SiLU(Sum_j RN(w[j]·in_j)) over the Kc taps (the Kc−1 state values, oldest
// first, then the current input); the state shifts by one per token.
__global__ void causal_conv(float *y, const float *x, float *state, const float *w, i64 T, i64 C, i64 Kc) {
  i64 ch = gtid();
  if (ch >= C) return;
  float *st = state + ch * (Kc - 1);
  const float *ww = w + ch * Kc;
  for (i64 t = 0; t < T; t++) {
    float in = x[t * C + ch];
    Lanes acc;
    acc.zero();
    for (i64 i = 0; i < Kc - 1; i++) acc.add(i, fmul(ww[i], st[i]));
    acc.add(Kc - 1, fmul(ww[Kc - 1], in));
    y[t * C + ch] = canon::silu(acc.sum());
    if (Kc > 1) {
      for (i64 i = 0; i + 1 < Kc - 1; i++) st[i] = st[i + 1];
      st[Kc - 2] = in;
    }
  }
}

// gdn_gates: beta = Sigmoid(b); g = RN(−Exp(aLog[j])·Softplus(RN(a+dt[j])));
// alpha = Exp(g); j = i mod nv.
__global__ void gdn_gates(float *beta, float *alpha, const float *b, const float *a, const float *aLog, const float *dt,
                          i64 n, i64 nv) {
  i64 i = gtid();
  if (i >= n) return;
  i64 j = i % nv;
  beta[i] = canon::sigmoid(b[i]);
  float g = fmul(-canon::exp(aLog[j]), canon::softplus(fadd(a[i], dt[j])));
  alpha[i] = canon::exp(g);
}

// delta_rule: one thread per (value head, column c of the state): the
// column's updates and its two reads over dk are independent of every
// other column, so each thread runs its tokens in order alone. The reads
// Sum_r over dk visit the 32 lanes one after the other (lane l: rows of
// chunks l, l+32, …), which only reorders independent element updates.
// delta_rule_body is one session's gated delta rule for the thread's value
// head blockIdx.x and state column blockIdx.y·blockDim.x + threadIdx.x.
__device__ __forceinline__ void delta_rule_body(float *o, const float *q, const float *k, const float *v, const float *beta,
                                                const float *alpha, float *S, i64 T, i64 nk, i64 nv, i64 dk, i64 dv) {
  const i64 h = blockIdx.x;
  const i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x;
  if (h >= nv || c >= dv) return;
  const i64 i = h / (nv / nk);
  float *Sh = S + h * dk * dv;
  for (i64 t = 0; t < T; t++) {
    const float *kk = k + (t * nk + i) * dk;
    const float *qq = q + (t * nk + i) * dk;
    const float al = alpha[t * nv + h], be = beta[t * nv + h];
    float lanes[32];
#pragma unroll
    for (int l = 0; l < 32; l++) {
      float acc = 0.0f;
      for (i64 ch = l; ch * 8 < dk; ch += 32) {
        for (int j = 0; j < 8; j++) {
          i64 r = ch * 8 + j;
          if (r < dk) {
            float s = fmul(al, Sh[r * dv + c]);
            Sh[r * dv + c] = s;
            acc = fadd(acc, fmul(kk[r], s));
          }
        }
      }
      lanes[l] = acc;
    }
    const float mc = butterfly(lanes);
    const float d = fmul(fsub(v[(t * nv + h) * dv + c], mc), be);
#pragma unroll
    for (int l = 0; l < 32; l++) {
      float acc = 0.0f;
      for (i64 ch = l; ch * 8 < dk; ch += 32) {
        for (int j = 0; j < 8; j++) {
          i64 r = ch * 8 + j;
          if (r < dk) {
            float s = fadd(Sh[r * dv + c], fmul(kk[r], d));
            Sh[r * dv + c] = s;
            acc = fadd(acc, fmul(qq[r], s));
          }
        }
      }
      lanes[l] = acc;
    }
    o[(t * nv + h) * dv + c] = butterfly(lanes);
  }
}

__global__ void delta_rule(float *o, const float *q, const float *k, const float *v, const float *beta,
                           const float *alpha, float *S, i64 T, i64 nk, i64 nv, i64 dk, i64 dv) {
  delta_rule_body(o, q, k, v, beta, alpha, S, T, nk, nv, dk, dv);
}

// delta_rule_group: G sessions' delta rules in one launch (backend.DeltaRuler),
// entry blockIdx.z: each block runs exactly the block of delta_rule over its
// entry, so every session gets the bits of its own launch.
struct dr_entry {
  float *o;
  const float *q, *k, *v, *beta, *alpha;
  float *S;
  i64 T;
};

__global__ void delta_rule_group(const dr_entry *e, i64 nk, i64 nv, i64 dk, i64 dv) {
  const dr_entry d = e[blockIdx.z];
  delta_rule_body(d.o, d.q, d.k, d.v, d.beta, d.alpha, d.S, d.T, nk, nv, dk, dv);
}

// ---- elementwise ----

__global__ void silu_mul(float *y, const float *g, const float *u, i64 n) {
  i64 i = gtid();
  if (i < n) y[i] = fmul(canon::silu(g[i]), u[i]);
}

__global__ void sigmoid_mul(float *y, const float *x, const float *g, i64 n) {
  i64 i = gtid();
  if (i < n) y[i] = fmul(x[i], canon::sigmoid(g[i]));
}

__global__ void add(float *y, const float *a, const float *b, i64 n) {
  i64 i = gtid();
  if (i < n) y[i] = fadd(a[i], b[i]);
}

// gate_add: y = RN(y + RN(Sigmoid(g[t])·x)).
__global__ void gate_add(float *y, const float *x, const float *g, i64 T, i64 n) {
  i64 i = gtid();
  if (i >= T * n) return;
  y[i] = fadd(y[i], fmul(canon::sigmoid(g[i / n]), x[i]));
}

// ---- MoE ----

// route_select: the top-k of the n (value, index) pairs a in torch's
// order (a partial sort for small k, else nth_element then a sort of the
// first k), their ids into ti and their probabilities pt[id] into tw,
// renormalised by the canonical sum of the k weights if renorm. One thread.
__device__ void route_select(Pair *a, const float *pt, int n, int kk, int *ti, float *tw, i64 renorm) {
  if (kk * 64 <= n) {
    partial_sort(a, 0, kk, n);
  } else {
    nth_element(a, 0, kk - 1, n);
    intro_sort(a, 0, kk - 1);
  }
  for (int s = 0; s < kk; s++) {
    ti[s] = a[s].i;
    tw[s] = pt[a[s].i];
  }
  if (renorm) {
    Lanes r;
    r.zero();
    for (int s = 0; s < kk; s++) r.add(s, tw[s]);
    float sum = r.sum();
    for (int s = 0; s < kk; s++) tw[s] = fdiv(tw[s], sum);
  }
}

// route: one thread per token. p = Exp(RN(ℓ − max)) / Sum (canonical sum),
// the top-k of p in torch's order, w = p[sel], renormalised by the
// canonical sum of the k weights if renorm. p holds T×E values, pairs T×E
// (value, index) pairs of scratch; idx is T×k.
__global__ void route(int *idx, float *w, const float *logits, float *p, void *pairs, i64 T, i64 E, i64 k,
                      i64 renorm) {
  i64 t = gtid();
  if (t >= T) return;
  const float *l = logits + t * E;
  float *pt = p + t * E;
  Pair *a = reinterpret_cast<Pair *>(pairs) + t * E;
  float m = -__int_as_float(0x7f800000);
  for (i64 e = 0; e < E; e++)
    if (l[e] > m) m = l[e];
  Lanes acc;
  acc.zero();
  for (i64 e = 0; e < E; e++) {
    float x = canon::exp(fsub(l[e], m));
    pt[e] = x;
    acc.add(e, x);
  }
  float z = acc.sum();
  for (i64 e = 0; e < E; e++) {
    pt[e] = fdiv(pt[e], z);
    a[e].v = pt[e];
    a[e].i = (int)e;
  }
  route_select(a, pt, (int)E, (int)k, idx + t * k, w + t * k, renorm);
}

// route_warp is route for E <= ROUTE_WARP_E: one warp a token, the same
// bits. The maximum is taken by each lane over its experts and combined
// (a maximum is exact in any order; only the sign of a zero maximum can
// differ, and RN(ℓ − (±0)) and Exp(±0) do not see it); the exponentials
// are computed by the lanes that own them in the canonical order (expert e
// on lane (e/8) mod 32, in increasing e) and summed by the warp's
// butterfly; p and the (value, index) pairs are in shared memory, where
// lane 0 selects the top-k with route's algorithm.
#define ROUTE_WARP_E 1024
__global__ void route_warp(int *idx, float *w, const float *logits, i64 T, i64 E, i64 k, i64 renorm) {
  __shared__ Pair a[ROUTE_WARP_E];
  __shared__ float pt[ROUTE_WARP_E];
  const i64 t = blockIdx.x;
  const int lane = threadIdx.x & 31;
  if (t >= T || threadIdx.x >= 32) return;
  const float *l = logits + t * E;
  float m = -__int_as_float(0x7f800000);
  for (i64 e = lane; e < E; e += 32)
    if (l[e] > m) m = l[e];
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
    float v = __shfl_xor_sync(0xffffffffu, m, o);
    if (v > m) m = v;
  }
  float acc = 0.0f;
  for (i64 c = lane; c * 8 < E; c += 32) {
    for (i64 e = c * 8; e < c * 8 + 8 && e < E; e++) {
      float x = canon::exp(fsub(l[e], m));
      pt[e] = x;
      acc = fadd(acc, x);
    }
  }
  const float z = __shfl_sync(0xffffffffu, canon::warp_combine(acc), 0);
  for (i64 e = lane; e < E; e += 32) {
    float v = fdiv(pt[e], z);
    pt[e] = v;
    a[e].v = v;
    a[e].i = (int)e;
  }
  __syncwarp();
  if (lane != 0) return;
  route_select(a, pt, (int)E, (int)k, idx + t * k, w + t * k, renorm);
}

// combine: y[t,i] = Sum_s RN(x[t,s,i]·w[t,s]) over the k slots in order.
__global__ void combine(float *y, const float *x, const float *w, i64 T, i64 k, i64 n) {
  i64 i = gtid();
  if (i >= T * n) return;
  i64 t = i / n, c = i % n;
  Lanes acc;
  acc.zero();
  for (i64 s = 0; s < k; s++) acc.add(s, fmul(x[(t * k + s) * n + c], w[t * k + s]));
  y[i] = acc.sum();
}

}  // extern "C"
