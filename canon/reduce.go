package canon

import "math"

// The canonical reduction splits a sum over n terms into Lanes lanes of
// Chunk contiguous terms each: term k belongs to lane (k/Chunk) mod Lanes.
// On a GPU that is one warp, each lane loading 8 BF16 weights (16 bytes) at
// a time.
const (
	Lanes  = 32
	Chunk  = 8
	Stride = Lanes * Chunk // terms consumed by one round over all lanes
)

// Lane is the lane that term k of a reduction belongs to.
func Lane(k int) int { return (k / Chunk) % Lanes }

// Combine folds the 32 lane totals into one with the xor butterfly that
// __shfl_xor_sync produces for offsets 16, 8, 4, 2, 1: at offset o, lane i
// (i < o) becomes v[i] + v[i+o]. (IEEE addition is commutative, so on a GPU
// every lane ends with lane 0's value.) v is clobbered.
func Combine(v *[Lanes]float32) float32 {
	for o := Lanes / 2; o >= 1; o >>= 1 {
		for i := 0; i < o; i++ {
			v[i] = v[i] + v[i+o]
		}
	}
	return v[0]
}

// LanesUsed is the number of lanes that receive terms in a reduction of n
// terms: min(32, ceil(n/8)).
func LanesUsed(n int) int { return min(Lanes, (n+Chunk-1)/Chunk) }

// CombineN is Combine for a reduction whose lanes nl and above received no
// term (they hold +0). It skips the butterfly steps that only add +0 and is
// bit-identical to Combine: a lane total that starts at +0 is never −0 in
// round-to-nearest (an exact-zero sum is +0 unless both addends are −0), and
// v + (+0) = v for every v other than −0.
func CombineN(v *[Lanes]float32, nl int) float32 {
	o := Lanes / 2
	for o >= nl && o >= 1 {
		o >>= 1
	}
	for ; o >= 1; o >>= 1 {
		for i := 0; i < o; i++ {
			v[i] = v[i] + v[i+o]
		}
	}
	return v[0]
}

// Sum is the canonical sum of x: lane partial sums in increasing index order
// starting from +0, then Combine. This is the reference definition; backends
// use faster loops with the same order.
func Sum(x []float32) float32 {
	var acc [Lanes]float32
	for k, v := range x {
		l := Lane(k)
		acc[l] = acc[l] + v
	}
	return Combine(&acc)
}

// Dot is the canonical dot product: Sum of the rounded products
// float32(w[k]*x[k]). len(w) must be at least len(x).
func Dot(w, x []float32) float32 {
	var acc [Lanes]float32
	w = w[:len(x)]
	for k := range x {
		l := Lane(k)
		acc[l] = acc[l] + float32(w[k]*x[k])
	}
	return Combine(&acc)
}

// BF16 widens a bfloat16 bit pattern to float32 (exact).
func BF16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// DotBF16 is Dot with BF16 weights, in a fast loop with the canonical order.
func DotBF16(w []uint16, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var acc [Lanes]float32
	k := 0
	for ; k+Stride <= n; k += Stride {
		for l := 0; l < Lanes; l++ {
			b := k + l*Chunk
			ww := w[b : b+Chunk : b+Chunk]
			xx := x[b : b+Chunk : b+Chunk]
			a := acc[l]
			a = a + float32(BF16(ww[0])*xx[0])
			a = a + float32(BF16(ww[1])*xx[1])
			a = a + float32(BF16(ww[2])*xx[2])
			a = a + float32(BF16(ww[3])*xx[3])
			a = a + float32(BF16(ww[4])*xx[4])
			a = a + float32(BF16(ww[5])*xx[5])
			a = a + float32(BF16(ww[6])*xx[6])
			a = a + float32(BF16(ww[7])*xx[7])
			acc[l] = a
		}
	}
	tailBF16(&acc, w, x, k)
	return CombineN(&acc, LanesUsed(n))
}

// tailBF16 adds the last, partial round of DotBF16, which starts at term k
// (a multiple of Stride): whole chunks, then the final partial chunk.
func tailBF16(acc *[Lanes]float32, w []uint16, x []float32, k int) {
	n := len(x)
	l := 0
	for ; k+Chunk <= n; k, l = k+Chunk, l+1 {
		ww := w[k : k+Chunk : k+Chunk]
		xx := x[k : k+Chunk : k+Chunk]
		a := acc[l]
		a = a + float32(BF16(ww[0])*xx[0])
		a = a + float32(BF16(ww[1])*xx[1])
		a = a + float32(BF16(ww[2])*xx[2])
		a = a + float32(BF16(ww[3])*xx[3])
		a = a + float32(BF16(ww[4])*xx[4])
		a = a + float32(BF16(ww[5])*xx[5])
		a = a + float32(BF16(ww[6])*xx[6])
		a = a + float32(BF16(ww[7])*xx[7])
		acc[l] = a
	}
	if k < n {
		a := acc[l]
		for ; k < n; k++ {
			a = a + float32(BF16(w[k])*x[k])
		}
		acc[l] = a
	}
}

// DotF32 is Dot in a fast loop with the canonical order.
func DotF32(w, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var acc [Lanes]float32
	k := 0
	for ; k+Stride <= n; k += Stride {
		for l := 0; l < Lanes; l++ {
			b := k + l*Chunk
			ww := w[b : b+Chunk : b+Chunk]
			xx := x[b : b+Chunk : b+Chunk]
			a := acc[l]
			a = a + float32(ww[0]*xx[0])
			a = a + float32(ww[1]*xx[1])
			a = a + float32(ww[2]*xx[2])
			a = a + float32(ww[3]*xx[3])
			a = a + float32(ww[4]*xx[4])
			a = a + float32(ww[5]*xx[5])
			a = a + float32(ww[6]*xx[6])
			a = a + float32(ww[7]*xx[7])
			acc[l] = a
		}
	}
	tailF32(&acc, w, x, k)
	return CombineN(&acc, LanesUsed(n))
}

// tailF32 is tailBF16 for DotF32.
func tailF32(acc *[Lanes]float32, w, x []float32, k int) {
	n := len(x)
	l := 0
	for ; k+Chunk <= n; k, l = k+Chunk, l+1 {
		ww := w[k : k+Chunk : k+Chunk]
		xx := x[k : k+Chunk : k+Chunk]
		a := acc[l]
		a = a + float32(ww[0]*xx[0])
		a = a + float32(ww[1]*xx[1])
		a = a + float32(ww[2]*xx[2])
		a = a + float32(ww[3]*xx[3])
		a = a + float32(ww[4]*xx[4])
		a = a + float32(ww[5]*xx[5])
		a = a + float32(ww[6]*xx[6])
		a = a + float32(ww[7]*xx[7])
		acc[l] = a
	}
	if k < n {
		a := acc[l]
		for ; k < n; k++ {
			a = a + float32(w[k]*x[k])
		}
		acc[l] = a
	}
}

// DotF32x4 computes Dot(w, x0..x3) for four vectors at once (sharing the
// loads of w); each result has exactly the canonical order of DotF32.
func DotF32x4(w, x0, x1, x2, x3 []float32) (r0, r1, r2, r3 float32) {
	n := len(x0)
	w, x1, x2, x3 = w[:n], x1[:n], x2[:n], x3[:n]
	var c0, c1, c2, c3 [Lanes]float32
	l := 0
	for k := 0; k < n; {
		e := min(k+Chunk, n)
		a0, a1, a2, a3 := c0[l], c1[l], c2[l], c3[l]
		if e-k == Chunk {
			ww := w[k : k+Chunk : k+Chunk]
			y0, y1, y2, y3 := x0[k:k+Chunk:k+Chunk], x1[k:k+Chunk:k+Chunk], x2[k:k+Chunk:k+Chunk], x3[k:k+Chunk:k+Chunk]
			a0, a1, a2, a3 = a0+float32(ww[0]*y0[0]), a1+float32(ww[0]*y1[0]), a2+float32(ww[0]*y2[0]), a3+float32(ww[0]*y3[0])
			a0, a1, a2, a3 = a0+float32(ww[1]*y0[1]), a1+float32(ww[1]*y1[1]), a2+float32(ww[1]*y2[1]), a3+float32(ww[1]*y3[1])
			a0, a1, a2, a3 = a0+float32(ww[2]*y0[2]), a1+float32(ww[2]*y1[2]), a2+float32(ww[2]*y2[2]), a3+float32(ww[2]*y3[2])
			a0, a1, a2, a3 = a0+float32(ww[3]*y0[3]), a1+float32(ww[3]*y1[3]), a2+float32(ww[3]*y2[3]), a3+float32(ww[3]*y3[3])
			a0, a1, a2, a3 = a0+float32(ww[4]*y0[4]), a1+float32(ww[4]*y1[4]), a2+float32(ww[4]*y2[4]), a3+float32(ww[4]*y3[4])
			a0, a1, a2, a3 = a0+float32(ww[5]*y0[5]), a1+float32(ww[5]*y1[5]), a2+float32(ww[5]*y2[5]), a3+float32(ww[5]*y3[5])
			a0, a1, a2, a3 = a0+float32(ww[6]*y0[6]), a1+float32(ww[6]*y1[6]), a2+float32(ww[6]*y2[6]), a3+float32(ww[6]*y3[6])
			a0, a1, a2, a3 = a0+float32(ww[7]*y0[7]), a1+float32(ww[7]*y1[7]), a2+float32(ww[7]*y2[7]), a3+float32(ww[7]*y3[7])
		} else {
			for i := k; i < e; i++ {
				a0, a1, a2, a3 = a0+float32(w[i]*x0[i]), a1+float32(w[i]*x1[i]), a2+float32(w[i]*x2[i]), a3+float32(w[i]*x3[i])
			}
		}
		c0[l], c1[l], c2[l], c3[l] = a0, a1, a2, a3
		k = e
		if l++; l == Lanes {
			l = 0
		}
	}
	nl := LanesUsed(n)
	return CombineN(&c0, nl), CombineN(&c1, nl), CombineN(&c2, nl), CombineN(&c3, nl)
}

// SumSquares is the canonical sum of float32(x[k]*x[k]).
func SumSquares(x []float32) float32 { return DotF32(x, x) }

// Sqrt is the correctly rounded float32 square root (computing the float64
// square root and rounding it to float32 is correctly rounded: 53 >= 2·24+2).
func Sqrt(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// Rsqrt is 1/Sqrt(x) with both operations correctly rounded (not a
// reciprocal-square-root approximation).
func Rsqrt(x float32) float32 { return 1 / Sqrt(x) }
