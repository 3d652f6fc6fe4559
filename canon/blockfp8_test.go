package canon

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// The reference below is written from the definition in EXACTNESS.md
// ("Block-FP8 linear layers") with exact rationals: every rounding is the
// nearest float32 (or E4M3 value) of an exact value, computed by math/big;
// none of it shares code with blockfp8.go (only DecodeE4M3, whose exactness
// TestDecodeE4M3 pins).

func ratOf(v float32) *big.Rat {
	r, ok := new(big.Rat).SetString(fmt.Sprintf("%b", float64(v))) // m·2^e form: exact
	if !ok {
		panic(v)
	}
	return r
}

// rn is the nearest float32 of r (ties to even, subnormals kept, ±Inf past
// the largest), with the sign neg if it is zero.
func rn(r *big.Rat, neg bool) float32 {
	f, _ := r.Float32()
	if f == 0 && neg {
		return float32(math.Copysign(0, -1))
	}
	return f
}

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// refMul and refAdd are IEEE float32 × and + from exact rationals; with a
// non-finite operand the result is exact IEEE arithmetic anyway.
func refMul(a, b float32) float32 {
	if !finite32(a) || !finite32(b) {
		return a * b
	}
	neg := math.Signbit(float64(a)) != math.Signbit(float64(b))
	return rn(new(big.Rat).Mul(ratOf(a), ratOf(b)), neg)
}

func refAdd(a, b float32) float32 {
	if !finite32(a) || !finite32(b) {
		return a + b
	}
	neg := math.Signbit(float64(a)) && math.Signbit(float64(b))
	return rn(new(big.Rat).Add(ratOf(a), ratOf(b)), neg)
}

// refE4M3 is the E4M3 code nearest to the float32 r (ties to the even
// code), saturating at ±448, found by exact comparison with the ordered
// magnitudes of codes 0x00…0x7E.
func refE4M3(r float32) byte {
	sign := byte(0)
	if math.Signbit(float64(r)) {
		sign = 0x80
	}
	if math.IsInf(float64(r), 0) {
		return sign | 0x7E
	}
	a := ratOf(float32(math.Abs(float64(r))))
	lo := 0 // largest code with value ≤ a
	for c := 1; c <= 0x7E; c++ {
		if ratOf(DecodeE4M3(byte(c))).Cmp(a) <= 0 {
			lo = c
		}
	}
	if lo == 0x7E {
		return sign | 0x7E
	}
	dlo := new(big.Rat).Sub(a, ratOf(DecodeE4M3(byte(lo))))
	dhi := new(big.Rat).Sub(ratOf(DecodeE4M3(byte(lo+1))), a)
	switch c := dlo.Cmp(dhi); {
	case c < 0, c == 0 && lo%2 == 0:
		return sign | byte(lo)
	}
	return sign | byte(lo+1)
}

// refQuantize: s = RN(a/448), q = E4M3(RN(x/s)), q = 0 when s == 0; not
// finite if any x is NaN or ±Inf.
func refQuantize(x []float32, bk int) (q []byte, s []float32, finite bool) {
	K := len(x)
	q = make([]byte, K)
	for g := 0; g*bk < K; g++ {
		xs := x[g*bk : min(K, (g+1)*bk)]
		a := 0.0
		for _, v := range xs {
			if !finite32(v) {
				return nil, nil, false
			}
			a = math.Max(a, math.Abs(float64(v)))
		}
		sg := rn(new(big.Rat).Quo(ratOf(float32(a)), big.NewRat(448, 1)), false)
		s = append(s, sg)
		if sg == 0 {
			continue
		}
		for i, v := range xs {
			r := new(big.Rat).Quo(ratOf(v), ratOf(sg))
			f := rn(r, math.Signbit(float64(v)))
			q[g*bk+i] = refE4M3(f)
		}
	}
	return q, s, true
}

// refDotFP8: per group the exact rational Σ q·w, rounded once to float32 (p),
// then acc = RN(acc + RN(RN(p·s)·sw)) from +0.
func refDotFP8(w []byte, ws []float32, q []byte, s []float32, bk int) float32 {
	var acc float32
	for g := 0; g*bk < len(w); g++ {
		P := new(big.Rat)
		for k := g * bk; k < min(len(w), (g+1)*bk); k++ {
			P.Add(P, new(big.Rat).Mul(ratOf(DecodeE4M3(w[k])), ratOf(DecodeE4M3(q[k]))))
		}
		p := rn(P, false)
		acc = refAdd(acc, refMul(refMul(p, s[g]), ws[g]))
	}
	return acc
}

// fp8Case draws an activation row and weight data mixing the awkward cases.
type fp8Rand struct{ *rand.Rand }

func (r fp8Rand) x(K, bk int) []float32 {
	x := make([]float32, K)
	for g := 0; g*bk < K; g++ {
		k0, k1 := g*bk, min(K, (g+1)*bk)
		e := r.IntN(40) - 20 // the group's scale
		switch r.IntN(10) {
		case 0: // all zero (some −0)
			for k := k0; k < k1; k++ {
				x[k] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
			}
			continue
		case 1: // subnormal amax: s underflows to 0 or is subnormal
			for k := k0; k < k1; k++ {
				x[k] = math.Float32frombits(uint32(r.IntN(1<<(1+r.IntN(23)))) | uint32(r.IntN(2))<<31)
			}
			continue
		case 2:
			e = r.IntN(8) + 118 // up to 2^125 (·a normal draw, below 2^128)
		case 3:
			e = -r.IntN(20) - 120 // near the normal limit
		}
		for k := k0; k < k1; k++ {
			v := float32(math.Max(-7, math.Min(7, r.NormFloat64())) * math.Ldexp(1, e))
			switch r.IntN(16) {
			case 0:
				v = 0
			case 1:
				v = float32(math.Copysign(0, -1))
			case 2:
				v = math.Float32frombits(r.Uint32() & 0x807FFFFF) // subnormal
			}
			x[k] = v
		}
		if r.IntN(4) == 0 { // an exact maximum of either sign
			x[k0+r.IntN(k1-k0)] = float32(math.Copysign(float64(math.MaxFloat32)*math.Ldexp(1, -r.IntN(300)), r.NormFloat64()))
		}
	}
	return x
}

func (r fp8Rand) codes(n int) []byte {
	w := make([]byte, n)
	for i := range w {
		switch r.IntN(8) {
		case 0: // subnormal or zero
			w[i] = byte(r.IntN(8)) | byte(r.IntN(2))<<7
		case 1: // the largest
			w[i] = 0x7E | byte(r.IntN(2))<<7
		default:
			for w[i] = byte(r.Uint32()); E4M3IsNaN(w[i]); w[i] = byte(r.Uint32()) {
			}
		}
	}
	return w
}

func (r fp8Rand) scales(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		switch r.IntN(10) {
		case 0:
			s[i] = math.Float32frombits(r.Uint32() & 0x007FFFFF) // subnormal
		case 1:
			s[i] = float32(r.Float64() * math.Ldexp(1, 100+r.IntN(27)))
		default:
			s[i] = float32(r.Float64() * math.Ldexp(1, -r.IntN(16)))
		}
	}
	return s
}

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

func TestE4M3Int(t *testing.T) {
	for b := range 256 {
		v := DecodeE4M3(byte(b))
		got := E4M3Int(byte(b))
		if v != v {
			if got != 0 || !E4M3IsNaN(byte(b)) {
				t.Errorf("E4M3Int(%#x) = %d, E4M3IsNaN %v; want 0, true", b, got, E4M3IsNaN(byte(b)))
			}
			continue
		}
		if E4M3IsNaN(byte(b)) || float64(got) != float64(v)*512 {
			t.Errorf("E4M3Int(%#x) = %d, want %v·2^9", b, got, v)
		}
	}
	if E4M3Int(0x7E) != 229376 || E4M3Int(0x01) != 1 || E4M3Int(0x81) != -1 {
		t.Error("E4M3Int endpoints")
	}
	if i := FirstNaNE4M3([]byte{0, 0x7E, 0xFE, 0xFF, 0x7F}); i != 3 {
		t.Errorf("FirstNaNE4M3 = %d, want 3", i)
	}
	if i := FirstNaNE4M3([]byte{0, 0x7E, 0x80}); i != -1 {
		t.Errorf("FirstNaNE4M3 = %d, want -1", i)
	}
}

func TestQuantizeFP8(t *testing.T) {
	r := fp8Rand{rand.New(rand.NewPCG(3, 1))}
	// The draws must reach every case of the definition.
	var zeroGroups, underflows, subnormalS, saturated, nonFinite int
	for _, K := range []int{1, 5, 127, 128, 129, 300} {
		for _, bk := range []int{1, 3, 16, 128} {
			for it := range 6 {
				x := r.x(K, bk)
				if it == 5 { // one non-finite value
					x[r.IntN(K)] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[r.IntN(3)]
				}
				q := make([]byte, K)
				s := make([]float32, FP8Groups(K, bk))
				for i := range q {
					q[i], s[i/bk] = 0x55, 7 // must be overwritten
				}
				finite := QuantizeFP8(q, s, x, bk)
				wq, ws, wf := refQuantize(x, bk)
				if finite != wf {
					t.Fatalf("K=%d bk=%d: finite %v, want %v", K, bk, finite, wf)
				}
				if !finite {
					nonFinite++
					for i := range q {
						if q[i] != 0 || s[i/bk] != 0 {
							t.Fatalf("K=%d bk=%d: a non-finite row left q/s set", K, bk)
						}
					}
					continue
				}
				for g := range s {
					xs := x[g*bk : min(K, (g+1)*bk)]
					a := float32(0)
					for k, v := range xs {
						a = max(a, float32(math.Abs(float64(v))))
						if s[g] != 0 && math.Abs(float64(v/s[g])) > 448 && q[g*bk+k]&0x7F == 0x7E {
							saturated++
						}
					}
					switch {
					case a == 0:
						zeroGroups++
					case s[g] == 0:
						underflows++
					case s[g] < 0x1p-126:
						subnormalS++
					}
					if !sameBits(s[g], ws[g]) {
						t.Fatalf("K=%d bk=%d group %d: s = %g (%#x), want %g (%#x)", K, bk, g, s[g], math.Float32bits(s[g]), ws[g], math.Float32bits(ws[g]))
					}
				}
				for k := range q {
					if q[k] != wq[k] {
						t.Fatalf("K=%d bk=%d k=%d: x=%g s=%g: q = %#x, want %#x", K, bk, k, x[k], s[k/bk], q[k], wq[k])
					}
				}
			}
		}
	}
	t.Logf("%d all-zero groups, %d with s underflowing, %d with a subnormal s, %d saturated codes, %d non-finite rows", zeroGroups, underflows, subnormalS, saturated, nonFinite)
	if zeroGroups == 0 || underflows == 0 || subnormalS == 0 || saturated == 0 || nonFinite == 0 {
		t.Error("the draws missed a case")
	}
}

// TestQuantizeFP8Cases pins hand-worked cases of the definition.
func TestQuantizeFP8Cases(t *testing.T) {
	sub := math.Float32frombits(1)           // 2^-149
	sub2 := math.Float32frombits(0x00400000) // 2^-127
	neg0 := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name string
		x    []float32
		q    []byte
		s    float32
	}{
		{"all zero", []float32{0, neg0, 0}, []byte{0, 0, 0}, 0},
		// 2^-149/448 underflows: s = 0, so q = 0 (not ±448 from x/0).
		{"amax underflows", []float32{sub, -sub, 0}, []byte{0, 0, 0}, 0},
		// 2^-127/448 = 2^-135.8: subnormal s = RN(·) = 2^-136·… ; x/s saturates.
		{"subnormal s", []float32{sub2, -sub2 / 2, neg0}, nil, sub2 / 448},
		{"exact", []float32{448, -224, 1, 0.0009765625, neg0}, []byte{0x7E, 0xF6, 0x38, 0x00, 0x80}, 1},
		{"huge", []float32{math.MaxFloat32, -math.MaxFloat32 / 2}, []byte{0x7E, 0xF6}, math.MaxFloat32 / 448},
	} {
		q := make([]byte, len(c.x))
		s := make([]float32, 1)
		if !QuantizeFP8(q, s, c.x, len(c.x)) {
			t.Fatalf("%s: not finite", c.name)
		}
		if s[0] != c.s {
			t.Errorf("%s: s = %g, want %g", c.name, s[0], c.s)
		}
		if c.q == nil { // the subnormal-scale case: whatever RN gives, never NaN
			if q[0] != 0x7E || E4M3IsNaN(q[1]) || q[2] != 0x80 {
				t.Errorf("%s: q = %#x", c.name, q)
			}
			continue
		}
		for i := range q {
			if q[i] != c.q[i] {
				t.Errorf("%s: q = %#x, want %#x", c.name, q, c.q)
				break
			}
		}
	}
}

func TestDotFP8(t *testing.T) {
	r := fp8Rand{rand.New(rand.NewPCG(3, 2))}
	var infinite, subnormal, inexact int
	for _, K := range []int{0, 1, 7, 127, 128, 129, 300, 513} {
		for _, bk := range []int{1, 3, 16, 128} {
			G := FP8Groups(K, bk)
			for range 4 {
				w := r.codes(K)
				ws := r.scales(G)
				var xi [4][]int32
				var ss [4][]float32
				var qs [4][]byte
				for j := range 4 {
					x := r.x(K, bk)
					qs[j] = make([]byte, K)
					ss[j] = make([]float32, G)
					if !QuantizeFP8(qs[j], ss[j], x, bk) {
						t.Fatal("not finite")
					}
					xi[j] = make([]int32, K)
					FP8Ints(xi[j], qs[j])
				}
				x4 := make([]int32, 4*K)
				FP8Ints4(x4, qs[0], qs[1], qs[2], qs[3])
				y0, y1, y2, y3 := DotFP8x4(w, ws, x4, ss[0], ss[1], ss[2], ss[3], bk)
				for j, y4 := range []float32{y0, y1, y2, y3} {
					want := refDotFP8(w, ws, qs[j], ss[j], bk)
					got := DotFP8(w, ws, xi[j], ss[j], bk)
					switch {
					case math.IsInf(float64(want), 0):
						infinite++
					case want != 0 && math.Abs(float64(want)) < 0x1p-126:
						subnormal++
					}
					if !sameBits(got, want) || !sameBits(y4, want) {
						t.Fatalf("K=%d bk=%d row %d: DotFP8 = %g (%#x), DotFP8x4 = %g, want %g (%#x)", K, bk, j, got, math.Float32bits(got), y4, want, math.Float32bits(want))
					}
					if float32Sum(w, qs[j], bk) != float32Exact(w, qs[j], bk) {
						inexact++
					}
				}
			}
		}
	}
	t.Logf("%d infinite and %d subnormal outputs; %d rows where float32 group sums are not exact", infinite, subnormal, inexact)
	if infinite == 0 || subnormal == 0 || inexact == 0 {
		t.Error("the draws missed a case")
	}
}

// float32Sum and float32Exact: whether some group's Σ q·w differs when it
// is summed in float32 (so an implementation that did would be caught).
func float32Sum(w, q []byte, bk int) (h uint64) {
	for g := 0; g*bk < len(w); g++ {
		var a float32
		for k := g * bk; k < min(len(w), (g+1)*bk); k++ {
			a += float32(DecodeE4M3(w[k]) * DecodeE4M3(q[k]))
		}
		h = h*31 + uint64(math.Float32bits(a))
	}
	return h
}

func float32Exact(w, q []byte, bk int) (h uint64) {
	for g := 0; g*bk < len(w); g++ {
		P := new(big.Rat)
		for k := g * bk; k < min(len(w), (g+1)*bk); k++ {
			P.Add(P, new(big.Rat).Mul(ratOf(DecodeE4M3(w[k])), ratOf(DecodeE4M3(q[k]))))
		}
		h = h*31 + uint64(math.Float32bits(rn(P, false)))
	}
	return h
}

// TestDotFP8Cases: the group dot is exact (a sum that float32 arithmetic
// would round), the group order, the scale product order, and +0 start.
func TestDotFP8Cases(t *testing.T) {
	one := []float32{1, 1, 1}
	ints := func(q []byte) []int32 { x := make([]int32, len(q)); FP8Ints(x, q); return x }
	// 448·448 + 2^-9·2^-9 − 448·448: 2^-18 exactly (float32 running sums give 0).
	w := []byte{0x7E, 0x01, 0xFE}
	q := []byte{0x7E, 0x01, 0x7E}
	if got := DotFP8(w, one, ints(q), one, 3); got != 1.0/(1<<18) {
		t.Errorf("exact group dot = %g, want 2^-18", got)
	}
	// All products −0: the result is +0 (the sum starts at +0).
	w = []byte{0x80, 0x80}
	q = []byte{0x00, 0x00}
	if got := DotFP8(w, one, ints(q), one, 1); got != 0 || math.Signbit(float64(got)) {
		t.Errorf("-0 products = %g (sign %v), want +0", got, math.Signbit(float64(got)))
	}
	// Groups are added in order: 2^24, 1, 1 gives 2^24 in order (each 1 is a
	// tie to even), but 2^24+2 if the two ones were added first.
	w = []byte{0x38, 0x38, 0x38}   // 1, 1, 1
	q = []byte{0x38, 0x38, 0x38}   // 1, 1, 1
	ws := []float32{1 << 24, 1, 1} // weight scales per group
	if got := DotFP8(w, ws, ints(q), one, 1); got != 1<<24 {
		t.Errorf("group order: %g, want 2^24", got)
	}
	// (p·s)·S, not p·(s·S): a p, s, S on which the two differ.
	r := rand.New(rand.NewPCG(9, 9))
	for {
		s, S := float32(1+r.Float64()), float32(1+r.Float64())
		p := float32(3) // q = w = 0x38·… : P = 3·2^18 with three ones
		a, b := float32(float32(p*s)*S), float32(p*float32(s*S))
		if a == b {
			continue
		}
		got := DotFP8([]byte{0x38, 0x38, 0x38}, []float32{S}, ints([]byte{0x38, 0x38, 0x38}), []float32{s}, 3)
		if got != a {
			t.Errorf("scale order: %g, want (p·s)·S = %g (p·(s·S) = %g)", got, a, b)
		}
		break
	}
}
