package canon

import "math"

// Max is the largest of x by Go's max: a NaN if any value is a NaN, +0
// above −0, −Inf for an empty x. The operation is commutative and
// associative, so a backend may reduce in any order.
func Max(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// ExpSum is Sum of Exp(x[k] − m) over x, with no term stored: each lane
// adds its terms in increasing k as they are computed, which is Sum's
// order. With m = Max(x), Log(ExpSum(x, m)) is a log-softmax's normaliser.
func ExpSum(x []float32, m float32) float32 {
	var acc [Lanes]float32
	ExpSumLanes(x, m, acc[:], 0)
	return Combine(&acc)
}

// ExpSumLanes is ExpSum's lanes l0 … l0+len(acc)−1 alone, acc[i] holding
// lane l0+i's total; the other lanes are left to other calls (goroutines),
// and Combine of all 32 gives ExpSum.
func ExpSumLanes(x []float32, m float32, acc []float32, l0 int) {
	var a [Lanes]float32 // the lanes, written back once
	n := len(acc)
	for s := 0; s < len(x); s += Stride {
		for i := range n {
			lo := s + (l0+i)*Chunk
			if lo >= len(x) {
				break
			}
			hi := min(lo+Chunk, len(x))
			v := a[i]
			for _, l := range x[lo:hi] {
				v = v + Exp(l-m)
			}
			a[i] = v
		}
	}
	copy(acc, a[:n])
}
