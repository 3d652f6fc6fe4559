package canon

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ExpSum is Sum of the stored terms Exp(x − m), bit for bit, at lengths
// around a chunk and a round of lanes, with ±Inf, ±0 and subnormals among
// the values; Max follows Go's max (NaN wins, +0 above −0).
func TestExpSumAndMax(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 5000)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 8)
	}
	for i, v := range []float32{float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 80, -200} {
		x[100+13*i] = v
	}
	for _, n := range []int{0, 1, 7, 8, 9, 255, 256, 257, 1000, len(x)} {
		for _, m := range []float32{0, 2.5, Max(x[:n])} {
			e := make([]float32, n)
			for i, v := range x[:n] {
				e[i] = Exp(v - m)
			}
			if got, want := ExpSum(x[:n], m), Sum(e); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%d values, m %v: ExpSum %v, Sum of the terms %v", n, m, got, want)
			}
		}
	}
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		x    []float32
		want float32
	}{
		{nil, float32(math.Inf(-1))},
		{[]float32{negZero, 0}, 0}, {[]float32{0, negZero}, 0}, {[]float32{negZero}, negZero},
		{[]float32{1, 3, 2}, 3}, {[]float32{float32(math.Inf(-1)), -5}, -5},
	} {
		if got := Max(c.x); math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("Max(%v) = %v (%#x), want %v", c.x, got, math.Float32bits(got), c.want)
		}
	}
	if m := Max([]float32{1, float32(math.NaN()), 2}); m == m {
		t.Errorf("Max with a NaN: %v, want NaN", m)
	}
}
