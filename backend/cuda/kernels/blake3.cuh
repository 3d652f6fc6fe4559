// blake3.cuh: BLAKE3-256 (the unkeyed hash, 32-byte output) of a byte
// stream in device memory, so that the CUDA backend can check a routed
// expert's bytes where they are computed: in its device slot, after the
// copy, against the manifest's digest of the record (jnf/SPEC.md: the
// record is gate ‖ up ‖ down; a slot holds the three parts at 256-byte
// boundaries, so the stream is up to three segments).
//
// The tree is BLAKE3's: 1024-byte chunks, chunk i compressed block by block
// with counter i (CHUNK_START on its first block, CHUNK_END on its last),
// then parents merged level by level, pairs left to right, an odd last node
// carried up unchanged — which builds exactly BLAKE3's tree, whose left
// subtree holds the largest power of two of chunks that leaves the right
// one non-empty. The root's compression (a chunk's last block when there
// is one chunk, else the last parent) carries ROOT; its first 8 output words
// are the hash. Integer arithmetic only: the digest is the same bits on
// every device, and the Go tests compare it with github.com/zeebo/blake3.
//
// The functions compile as host C too (gcc, without __CUDACC__), which is
// how engine/cuda/b3host checks them without a GPU.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__
#define B3_FN __device__ __forceinline__
#else
#define B3_FN static inline
#endif

#define B3_CHUNK_START 1u
#define B3_CHUNK_END 2u
#define B3_PARENT 4u
#define B3_ROOT 8u
#define B3_CHUNK_LEN 1024
#define B3_BLOCK_LEN 64

B3_FN uint32_t b3_iv(int i) {
  switch (i) {
    case 0: return 0x6A09E667u;
    case 1: return 0xBB67AE85u;
    case 2: return 0x3C6EF372u;
    case 3: return 0xA54FF53Au;
    case 4: return 0x510E527Fu;
    case 5: return 0x9B05688Cu;
    case 6: return 0x1F83D9ABu;
    default: return 0x5BE0CD19u;
  }
}

B3_FN uint32_t b3_rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#define B3_G(a, b, c, d, x, y)        \
  do {                                \
    s[a] = s[a] + s[b] + (x);         \
    s[d] = b3_rotr(s[d] ^ s[a], 16);  \
    s[c] = s[c] + s[d];               \
    s[b] = b3_rotr(s[b] ^ s[c], 12);  \
    s[a] = s[a] + s[b] + (y);         \
    s[d] = b3_rotr(s[d] ^ s[a], 8);   \
    s[c] = s[c] + s[d];               \
    s[b] = b3_rotr(s[b] ^ s[c], 7);   \
  } while (0)

// b3_compress compresses one 64-byte block m (16 little-endian words) into
// the chaining value cv (8 words, updated in place: the first 8 words of
// the compression's output).
B3_FN void b3_compress(uint32_t cv[8], const uint32_t m_in[16], uint64_t counter, uint32_t len, uint32_t flags) {
  uint32_t s[16];
  uint32_t m[16];
  for (int i = 0; i < 16; i++) m[i] = m_in[i];
  for (int i = 0; i < 8; i++) s[i] = cv[i];
  s[8] = b3_iv(0);
  s[9] = b3_iv(1);
  s[10] = b3_iv(2);
  s[11] = b3_iv(3);
  s[12] = (uint32_t)counter;
  s[13] = (uint32_t)(counter >> 32);
  s[14] = len;
  s[15] = flags;
  for (int r = 0; r < 7; r++) {
    B3_G(0, 4, 8, 12, m[0], m[1]);
    B3_G(1, 5, 9, 13, m[2], m[3]);
    B3_G(2, 6, 10, 14, m[4], m[5]);
    B3_G(3, 7, 11, 15, m[6], m[7]);
    B3_G(0, 5, 10, 15, m[8], m[9]);
    B3_G(1, 6, 11, 12, m[10], m[11]);
    B3_G(2, 7, 8, 13, m[12], m[13]);
    B3_G(3, 4, 9, 14, m[14], m[15]);
    if (r < 6) {
      // The message permutation 2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8.
      uint32_t t[16] = {m[2], m[6], m[3], m[10], m[7], m[0], m[4], m[13],
                        m[1], m[11], m[12], m[5], m[9], m[14], m[15], m[8]};
      for (int i = 0; i < 16; i++) m[i] = t[i];
    }
  }
  for (int i = 0; i < 8; i++) cv[i] = s[i] ^ s[i + 8];
}

// b3_segs is the stream: up to three segments, one after the other.
struct b3_segs {
  const uint8_t *p[3];
  int64_t n[3];
};

// b3_byte is byte o of the stream (o below its length).
B3_FN uint8_t b3_byte(const struct b3_segs *g, int64_t o) {
  if (o < g->n[0]) return g->p[0][o];
  o -= g->n[0];
  if (o < g->n[1]) return g->p[1][o];
  return g->p[2][o - g->n[1]];
}

// b3_load reads the len (≤ 64) bytes of the stream from o into the
// little-endian words m, zero-padded: 16-byte loads where the block lies in
// one segment at a 16-byte-aligned address, else byte by byte.
B3_FN void b3_load(uint32_t m[16], const struct b3_segs *g, int64_t o, int len) {
  int64_t rel = o;
  int seg = 0;
  while (seg < 2 && rel >= g->n[seg]) {
    rel -= g->n[seg];
    seg++;
  }
  const uint8_t *base = g->p[seg] + rel;
  if (len == B3_BLOCK_LEN && rel + B3_BLOCK_LEN <= g->n[seg] && ((uintptr_t)base & 15) == 0) {
#ifdef __CUDACC__
    const uint4 *q = (const uint4 *)base;
    for (int i = 0; i < 4; i++) {
      uint4 v = q[i];
      m[4 * i] = v.x;
      m[4 * i + 1] = v.y;
      m[4 * i + 2] = v.z;
      m[4 * i + 3] = v.w;
    }
    return;
#else
    const uint32_t *q = (const uint32_t *)base;  // little-endian hosts only
    for (int i = 0; i < 16; i++) m[i] = q[i];
    return;
#endif
  }
  for (int i = 0; i < 16; i++) m[i] = 0;
  for (int i = 0; i < len; i++) m[i >> 2] |= (uint32_t)b3_byte(g, o + i) << (8 * (i & 3));
}

// b3_chunk computes the chaining value of chunk c of a stream of total
// bytes (c below the chunk count; a stream of 0 bytes has one empty chunk),
// with ROOT on its last block when root is set (the stream is one chunk).
B3_FN void b3_chunk(uint32_t cv[8], const struct b3_segs *g, int64_t total, int64_t c, int root) {
  for (int i = 0; i < 8; i++) cv[i] = b3_iv(i);
  int64_t start = c * B3_CHUNK_LEN;
  int64_t n = total - start;
  if (n > B3_CHUNK_LEN) n = B3_CHUNK_LEN;
  int blocks = n == 0 ? 1 : (int)((n + B3_BLOCK_LEN - 1) / B3_BLOCK_LEN);
  uint32_t m[16];
  for (int b = 0; b < blocks; b++) {
    int len = (int)(n - (int64_t)b * B3_BLOCK_LEN);
    if (len > B3_BLOCK_LEN) len = B3_BLOCK_LEN;
    b3_load(m, g, start + (int64_t)b * B3_BLOCK_LEN, len);
    uint32_t flags = 0;
    if (b == 0) flags |= B3_CHUNK_START;
    if (b == blocks - 1) flags |= B3_CHUNK_END | (root ? B3_ROOT : 0u);
    b3_compress(cv, m, (uint64_t)c, (uint32_t)len, flags);
  }
}

// b3_parent merges two chaining values l and r into out (ROOT if root).
B3_FN void b3_parent(uint32_t out[8], const uint32_t l[8], const uint32_t r[8], int root) {
  uint32_t m[16];
  for (int i = 0; i < 8; i++) {
    m[i] = l[i];
    m[8 + i] = r[i];
    out[i] = b3_iv(i);
  }
  b3_compress(out, m, 0, B3_BLOCK_LEN, B3_PARENT | (root ? B3_ROOT : 0u));
}

#ifdef __CUDACC__
extern "C" {

// blake3_chunks: thread c < chunks writes chunk c's chaining value to
// cvs[8c..8c+7]; root is set when the stream is one chunk (cvs[0..7] is
// then the hash). The stream is segments (p0, n0), (p1, n1), (p2, n2).
__global__ void blake3_chunks(uint32_t *cvs, const uint8_t *p0, long long n0, const uint8_t *p1, long long n1,
                              const uint8_t *p2, long long n2, long long chunks, long long root) {
  long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  struct b3_segs g;
  g.p[0] = p0;
  g.p[1] = p1;
  g.p[2] = p2;
  g.n[0] = n0;
  g.n[1] = n1;
  g.n[2] = n2;
  uint32_t cv[8];
  b3_chunk(cv, &g, n0 + n1 + n2, c, (int)root);
  for (int i = 0; i < 8; i++) cvs[8 * c + i] = cv[i];
}

// blake3_parents merges one level of n ≥ 2 chaining values in in into
// (n + 1) / 2 in out: thread i < n / 2 merges nodes 2i and 2i + 1 (ROOT
// when root is set, i.e. n is 2), and for odd n thread n / 2 carries the
// last node up.
__global__ void blake3_parents(uint32_t *out, const uint32_t *in, long long n, long long root) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (n + 1) / 2) return;
  if (2 * i + 1 == n) {
    for (int j = 0; j < 8; j++) out[8 * i + j] = in[8 * (2 * i) + j];
    return;
  }
  uint32_t cv[8];
  b3_parent(cv, in + 16 * i, in + 16 * i + 8, (int)root);
  for (int j = 0; j < 8; j++) out[8 * i + j] = cv[j];
}

}  // extern "C"
#endif
