package cpu

import (
	"math"
	"sync"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
)

// ---- MatMul of a block-FP8 matrix (EXACTNESS.md, "Block-FP8 linear layers") ----

// fp8Act is the activations of one block-FP8 MatMul, quantised once per
// call and shared by every weight row: with the vector kernels
// (canon.HasVectorKernels), the float64 form of each row's codes
// (canon.FP8Wide), else their integer values (canon.FP8Ints, FP8Ints4); its
// group scales; and whether it was finite.
type fp8Act struct {
	vec    bool
	q      []byte
	xw     []float64 // row t at [t·K, (t+1)·K) (vec)
	xi     []int32   // row t at [t·K, (t+1)·K) (!vec)
	x4     []int32   // rows 4b…4b+3 interleaved (canon.FP8Ints4) at [4b·K, (4b+4)·K) (!vec)
	s      []float32
	finite []bool
}

var fp8Acts = sync.Pool{New: func() any { return new(fp8Act) }}

func grow[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	return s[:n]
}

type fp8Job struct {
	y   []float32
	a   *fp8Act
	w   *backend.Mat
	T   int
	tok bool // items are tokens (few rows) instead of rows
}

func (j *fp8Job) run(lo, hi int) {
	if j.tok {
		j.rows(0, j.w.Rows, lo, hi)
	} else {
		j.rows(lo, hi, 0, j.T)
	}
}

var fp8Jobs sync.Pool

func (c *CPU) matMulFP8(y []float32, w *backend.Mat, x []float32, T int) {
	N, K, bk := w.Rows, w.Cols, w.BlockK
	need("MatMul y", len(y), T*N)
	need("MatMul x", len(x), T*K)
	G := canon.FP8Groups(K, bk)
	need("MatMul scales", len(w.Scale), canon.FP8Groups(N, w.BlockN)*G)
	a := fp8Acts.Get().(*fp8Act)
	defer fp8Acts.Put(a)
	a.vec = canon.HasVectorKernels()
	a.q, a.s, a.finite = grow(a.q, T*K), grow(a.s, T*G), grow(a.finite, T)
	if a.vec {
		a.xw = grow(a.xw, T*K)
	} else {
		a.xi, a.x4 = grow(a.xi, T*K), grow(a.x4, T/4*4*K)
	}
	q := func(t int) []byte { return a.q[t*K : (t+1)*K] }
	for t := range T {
		a.finite[t] = canon.QuantizeFP8(q(t), a.s[t*G:(t+1)*G], x[t*K:(t+1)*K], bk)
		if a.vec {
			canon.FP8Wide(a.xw[t*K:(t+1)*K], q(t))
		} else {
			canon.FP8Ints(a.xi[t*K:(t+1)*K], q(t))
		}
	}
	for t := 0; !a.vec && t+4 <= T; t += 4 {
		canon.FP8Ints4(a.x4[t*K:(t+4)*K], q(t), q(t+1), q(t+2), q(t+3))
	}
	if T == 1 || N >= 2*c.threads {
		exec(c, &fp8Jobs, N, T*K, fp8Job{y: y, a: a, w: w, T: T})
	} else {
		exec(c, &fp8Jobs, T, N*K, fp8Job{y: y, a: a, w: w, T: T, tok: true})
	}
}

// fp8TokenBlock is how many tokens' activations a run of weight rows is
// multiplied with before moving on to the next tokens: a run of weight rows
// stays in the cache while it is reused (the bits do not depend on it).
const fp8TokenBlock = 16

// fp8RowBlock is the number of weight rows in such a run.
const fp8RowBlock = 8

// rows computes outputs for weight rows [n0, n1) and tokens [t0, t1). Each
// output element is canon.DotFP8 (DotFP8x4, DotFP8W and DotFP8x4W give the
// same bits), or NaN for a row whose activations were not finite.
func (j *fp8Job) rows(n0, n1, t0, t1 int) {
	w, a, y := j.w, j.a, j.y
	N, K, bk := w.Rows, w.Cols, w.BlockK
	G := canon.FP8Groups(K, bk)
	xi := func(t int) []int32 { return a.xi[t*K : (t+1)*K] }
	s := func(t int) []float32 { return a.s[t*G : (t+1)*G] }
	nan := float32(math.NaN())
	if a.vec {
		j.rowsW(n0, n1, t0, t1)
		return
	}
	for nb := n0; nb < n1; nb += fp8RowBlock {
		ne := min(nb+fp8RowBlock, n1)
		for tb := t0; tb < t1; tb += fp8TokenBlock {
			te := min(tb+fp8TokenBlock, t1)
			for n := nb; n < ne; n++ {
				row := w.F8[n*K : (n+1)*K]
				ws := w.Scale[(n/w.BlockN)*G : (n/w.BlockN+1)*G]
				for t := tb; t < te; {
					switch {
					case t%4 != 0 || t+4 > te:
						y[t*N+n] = canon.DotFP8(row, ws, xi(t), s(t), bk)
						t++
					default:
						y[t*N+n], y[(t+1)*N+n], y[(t+2)*N+n], y[(t+3)*N+n] = canon.DotFP8x4(row, ws,
							a.x4[t*K:(t+4)*K], s(t), s(t+1), s(t+2), s(t+3), bk)
						t += 4
					}
				}
				for t := tb; t < te; t++ {
					if !a.finite[t] {
						y[t*N+n] = nan
					}
				}
			}
		}
	}
}

// fp8WTokenBlock and fp8WRowBlock are the tiles of rowsW: the float64
// activations of a token block (8 bytes a value) stay in the cache while
// the weight rows pass, and four of them are reused by a block of rows.
const (
	fp8WTokenBlock = 8
	fp8WRowBlock   = 64
)

// rowsW is rows with canon.DotFP8x4W and DotFP8W (the vector kernels).
func (j *fp8Job) rowsW(n0, n1, t0, t1 int) {
	w, a, y := j.w, j.a, j.y
	N, K, bk := w.Rows, w.Cols, w.BlockK
	G := canon.FP8Groups(K, bk)
	xw := func(t int) []float64 { return a.xw[t*K : (t+1)*K] }
	s := func(t int) []float32 { return a.s[t*G : (t+1)*G] }
	row := func(n int) []byte { return w.F8[n*K : (n+1)*K] }
	ws := func(n int) []float32 { return w.Scale[(n/w.BlockN)*G : (n/w.BlockN+1)*G] }
	nan := float32(math.NaN())
	for tb := t0; tb < t1; tb += fp8WTokenBlock {
		te := min(tb+fp8WTokenBlock, t1)
		for nb := n0; nb < n1; nb += fp8WRowBlock {
			ne := min(nb+fp8WRowBlock, n1)
			t := tb
			for ; t+4 <= te; t += 4 {
				x0, x1, x2, x3 := xw(t), xw(t+1), xw(t+2), xw(t+3)
				s0, s1, s2, s3 := s(t), s(t+1), s(t+2), s(t+3)
				for n := nb; n < ne; n++ {
					y[t*N+n], y[(t+1)*N+n], y[(t+2)*N+n], y[(t+3)*N+n] = canon.DotFP8x4W(row(n), ws(n), x0, x1, x2, x3, s0, s1, s2, s3, bk)
				}
			}
			for ; t < te; t++ {
				for n := nb; n < ne; n++ {
					y[t*N+n] = canon.DotFP8W(row(n), ws(n), xw(t), s(t), bk)
				}
			}
			for t := tb; t < te; t++ {
				if !a.finite[t] {
					for n := nb; n < ne; n++ {
						y[t*N+n] = nan
					}
				}
			}
		}
	}
}
