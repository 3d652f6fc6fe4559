package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
)

// fp8Mat is a random block-FP8 matrix: codes of every kind but NaN
// (subnormal ones often), scales from subnormal to large.
func fp8Mat(r *rand.Rand, rows, cols, bn, bk int) *backend.Mat {
	m := &backend.Mat{Name: "w8", Rows: rows, Cols: cols, F8: make([]byte, rows*cols), BlockN: bn, BlockK: bk}
	for i := range m.F8 {
		b := byte(r.Uint32())
		if r.IntN(6) == 0 {
			b &= 0x87 // subnormal or ±0
		}
		for canon.E4M3IsNaN(b) {
			b = byte(r.Uint32())
		}
		m.F8[i] = b
	}
	m.Scale = make([]float32, canon.FP8Groups(rows, bn)*canon.FP8Groups(cols, bk))
	for i := range m.Scale {
		switch r.IntN(12) {
		case 0:
			m.Scale[i] = math.Float32frombits(r.Uint32() & 0x7FFFFF)
		case 1:
			m.Scale[i] = -float32(r.Float64())
		default:
			m.Scale[i] = float32(r.Float64() * math.Ldexp(1, -r.IntN(12)))
		}
	}
	return m
}

// fp8X is T random activation rows: some groups all zero, some tiny, some
// rows with a NaN or an infinity.
func fp8X(r *rand.Rand, T, K, bk int) []float32 {
	x := rnd(r, T*K, 1)
	for t := range T {
		for g := 0; g*bk < K; g++ {
			k0, k1 := t*K+g*bk, t*K+min(K, (g+1)*bk)
			switch r.IntN(8) {
			case 0:
				clear(x[k0:k1])
			case 1:
				for k := k0; k < k1; k++ {
					x[k] = math.Float32frombits(r.Uint32() & 0x801FFFFF)
				}
			case 2:
				for k := k0; k < k1; k++ {
					x[k] *= 1e30
				}
			}
		}
		if r.IntN(7) == 0 {
			x[t*K+r.IntN(K)] = []float32{float32(math.NaN()), float32(math.Inf(-1))}[r.IntN(2)]
		}
	}
	return x
}

// fp8Want is the definition, one output element at a time.
func fp8Want(w *backend.Mat, x []float32, T int) []float32 {
	N, K, bk := w.Rows, w.Cols, w.BlockK
	G := canon.FP8Groups(K, bk)
	want := make([]float32, T*N)
	q, xi, s := make([]byte, K), make([]int32, K), make([]float32, G)
	for t := range T {
		finite := canon.QuantizeFP8(q, s, x[t*K:(t+1)*K], bk)
		canon.FP8Ints(xi, q)
		for n := range N {
			v := float32(math.NaN())
			if finite {
				v = canon.DotFP8(w.F8[n*K:(n+1)*K], w.Scale[n/w.BlockN*G:(n/w.BlockN+1)*G], xi, s, bk)
			}
			want[t*N+n] = v
		}
	}
	return want
}

func TestMatMulFP8(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	for _, sz := range [][5]int{ // T, K, N, bn, bk
		{1, 7, 5, 2, 3}, {1, 300, 33, 16, 128}, {3, 256, 8, 128, 128}, {5, 520, 17, 4, 64},
		{17, 129, 9, 8, 128}, {4, 1, 3, 1, 1}, {9, 200, 70, 128, 128}, {16, 384, 12, 5, 128},
		{6, 203, 11, 3, 17}, {7, 100, 9, 2, 12}, {5, 2056, 6, 128, 128}, {8, 44, 4, 1, 8},
	} {
		T, K, N, bn, bk := sz[0], sz[1], sz[2], sz[3], sz[4]
		w := fp8Mat(r, N, K, bn, bk)
		x := fp8X(r, T, K, bk)
		want := fp8Want(w, x, T)
		nan := 0
		for _, v := range want {
			if v != v {
				nan++
			}
		}
		for _, c := range backends() {
			y := make([]float32, T*N)
			on(t, c).MatMul(y, w, x, T)
			same(t, fmt.Sprintf("MatMul FP8 T=%d K=%d N=%d block %d×%d threads=%d", T, K, N, bn, bk, c.threads), y, want)
			// Each row alone gives the same bits as the batch.
			for tt := range T {
				y1 := make([]float32, N)
				on(t, c).MatMul(y1, w, x[tt*K:(tt+1)*K], 1)
				same(t, fmt.Sprintf("MatMul FP8 row %d of %d alone, threads=%d", tt, T, c.threads), y1, want[tt*N:(tt+1)*N])
			}
		}
		t.Logf("T=%d K=%d N=%d: %d of %d outputs NaN", T, K, N, nan, len(want))
	}
}
