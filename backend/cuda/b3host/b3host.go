//go:build cgo

package b3host

/*
#cgo CFLAGS: -O2
#include <stdlib.h>
#include "blake3.h" // a link to ../kernels/blake3.cuh (a .h in the package, so the build cache sees changes)

// sum is the kernels' walk: chunk chaining values, then parent levels.
static void sum(uint8_t out[32], const uint8_t *p0, int64_t n0, const uint8_t *p1, int64_t n1,
                const uint8_t *p2, int64_t n2) {
	struct b3_segs g = {{p0, p1, p2}, {n0, n1, n2}};
	int64_t total = n0 + n1 + n2;
	int64_t chunks = total == 0 ? 1 : (total + B3_CHUNK_LEN - 1) / B3_CHUNK_LEN;
	uint32_t *a = malloc(32 * chunks), *b = malloc(32 * chunks);
	for (int64_t c = 0; c < chunks; c++) b3_chunk(a + 8 * c, &g, total, c, chunks == 1);
	for (int64_t n = chunks; n > 1; n = (n + 1) / 2) {
		for (int64_t i = 0; i < (n + 1) / 2; i++) {
			if (2 * i + 1 == n) {
				for (int j = 0; j < 8; j++) b[8 * i + j] = a[16 * i + j];
			} else {
				b3_parent(b + 8 * i, a + 16 * i, a + 16 * i + 8, n == 2);
			}
		}
		uint32_t *t = a; a = b; b = t;
	}
	for (int i = 0; i < 32; i++) out[i] = (uint8_t)(a[i / 4] >> (8 * (i % 4)));
	free(a);
	free(b);
}

static void chunk(uint32_t cv[8], const uint8_t *p0, int64_t n0, const uint8_t *p1, int64_t n1,
                  const uint8_t *p2, int64_t n2, int64_t c) {
	struct b3_segs g = {{p0, p1, p2}, {n0, n1, n2}};
	int64_t total = n0 + n1 + n2;
	int64_t chunks = total == 0 ? 1 : (total + B3_CHUNK_LEN - 1) / B3_CHUNK_LEN;
	b3_chunk(cv, &g, total, c, chunks == 1);
}
*/
import "C"

import "unsafe"

// args are segs as the C functions take them.
func args(segs [][]byte) (p [3]*C.uint8_t, n [3]C.int64_t) {
	if len(segs) > 3 {
		panic("b3host: more than three segments")
	}
	for i, s := range segs {
		if len(s) > 0 {
			p[i] = (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(s)))
			n[i] = C.int64_t(len(s))
		}
	}
	return p, n
}

// Chunk is the chaining value of chunk c of the concatenation of segs (the
// digest's words when the stream is one chunk), as blake3_chunks computes
// it: for locating a difference between the device and the host.
func Chunk(c int64, segs ...[]byte) [8]uint32 {
	p, n := args(segs)
	var cv [8]C.uint32_t
	C.chunk(&cv[0], p[0], n[0], p[1], n[1], p[2], n[2], C.int64_t(c))
	var out [8]uint32
	for i := range cv {
		out[i] = uint32(cv[i])
	}
	return out
}

// Sum is the BLAKE3-256 digest of the concatenation of up to three
// segments, computed by the CUDA kernels' C code on the host.
func Sum(segs ...[]byte) [32]byte {
	p, n := args(segs)
	var out [32]byte
	C.sum((*C.uint8_t)(unsafe.Pointer(&out[0])), p[0], n[0], p[1], n[1], p[2], n[2])
	return out
}
