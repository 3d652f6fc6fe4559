package canon

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// This file checks every reduction kernel against the order EXACTNESS.md
// documents, written out again here from the text and sharing no code with
// the package:
//
//   - term k goes to lane (k/8) mod 32;
//   - each lane adds its terms in increasing k, starting from +0;
//   - the 32 lane totals are combined by the xor butterfly of
//     __shfl_xor_sync with offsets 16, 8, 4, 2, 1; the result is lane 0.

// warpSum executes the documented order the way a warp does: every one of
// the 32 lanes holds a total, and at each butterfly offset o every lane i
// adds the total of lane i^o. IEEE addition is commutative, so all lanes
// must end with the same value; it panics otherwise.
func warpSum(terms []float32) float32 {
	var lane [32]float32 // +0
	for k, v := range terms {
		l := (k / 8) % 32
		lane[l] = lane[l] + v
	}
	for _, o := range []int{16, 8, 4, 2, 1} {
		var next [32]float32
		for i := range next {
			next[i] = lane[i] + lane[i^o]
		}
		lane = next
	}
	for i := range lane {
		if math.Float32bits(lane[i]) != math.Float32bits(lane[0]) && lane[i] == lane[i] {
			panic("warp lanes disagree")
		}
	}
	return lane[0]
}

// products returns the rounded products float32(w[k]*x[k]).
func products(w, x []float32) []float32 {
	p := make([]float32, len(x))
	for k := range p {
		p[k] = float32(w[k] * x[k])
	}
	return p
}

// normalVec returns n finite values drawn from the standard normal
// distribution.
func normalVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// Data shapes. On products of similar magnitude most changes of order
// change the rounded sum, but a change inside one lane is often hidden by
// the rounding of the butterfly, which adds larger totals. So the inputs
// also come with every lane but one zeroed: the butterfly then adds only
// exact zeros and the result is that lane's total.
const (
	allLanes = iota // every term normally distributed
	tailLane        // only the lane of the last term (the partial round and chunk)
	oneLane         // only one lane, chosen at random
	shapes
)

// orderVec returns the x of a reduction of n terms in the given shape
// (zeroed terms are +0, so their products are ±0).
func orderVec(r *rand.Rand, n, shape int) []float32 {
	x := normalVec(r, n)
	if n == 0 || shape == allLanes {
		return x
	}
	keep := ((n - 1) / 8) % 32
	if shape == oneLane {
		keep = r.IntN(min(32, (n+7)/8))
	}
	for k := range x {
		if (k/8)%32 != keep {
			x[k] = 0
		}
	}
	return x
}

// widen is the documented BF16 widening, bits << 16.
func widen(w []uint16) []float32 {
	f := make([]float32, len(w))
	for i, u := range w {
		f[i] = math.Float32frombits(uint32(u) << 16)
	}
	return f
}

// nan32 fills the parts of the interleaved buffers that Interleave must not
// touch and the kernels must not read: a kernel that reads them returns NaN.
var nan32 = math.Float32frombits(0x7fc00001)

func poisoned(n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = nan32
	}
	return b
}

// orderLengths are the reduction lengths TestReductionOrder covers: every
// length up to four full rounds and a partial one, and long ones.
func orderLengths() []int {
	var ns []int
	for n := 0; n <= 1100; n++ {
		ns = append(ns, n)
	}
	return append(ns, 2047, 2048, 3072, 4096+7, 8192+255, 12345)
}

// TestReductionOrder: every kernel entry point gives the bits of warpSum
// over its rounded products, for every length in orderLengths and every
// data shape (four vectors each). The *X and *T kernels run on whatever
// this build has (AVX2 lane-major assembly or the scalar loops; CI runs
// both builds).
func TestReductionOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const tokens = 4 // DotBF16T and DotF32X reuse one interleaved row for several tokens
	checked, wrong := 0, map[string]int{}
	for _, n := range orderLengths() {
		for shape := range shapes {
			wb := make([]uint16, n)
			for i, v := range normalVec(r, n) {
				wb[i] = bf16Round(v)
			}
			wf := widen(wb)
			xs := make([][]float32, tokens)
			want := make([]float32, tokens)
			for i := range xs {
				xs[i] = orderVec(r, n, shape)
				want[i] = warpSum(products(wf, xs[i]))
			}
			check := func(name string, tok int, got float32) {
				t.Helper()
				checked++
				if math.Float32bits(got) != math.Float32bits(want[tok]) {
					if wrong[name]++; wrong[name] <= 3 {
						t.Errorf("n=%d shape %d token %d: %s = %g (%08x), documented order gives %g (%08x)",
							n, shape, tok, name, got, math.Float32bits(got), want[tok], math.Float32bits(want[tok]))
					}
				}
			}
			// The layout: dst[r*256 + g*64 + j*8 + i] = x[r*256 + (8g+i)*8 + j].
			m := (n / 256) * 256
			wT := poisoned(n)
			if got := InterleaveBF16(wT, wb); got != m {
				t.Fatalf("n=%d: InterleaveBF16 wrote %d terms, want %d", n, got, m)
			}
			xT := make([][]float32, tokens)
			for i := range xT {
				xT[i] = poisoned(n)
				if got := Interleave(xT[i], xs[i]); got != m {
					t.Fatalf("n=%d: Interleave wrote %d terms, want %d", n, got, m)
				}
			}
			for rd := 0; rd < m; rd += 256 {
				for g := 0; g < 4; g++ {
					for j := 0; j < 8; j++ {
						for i := 0; i < 8; i++ {
							d, s := rd+g*64+j*8+i, rd+(8*g+i)*8+j
							if math.Float32bits(xT[0][d]) != math.Float32bits(xs[0][s]) || math.Float32bits(wT[d]) != math.Float32bits(wf[s]) {
								t.Fatalf("n=%d: interleaved[%d] is not term %d", n, d, s)
							}
						}
					}
				}
			}
			wfT := poisoned(n)
			Interleave(wfT, wf)

			for tok, x := range xs {
				if tok == 0 {
					check("Sum(products)", 0, Sum(products(wf, x)))
					check("Dot", 0, Dot(wf, x))
				}
				check("DotF32", tok, DotF32(wf, x))
				check("DotBF16", tok, DotBF16(wb, x))
				check("DotBF16X", tok, DotBF16X(wb, x, xT[tok]))
				check("DotBF16T", tok, DotBF16T(wb, x, wT, xT[tok]))
				check("DotF32X", tok, DotF32X(wf, x, wfT, xT[tok]))
			}
			r0, r1, r2, r3 := DotF32x4(wf, xs[0], xs[1], xs[2], xs[3])
			for tok, got := range []float32{r0, r1, r2, r3} {
				check(fmt.Sprintf("DotF32x4[%d]", tok), tok, got)
			}
			want[0], want[1] = warpSum(products(xs[0], xs[0])), warpSum(xs[1])
			check("SumSquares", 0, SumSquares(xs[0]))
			check("Sum", 1, Sum(xs[1]))
		}
	}
	for name, c := range wrong {
		t.Errorf("%s: %d results differ from the documented order", name, c)
	}
	t.Logf("%d results compared with the documented order (vector kernels: %v)", checked, HasVectorKernels())
}

// TestReductionOrderBatched: the kernels for a weight row times several
// tokens and for tiles of rows times tokens (DotsBF16X, DotsBF16T,
// DotsF32X) give, for every output, the bits of warpSum over its rounded
// products, for every length in orderLengths and every data shape: every
// tile size up to 3 rows by 4 tokens alone, and 5 rows by 9 tokens (whole
// tiles and remainders), both output layouts (row-major and token-major).
// Outputs start as NaN, so one left unwritten fails.
func TestReductionOrderBatched(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, tokens = 5, 9
	checked, wrong := 0, map[string]int{}
	for _, n := range orderLengths() {
		if n == 0 {
			continue // DotsBF16T needs n > 0; DotBF16X of no terms is in TestReductionOrder
		}
		for shape := range shapes {
			wb := make([]uint16, rows*n)
			for i, v := range normalVec(r, rows*n) {
				wb[i] = bf16Round(v)
			}
			wf := widen(wb)
			x := make([]float32, tokens*n)
			for tok := range tokens {
				copy(x[tok*n:], orderVec(r, n, shape))
			}
			var want [rows][tokens]float32
			for i := range rows {
				for j := range tokens {
					want[i][j] = warpSum(products(wf[i*n:(i+1)*n], x[j*n:(j+1)*n]))
				}
			}
			m := (n / 256) * 256
			wT, wfT, xT := poisoned(rows*n), poisoned(rows*n), poisoned(tokens*n)
			for i := range rows {
				InterleaveBF16(wT[i*n:], wb[i*n:(i+1)*n])
				Interleave(wfT[i*n:], wf[i*n:(i+1)*n])
			}
			for j := range tokens {
				Interleave(xT[j*n:], x[j*n:(j+1)*n])
			}
			for i := 0; i < rows*n; i++ {
				if i%n >= m && (!math.IsNaN(float64(wT[i])) || !math.IsNaN(float64(wfT[i]))) {
					t.Fatalf("n=%d: an interleave wrote term %d of row %d, past its full rounds", n, i%n, i/n)
				}
			}
			check := func(name string, y []float32, yr, yt, R, T int) {
				t.Helper()
				for i := range R {
					for j := range T {
						checked++
						got := y[i*yr+j*yt]
						if math.Float32bits(got) != math.Float32bits(want[i][j]) {
							if wrong[name]++; wrong[name] <= 3 {
								t.Errorf("n=%d shape %d row %d token %d: %s = %g (%08x), documented order gives %g (%08x)",
									n, shape, i, j, name, got, math.Float32bits(got), want[i][j], math.Float32bits(want[i][j]))
							}
						}
					}
				}
			}
			for i, T := range []int{9, 2, 3, 6, 7} {
				y := poisoned(T)
				DotsBF16X(y, 1, wb[i*n:(i+1)*n], x[:T*n], xT, T)
				// row i alone: shift want so that row 0 of the check is row i
				for j := range T {
					checked++
					if math.Float32bits(y[j]) != math.Float32bits(want[i][j]) {
						if wrong["DotsBF16X"]++; wrong["DotsBF16X"] <= 3 {
							t.Errorf("n=%d shape %d row %d token %d of %d: DotsBF16X = %g (%08x), documented order gives %g (%08x)",
								n, shape, i, j, T, y[j], math.Float32bits(y[j]), want[i][j], math.Float32bits(want[i][j]))
						}
					}
				}
			}
			for R := 1; R <= 3; R++ {
				for T := 1; T <= 4; T++ {
					name := fmt.Sprintf("%dx%d", R, T)
					y := poisoned(R * T)
					DotsBF16T(y, T, 1, wb[:R*n], wT, x[:T*n], xT, n)
					check("DotsBF16T "+name, y, T, 1, R, T)
					y = poisoned(R * T)
					DotsF32X(y, T, 1, wf[:R*n], wfT, x[:T*n], xT, n)
					check("DotsF32X "+name, y, T, 1, R, T)
				}
			}
			y := poisoned(rows * tokens)
			DotsBF16T(y, 1, rows, wb, wT, x, xT, n)
			check("DotsBF16T 5x9", y, 1, rows, rows, tokens)
			y = poisoned(rows * tokens)
			DotsF32X(y, 1, rows, wf, wfT, x, xT, n)
			check("DotsF32X 5x9", y, 1, rows, rows, tokens)
		}
	}
	for name, c := range wrong {
		t.Errorf("%s: %d results differ from the documented order", name, c)
	}
	t.Logf("%d results compared with the documented order (vector kernels: %v)", checked, HasVectorKernels())
}

// mutantSums are plausible wrong orders: a kernel with any of these bugs
// must fail TestReductionOrder, so the data must tell each from the
// documented order.
var mutantSums = []struct {
	name    string
	applies func(n int) bool // whether the mutant order differs from the documented one for n terms
	sum     func(terms []float32) float32
}{
	{"every lane in decreasing k", atLeast(2), func(terms []float32) float32 {
		var lane [32]float32
		for k := len(terms) - 1; k >= 0; k-- {
			lane[(k/8)%32] += terms[k]
		}
		return butterfly(lane)
	}},
	{"the last lane touched in decreasing k", atLeast(2), func(terms []float32) float32 {
		var lane [32]float32
		last := ((len(terms) - 1) / 8) % 32
		for k, v := range terms {
			if (k/8)%32 != last {
				lane[(k/8)%32] += v
			}
		}
		for k := len(terms) - 1; k >= 0; k-- {
			if (k/8)%32 == last {
				lane[last] += terms[k]
			}
		}
		return butterfly(lane)
	}},
	{"the final partial chunk in decreasing k", func(n int) bool {
		// Reversing two terms that a lane adds to its initial +0 changes nothing.
		return n%8 >= 3 || n%8 == 2 && n > Stride
	}, func(terms []float32) float32 {
		n := len(terms)
		c := n - n%8
		var lane [32]float32
		for k := 0; k < c; k++ {
			lane[(k/8)%32] += terms[k]
		}
		for k := n - 1; k >= c; k-- {
			lane[(k/8)%32] += terms[k]
		}
		return butterfly(lane)
	}},
	{"terms 2 and 3 of each lane's last full chunk swapped", atLeast(8), func(terms []float32) float32 {
		n := len(terms)
		var lane [32]float32
		for k := 0; k < n; k++ {
			i := k
			if c := k / 8; k%8/2 == 1 && (c+1)*8 <= n && (c+32+1)*8 > n {
				i = k ^ 1
			}
			lane[(k/8)%32] += terms[i]
		}
		return butterfly(lane)
	}},
	{"butterfly offsets 1, 2, 4, 8, 16", atLeast(17), func(terms []float32) float32 {
		var lane [32]float32
		for k, v := range terms {
			lane[(k/8)%32] += v
		}
		for o := 1; o <= 16; o *= 2 {
			var next [32]float32
			for i := range next {
				next[i] = lane[i] + lane[i^o]
			}
			lane = next
		}
		return lane[0]
	}},
	{"lane (k/4) mod 64", atLeast(5), func(terms []float32) float32 {
		var lane [64]float32
		for k, v := range terms {
			lane[(k/4)%64] += v
		}
		for o := 32; o >= 1; o /= 2 {
			for i := 0; i < o; i++ {
				lane[i] += lane[i+o]
			}
		}
		return lane[0]
	}},
	{"sequential", atLeast(9), func(terms []float32) float32 {
		var s float32
		for _, v := range terms {
			s += v
		}
		return s
	}},
}

func atLeast(m int) func(int) bool { return func(n int) bool { return n >= m } }

func butterfly(lane [32]float32) float32 {
	for o := 16; o >= 1; o /= 2 {
		for i := 0; i < o; i++ {
			lane[i] += lane[i+o]
		}
	}
	return lane[0]
}

// TestOrderIsObservable shows that TestReductionOrder's data has teeth: for
// each wrong order in mutantSums, on the same kind of products, the result
// differs from the documented order, in at least one of the data shapes,
// for most lengths where the orders differ. (A kernel with a wrong order
// passes a test on data where the order does not show: the earlier version
// of this test, on values with many infinities, missed a reversed tail and
// two swapped VADDPS.)
func TestOrderIsObservable(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	type count struct{ diff, total int }
	counts := make([]count, len(mutantSums))
	for _, n := range orderLengths() {
		var p [shapes][]float32
		var want [shapes]float32
		for shape := range shapes {
			wb := make([]uint16, n)
			for i, v := range normalVec(r, n) {
				wb[i] = bf16Round(v)
			}
			p[shape] = products(widen(wb), orderVec(r, n, shape))
			want[shape] = warpSum(p[shape])
		}
		for i, m := range mutantSums {
			if !m.applies(n) {
				continue
			}
			counts[i].total++
			for shape := range shapes {
				if math.Float32bits(m.sum(p[shape])) != math.Float32bits(want[shape]) {
					counts[i].diff++
					break
				}
			}
		}
	}
	for i, m := range mutantSums {
		c := counts[i]
		t.Logf("%s: differs at %d of %d lengths", m.name, c.diff, c.total)
		if c.diff*2 < c.total {
			t.Errorf("%s: differs from the documented order at only %d of %d lengths", m.name, c.diff, c.total)
		}
	}
}

// kernelResults runs every kernel entry point on BF16 weights wb and x
// (DotF32x4 with x in each of its four slots).
func kernelResults(r *rand.Rand, wb []uint16, x []float32) map[string]float32 {
	n := len(x)
	wf := widen(wb)
	xT, wT, wfT := poisoned(n), poisoned(n), poisoned(n)
	Interleave(xT, x)
	InterleaveBF16(wT, wb)
	Interleave(wfT, wf)
	res := map[string]float32{
		"Sum(products)": Sum(products(wf, x)),
		"Dot":           Dot(wf, x),
		"DotF32":        DotF32(wf, x),
		"DotBF16":       DotBF16(wb, x),
		"DotBF16X":      DotBF16X(wb, x, xT),
		"DotBF16T":      DotBF16T(wb, x, wT, xT),
		"DotF32X":       DotF32X(wf, x, wfT, xT),
	}
	// The batched kernels, with w and x in the last row and token of
	// every tile size, beside random rows and tokens.
	if n > 0 {
		others := func(k int) ([]uint16, []float32) {
			wk := make([]uint16, k*n)
			for i, v := range normalVec(r, k*n) {
				wk[i] = bf16Round(v)
			}
			return wk, normalVec(r, k*n)
		}
		for _, T := range []int{1, 2, 3, 4, 9} {
			_, xs := others(T)
			copy(xs[(T-1)*n:], x)
			xsT := poisoned(T * n)
			for j := range T {
				Interleave(xsT[j*n:], xs[j*n:(j+1)*n])
			}
			y := make([]float32, T)
			DotsBF16X(y, 1, wb, xs, xsT, T)
			res[fmt.Sprintf("DotsBF16X[%d of %d]", T-1, T)] = y[T-1]
		}
		for R := 1; R <= 3; R++ {
			for T := 1; T <= 4; T++ {
				ws, xs := others(max(R, T))
				copy(ws[(R-1)*n:], wb)
				copy(xs[(T-1)*n:], x)
				ws, xs = ws[:R*n], xs[:T*n]
				wsf := widen(ws)
				wsT, wsfT, xsT := poisoned(R*n), poisoned(R*n), poisoned(T*n)
				for i := range R {
					InterleaveBF16(wsT[i*n:], ws[i*n:(i+1)*n])
					Interleave(wsfT[i*n:], wsf[i*n:(i+1)*n])
				}
				for j := range T {
					Interleave(xsT[j*n:], xs[j*n:(j+1)*n])
				}
				y := make([]float32, R*T)
				DotsBF16T(y, T, 1, ws, wsT, xs, xsT, n)
				res[fmt.Sprintf("DotsBF16T[%dx%d]", R, T)] = y[R*T-1]
				DotsF32X(y, T, 1, wsf, wsfT, xs, xsT, n)
				res[fmt.Sprintf("DotsF32X[%dx%d]", R, T)] = y[R*T-1]
			}
		}
	}
	for slot := range 4 {
		var xs [4][]float32
		for i := range xs {
			xs[i] = normalVec(r, n)
		}
		xs[slot] = x
		var out [4]float32
		out[0], out[1], out[2], out[3] = DotF32x4(wf, xs[0], xs[1], xs[2], xs[3])
		res[fmt.Sprintf("DotF32x4[%d]", slot)] = out[slot]
	}
	return res
}

// bf16 bit patterns used by TestReductionSpecialValues.
const (
	bfOne    = 0x3f80 // 1
	bfPosInf = 0x7f80
	bfNegInf = 0xff80
	bfNaN    = 0x7fc0
	bfNegZ   = 0x8000
	bfTiny   = 0x0001 // 2⁻¹³³, a float32 subnormal
	bf2p64   = 0x5f80 // 2⁶⁴
)

// TestReductionSpecialValues pins what every kernel does with non-finite,
// signed-zero and subnormal terms, for lengths in every part of a round:
//
//   - no terms, or only ±0 terms: +0 (lanes start at +0 and +0 + −0 = +0),
//     even when every term is −0;
//   - a NaN term, a NaN product (∞·0) or both +∞ and −∞ terms: NaN;
//   - otherwise an infinite term gives that infinity;
//   - subnormal weights, inputs and products are kept, never flushed: the
//     sum of n products 2⁻¹³³·2⁻¹⁰ is exactly n·2⁻¹⁴³;
//   - an overflow follows the documented order: 2¹²⁷ + 2¹²⁷ − 2¹²⁷ is +∞ in
//     one lane but 2¹²⁷ when the three terms sit in lanes 0, 1, 2 (the
//     butterfly adds lanes 0 and 2 first).
func TestReductionSpecialValues(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	negZero := float32(math.Copysign(0, -1))
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	type want struct {
		bits uint32 // exact result, unless isNaN
		nan  bool
	}
	exact := func(f float32) want { return want{bits: math.Float32bits(f)} }
	run := func(what string, n int, wb []uint16, x []float32, w want) {
		t.Helper()
		for name, got := range kernelResults(r, wb, x) {
			if w.nan && got != got {
				continue
			}
			if w.nan || math.Float32bits(got) != w.bits {
				t.Errorf("%s, n=%d: %s = %g (%08x), want %v", what, n, name, got, math.Float32bits(got), func() any {
					if w.nan {
						return "NaN"
					}
					return fmt.Sprintf("%g (%08x)", math.Float32frombits(w.bits), w.bits)
				}())
			}
		}
	}
	normalBF16 := func(n int) []uint16 {
		wb := make([]uint16, n)
		for i, v := range normalVec(r, n) {
			wb[i] = bf16Round(v)
		}
		return wb
	}
	fill16 := func(n int, u uint16) []uint16 {
		w := make([]uint16, n)
		for i := range w {
			w[i] = u
		}
		return w
	}
	fill32 := func(n int, f float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = f
		}
		return x
	}
	run("no terms", 0, nil, nil, exact(0))
	for _, n := range []int{1, 2, 7, 8, 9, 64, 255, 256, 257, 263, 511, 512, 600, 1100, 4096 + 7} {
		positions := []int{0, n / 2, n - 1}
		run("every product −0", n, fill16(n, bfOne), fill32(n, negZero), exact(0))
		run("every product −0 (weights −0)", n, fill16(n, bfNegZ), fill32(n, 1), exact(0))
		signs := normalVec(r, n)
		zeros := make([]float32, n)
		for i, s := range signs {
			zeros[i] = float32(math.Copysign(0, float64(s)))
		}
		run("products of mixed sign ±0", n, normalBF16(n), zeros, exact(0))
		run("subnormal weights 2⁻¹³³ × 2⁻¹⁰", n, fill16(n, bfTiny), fill32(n, 0x1p-10), exact(float32(math.Ldexp(float64(n), -143))))
		run("subnormal inputs 2⁻¹⁴⁹ × 1", n, fill16(n, bfOne), fill32(n, 0x1p-149), exact(float32(math.Ldexp(float64(n), -149))))
		for _, k := range positions {
			wb, x := normalBF16(n), normalVec(r, n)
			x[k] = nan
			run(fmt.Sprintf("NaN input at %d", k), n, wb, x, want{nan: true})
			wb, x = normalBF16(n), normalVec(r, n)
			wb[k] = bfNaN
			run(fmt.Sprintf("NaN weight at %d", k), n, wb, x, want{nan: true})
			wb, x = normalBF16(n), normalVec(r, n)
			wb[k], x[k] = bfPosInf, 0
			run(fmt.Sprintf("∞·0 at %d", k), n, wb, x, want{nan: true})
			wb, x = normalBF16(n), normalVec(r, n)
			wb[k], x[k] = bfPosInf, 1.5
			run(fmt.Sprintf("+∞ weight at %d", k), n, wb, x, exact(inf))
			wb, x = normalBF16(n), normalVec(r, n)
			wb[k], x[k] = bfNegInf, 1.5
			run(fmt.Sprintf("−∞ weight at %d", k), n, wb, x, exact(-inf))
			wb, x = normalBF16(n), normalVec(r, n)
			wb[k], x[k] = bfOne, -inf
			run(fmt.Sprintf("−∞ input at %d", k), n, wb, x, exact(-inf))
			if n > 1 {
				wb, x = normalBF16(n), normalVec(r, n)
				k2 := (k + n/3 + 1) % n
				wb[k], x[k] = bfPosInf, 1
				wb[k2], x[k2] = bfNegInf, 1
				run(fmt.Sprintf("+∞ at %d and −∞ at %d", k, k2), n, wb, x, want{nan: true})
			}
		}
		// Overflow in one lane: terms 0, 1, 2 (lane 0) are 2¹²⁷, 2¹²⁷, −2¹²⁷.
		if n >= 3 {
			wb, x := fill16(n, bfOne), fill32(n, 0)
			wb[0], wb[1], wb[2] = bf2p64, bf2p64, bf2p64
			x[0], x[1], x[2] = 0x1p63, 0x1p63, -0x1p63
			run("2¹²⁷, 2¹²⁷, −2¹²⁷ in lane 0", n, wb, x, exact(inf))
		}
		// The same terms in lanes 0, 1, 2: (l0 + l2) + l1 = 0 + 2¹²⁷.
		if n >= 17 {
			wb, x := fill16(n, bfOne), fill32(n, 0)
			wb[0], wb[8], wb[16] = bf2p64, bf2p64, bf2p64
			x[0], x[8], x[16] = 0x1p63, 0x1p63, -0x1p63
			run("2¹²⁷, 2¹²⁷, −2¹²⁷ in lanes 0, 1, 2", n, wb, x, exact(0x1p127))
		}
	}
}
