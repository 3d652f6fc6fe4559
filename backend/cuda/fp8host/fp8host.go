//go:build cgo

package fp8host

/*
#cgo CFLAGS: -O2 -std=c11
#cgo LDFLAGS: -lm
// ISO C (-std=c11) makes the compiler's default -ffp-contract=off: no
// product feeds an addition unrounded (the kernels' intrinsics on the
// device).
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdlib.h>
#include <ucontext.h>
#include <stdint.h>
#include <string.h>

// The warp: 32 lanes as coroutines of one thread (ucontext), run in turn
// up to their next exchange; an exchange writes the lane's value into the
// round's buffer, yields, and once every lane has written reads its
// partner's (the kernels exchange only where all 32 lanes do, in the same
// order). Two buffers alternate, so a lane that runs on to the next
// exchange cannot overwrite a value another lane has yet to read.
static ucontext_t f8main, f8ctx[32];
static int f8lane, f8round[32];
static int64_t f8xi[2][32];
static float f8xf[2][32];

static void f8_yield(void) { swapcontext(&f8ctx[f8lane], &f8main); }

static int f8_any(int p) {
	int b = f8round[f8lane]++ & 1, me = f8lane;
	f8xi[b][me] = p != 0;
	f8_yield();
	int r = 0;
	for (int i = 0; i < 32; i++) r |= (int)f8xi[b][i];
	return r;
}

static float f8_xor_f32(float v, int o) {
	int b = f8round[f8lane]++ & 1, me = f8lane;
	f8xf[b][me] = v;
	f8_yield();
	return f8xf[b][me ^ o];
}

static int64_t f8_xor_i64(int64_t v, int o) {
	int b = f8round[f8lane]++ & 1, me = f8lane;
	f8xi[b][me] = v;
	f8_yield();
	return f8xi[b][me ^ o];
}

#define F8_ANY(p) f8_any(p)
#define F8_XOR_F32(v, o) f8_xor_f32(v, o)
#define F8_XOR_I64(v, o) f8_xor_i64(v, o)
#include "fp8.h" // a link to ../kernels/fp8.cuh (a .h in the package, so the build cache sees changes)

// job is one launch: every warp of it, run by each lane in turn.
struct job {
	int kind; // 0: fp8_quantize, 1: matmul_fp8
	int32_t *xi, *bad;
	float *s, *y;
	const float *x;
	const uint8_t *W;
	const void *S;
	int64_t sdt, N, K, T, bn, bk, warps;
};

static struct job *f8job;
static int f8done[32];

static void lane_main(void) {
	struct job *j = f8job;
	int lane = f8lane;
	for (int64_t w = 0; w < j->warps; w++) {
		if (j->kind == 0) {
			f8_quantize_warp(j->xi, j->s, j->bad, j->x, j->K, j->bk, w, lane);
		} else {
			f8_matmul_warp(j->y, j->W, j->S, j->sdt, j->xi, j->s, j->bad, j->N, j->K, j->T, j->bn, j->bk,
			               w % j->N, (w / j->N) * F8_TT, lane);
		}
	}
	f8done[lane] = 1;
	swapcontext(&f8ctx[lane], &f8main);
}

enum { f8stack = 1 << 20 };

// run runs every warp of j: the lanes in turn until all have finished.
// (_POSIX_C_SOURCE hides the older ucontext declarations' feature test;
// glibc still declares them.)
static int run(struct job *j) {
	char *stacks = malloc((size_t)32 * f8stack);
	if (stacks == NULL) return -1;
	f8job = j;
	for (int l = 0; l < 32; l++) {
		f8done[l] = 0;
		f8round[l] = 0;
		if (getcontext(&f8ctx[l]) != 0) { free(stacks); return -1; }
		f8ctx[l].uc_stack.ss_sp = stacks + (size_t)l * f8stack;
		f8ctx[l].uc_stack.ss_size = f8stack;
		f8ctx[l].uc_link = NULL;
		makecontext(&f8ctx[l], lane_main, 0);
	}
	for (;;) {
		int live = 0;
		for (int l = 0; l < 32; l++) {
			if (f8done[l]) continue;
			f8lane = l;
			swapcontext(&f8main, &f8ctx[l]);
			live += !f8done[l];
		}
		if (live == 0) break;
		if (live != 32) { free(stacks); return -2; } // lanes diverged at an exchange
	}
	free(stacks);
	return 0;
}

static int quantize(int32_t *xi, float *s, int32_t *bad, const float *x, int64_t T, int64_t K, int64_t bk) {
	struct job j = {0};
	j.kind = 0; j.xi = xi; j.s = s; j.bad = bad; j.x = x; j.T = T; j.K = K; j.bk = bk;
	j.warps = T * ((K + bk - 1) / bk);
	return run(&j);
}

static int matmul(float *y, const uint8_t *W, const void *S, int64_t sdt, const int32_t *xi, const float *s,
                  const int32_t *bad, int64_t N, int64_t K, int64_t T, int64_t bn, int64_t bk) {
	struct job j = {0};
	j.kind = 1; j.y = y; j.W = W; j.S = S; j.sdt = sdt; j.xi = (int32_t *)xi; j.s = (float *)s; j.bad = (int32_t *)bad;
	j.N = N; j.K = K; j.T = T; j.bn = bn; j.bk = bk;
	j.warps = N * ((T + F8_TT - 1) / F8_TT);
	return run(&j);
}

static uint32_t encode(float x) { return f8_encode(x); }
static int32_t toint(uint32_t b) { return f8_int(b); }
static float f16(uint32_t h) { return f8_f16(h); }
static float scale(const void *S, int64_t sdt, int64_t i) { return f8_scale(S, sdt, i); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Scale dtypes of MatMul's sdt (fp8.cuh's F8_SCALE_*).
const (
	ScaleF32  = 0
	ScaleBF16 = 1
	ScaleF16  = 2
)

// TT is the most tokens one warp of matmul_fp8 computes (F8_TT).
const TT = C.F8_TT

// mu serialises launches: the host warp is one set of globals.
var mu sync.Mutex

func groups(K, bk int) int { return (K + bk - 1) / bk }

// Quantize runs fp8_quantize over the T×K activations x with groups of bk:
// xi (T·K), s and bad (T·G each) as the kernel writes them.
func Quantize(xi []int32, s []float32, bad []int32, x []float32, T, K, bk int) error {
	G := groups(K, bk)
	if T <= 0 || K <= 0 || bk <= 0 || len(x) < T*K || len(xi) < T*K || len(s) < T*G || len(bad) < T*G {
		return fmt.Errorf("fp8host: Quantize of %d×%d (groups of %d): buffers too short", T, K, bk)
	}
	mu.Lock()
	defer mu.Unlock()
	if C.quantize((*C.int32_t)(&xi[0]), (*C.float)(&s[0]), (*C.int32_t)(&bad[0]), (*C.float)(&x[0]), C.int64_t(T), C.int64_t(K), C.int64_t(bk)) != 0 {
		return fmt.Errorf("fp8host: the host warp failed (lanes diverged at an exchange, or no memory for their stacks)")
	}
	return nil
}

// MatMul runs matmul_fp8: y (T·N) from the N×K codes W, the scales S
// (stored as sdt: ceil(N/bn)·G of them, as bytes) and Quantize's xi, s and
// bad. W's first byte is where row 0 starts (misalign it to take the
// kernel's byte path).
func MatMul(y []float32, W []byte, S []byte, sdt int, xi []int32, s []float32, bad []int32, N, K, T, bn, bk int) error {
	G := groups(K, bk)
	esz := 4
	if sdt != ScaleF32 {
		esz = 2
	}
	if N <= 0 || K <= 0 || T <= 0 || bn <= 0 || bk <= 0 || len(y) < T*N || len(W) < N*K || len(S) < esz*groups(N, bn)*G ||
		len(xi) < T*K || len(s) < T*G || len(bad) < T*G {
		return fmt.Errorf("fp8host: MatMul of %d×%d by %d rows (blocks %d×%d): buffers too short", N, K, T, bn, bk)
	}
	mu.Lock()
	defer mu.Unlock()
	if C.matmul((*C.float)(&y[0]), (*C.uint8_t)(&W[0]), unsafe.Pointer(&S[0]), C.int64_t(sdt), (*C.int32_t)(&xi[0]), (*C.float)(&s[0]),
		(*C.int32_t)(&bad[0]), C.int64_t(N), C.int64_t(K), C.int64_t(T), C.int64_t(bn), C.int64_t(bk)) != 0 {
		return fmt.Errorf("fp8host: the host warp failed (lanes diverged at an exchange, or no memory for their stacks)")
	}
	return nil
}

// Encode is the kernels' f8_encode (canon.EncodeE4M3).
func Encode(x float32) byte { return byte(C.encode(C.float(x))) }

// Int is the kernels' f8_int (canon.E4M3Int).
func Int(b byte) int32 { return int32(C.toint(C.uint32_t(b))) }

// F16 is the kernels' f8_f16 (backend.F16).
func F16(h uint16) float32 { return float32(C.f16(C.uint32_t(h))) }

// Scale is the kernels' f8_scale: scale i of S stored as sdt.
func Scale(S []byte, sdt, i int) float32 {
	return float32(C.scale(unsafe.Pointer(&S[0]), C.int64_t(sdt), C.int64_t(i)))
}
