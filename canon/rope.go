package canon

import "fmt"

// RopeInvFreq returns the R/2 RoPE inverse frequencies the way torch builds
// them in fp32: e = float32(2j)/float32(R) (rounded), p = θ**e rounded to
// float32, inv[j] = float32(1)/p (rounded). θ**e is pow64 (see math.go);
// torch's fp32 powf can differ by one ulp in rare entries, which is far
// below the conformance tolerance. The table is a pure function of (θ, R).
func RopeInvFreq(theta float64, R int) ([]float32, error) {
	if R <= 0 || R%2 != 0 {
		return nil, fmt.Errorf("rope: rotary dim %d, want a positive even number", R)
	}
	if !(theta > 1) {
		return nil, fmt.Errorf("rope: theta %g, want > 1", theta)
	}
	inv := make([]float32, R/2)
	for j := range inv {
		e := float32(2*j) / float32(R)
		p := float32(pow64(theta, float64(e)))
		inv[j] = 1 / p
	}
	return inv, nil
}

// MaxRopePosition bounds positions so that float32(pos) is exact and the
// angle stays inside sincos64's accurate range.
const MaxRopePosition = 1 << 24

// RopeRow fills cos[j], sin[j] (j < len(inv)) for position pos:
// a = float32(float32(pos)·inv[j]) (one rounding, as torch's fp32 matmul of
// inv_freq by the position), then cos(a) and sin(a) evaluated in float64 by
// sincos64 and rounded once to float32. The GPU receives these values as a
// table; it never evaluates cos/sin itself.
func RopeRow(inv []float32, pos int, cos, sin []float32) {
	if pos < 0 || pos >= MaxRopePosition {
		panic(fmt.Sprintf("canon: rope position %d outside [0, %d)", pos, MaxRopePosition))
	}
	p := float32(pos)
	cos, sin = cos[:len(inv)], sin[:len(inv)]
	for j, f := range inv {
		a := float32(p * f)
		s, c := sincos64(float64(a))
		cos[j], sin[j] = float32(c), float32(s)
	}
}

// RopeTable returns the cos and sin tables for positions [0, n), row-major
// [n][len(inv)]: the table a GPU backend uploads.
func RopeTable(inv []float32, n int) (cos, sin []float32) {
	h := len(inv)
	cos, sin = make([]float32, n*h), make([]float32, n*h)
	for p := 0; p < n; p++ {
		RopeRow(inv, p, cos[p*h:(p+1)*h], sin[p*h:(p+1)*h])
	}
	return cos, sin
}

// Rotate applies half-split ("NeoX") RoPE in place to the first 2·len(cos)
// entries of one head vector x (the rest pass through): with h = len(cos),
// for i < h
//
//	x[i]   ← float32(x[i]·c) + float32(−x[i+h]·s)
//	x[i+h] ← float32(x[i+h]·c) + float32(x[i]·s)
//
// with c = cos[i], s = sin[i] and the old x values on the right; each
// product and the sum rounded to float32 (torch: q·cos + rotate_half(q)·sin).
func Rotate(x, cos, sin []float32) {
	h := len(cos)
	lo, hi := x[:h:h], x[h:2*h:2*h]
	sin = sin[:h]
	for i, c := range cos {
		s := sin[i]
		a, b := lo[i], hi[i]
		lo[i] = float32(a*c) + float32(-b*s)
		hi[i] = float32(b*c) + float32(a*s)
	}
}
