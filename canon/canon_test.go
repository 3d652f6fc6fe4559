package canon

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopKTorchOrder checks the tie orders that torch.topk produces on CPU
// (MODEL_SPEC §C.5.2, verified against torch with a Python model).
func TestTopKTorchOrder(t *testing.T) {
	v := []float32{.1, .3, .3, .3, .2, .05, .3, 0}
	eq := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 0.5
		}
		return x
	}
	cases := []struct {
		p    []float32
		k    int
		want []int32
	}{
		{v, 2, []int32{2, 6}},
		{v, 4, []int32{2, 6, 3, 1}},
		{eq(12), 3, []int32{9, 7, 8}},
		{eq(256), 8, []int32{172, 169, 170, 171, 174, 175, 168, 173}},
	}
	var sel TopK
	for _, c := range cases {
		got := make([]int32, c.k)
		sel.Select(c.p, c.k, got)
		if !slices.Equal(got, c.want) {
			t.Errorf("topk(%d values, k=%d) = %v, want %v", len(c.p), c.k, got, c.want)
		}
	}
}

// TestTopKSelects checks both torch paths (nth_element+sort when k·64 > n,
// partial_sort otherwise) against a plain sort: the k largest values in
// descending order (for distinct values, the exact indices).
func TestTopKSelects(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var sel TopK
	for iter := 0; iter < 3000; iter++ {
		n := 1 + r.IntN(600)
		k := 1 + r.IntN(min(n, 40))
		p := make([]float32, n)
		ties := iter%2 == 0
		for i := range p {
			if ties {
				p[i] = float32(r.IntN(5))
			} else {
				p[i] = r.Float32()
			}
		}
		got := make([]int32, k)
		sel.Select(p, k, got)
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case p[a] > p[b]:
				return -1
			case p[a] < p[b]:
				return 1
			}
			return 0
		})
		seen := map[int32]bool{}
		for s, g := range got {
			if seen[g] {
				t.Fatalf("n=%d k=%d: index %d selected twice", n, k, g)
			}
			seen[g] = true
			if p[g] != p[idx[s]] {
				t.Fatalf("n=%d k=%d ties=%v: slot %d has value %g, want %g", n, k, ties, s, p[g], p[idx[s]])
			}
			if !ties && int(g) != idx[s] {
				t.Fatalf("n=%d k=%d: slot %d index %d, want %d", n, k, s, g, idx[s])
			}
		}
	}
}

func TestTopKNaNIsLargest(t *testing.T) {
	nan := float32(math.NaN())
	var sel TopK
	got := make([]int32, 2)
	sel.Select([]float32{1, nan, 3, 2}, 2, got)
	if got[0] != 1 || got[1] != 2 {
		t.Errorf("got %v, want [1 2]", got)
	}
}

func TestArgmax(t *testing.T) {
	if a := Argmax([]float32{1, 3, 2, 3}); a != 1 {
		t.Errorf("ties: got %d, want 1", a)
	}
	if a := Argmax([]float32{1, float32(math.NaN())}); a != -1 {
		t.Errorf("NaN: got %d, want -1", a)
	}
	if a := Argmax(nil); a != -1 {
		t.Errorf("empty: got %d, want -1", a)
	}
}

// argmaxScan is Argmax as one scan, the definition: the first index whose
// value is larger than every value before it and at least every value
// after, -1 on a NaN or no value.
func argmaxScan(x []float32) int {
	best := -1
	var bv float32
	for i, v := range x {
		if v != v {
			return -1
		}
		if best < 0 || v > bv {
			best, bv = i, v
		}
	}
	return best
}

// TestArgmaxIsOneScan: the four-lane Argmax gives one scan's index on rows
// of every length up to 67 and of 248 320, with ties between lanes (a few
// distinct values), ±0 as equal maxima, −Inf rows, and NaN anywhere (in the
// first four, the lanes' part, the tail).
func TestArgmaxIsOneScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	negZero := float32(math.Copysign(0, -1))
	vals := []float32{negZero, 0, 1, -1, 2, float32(math.Inf(-1)), float32(math.Inf(1))}
	check := func(x []float32) {
		t.Helper()
		if got, want := Argmax(x), argmaxScan(x); got != want {
			t.Fatalf("Argmax %v = %d, one scan gives %d", x[:min(len(x), 20)], got, want)
		}
	}
	for n := range 68 {
		for range 300 {
			x := make([]float32, n)
			k := 1 + r.IntN(len(vals))
			for i := range x {
				x[i] = vals[r.IntN(k)]
			}
			check(x)
			if n > 0 && r.IntN(4) == 0 {
				x[r.IntN(n)] = float32(math.NaN())
				check(x)
			}
		}
	}
	big := make([]float32, 248320)
	for i := range big {
		big[i] = float32(r.NormFloat64())
	}
	check(big)
	for _, at := range []int{0, 3, 4, 1000, 248316, 248319} {
		big[at] = 9
		check(big)
	}
	big[5] = float32(math.NaN())
	check(big)
}

// randVec mixes normal values with ±0, huge and tiny ones (the inputs of
// the pinned dot-product digests and of TestCombineN; the reduction order
// is checked on finite data in order_test.go).
func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch r.IntN(20) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = float32(r.NormFloat64()) * 1e30
		case 3:
			x[i] = float32(r.NormFloat64()) * 1e-30
		default:
			x[i] = float32(r.NormFloat64())
		}
	}
	return x
}

func bf16Round(f float32) uint16 {
	u := math.Float32bits(f)
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestCombineN(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := 0; iter < 20000; iter++ {
		nl := r.IntN(33)
		var a, b [Lanes]float32
		for i := 0; i < nl; i++ {
			a[i] = randVec(r, 1)[0]
			a[i] = a[i] + 0 // a lane total starts at +0, so it is never -0
		}
		b = a
		x, y := Combine(&a), CombineN(&b, nl)
		if math.Float32bits(x) != math.Float32bits(y) {
			t.Fatalf("nl=%d: Combine %g, CombineN %g", nl, x, y)
		}
	}
}

func ulpDiff32(a, b float32) int64 {
	if a == b {
		return 0
	}
	ia, ib := int64(int32(math.Float32bits(a))), int64(int32(math.Float32bits(b)))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

func ulpDiff64(a, b float64) uint64 {
	if a == b {
		return 0
	}
	ia, ib := int64(math.Float64bits(a)), int64(math.Float64bits(b))
	if ia < 0 {
		ia = math.MinInt64 - ia
	}
	if ib < 0 {
		ib = math.MinInt64 - ib
	}
	if ia > ib {
		return uint64(ia - ib)
	}
	return uint64(ib - ia)
}

// sweep calls f on about n float32 values spread over the whole range.
func sweep(n int, f func(x float32)) {
	step := uint32((1 << 32) / uint64(n))
	for u := uint32(0); ; u += step {
		f(math.Float32frombits(u))
		if u > math.MaxUint32-step {
			return
		}
	}
}

// TestTranscendentals: the float32 functions are within one ulp of the
// float64 math library value rounded to float32 (in practice correctly
// rounded), over the whole float32 range.
func TestTranscendentals(t *testing.T) {
	fns := []struct {
		name string
		got  func(float32) float32
		ref  func(float64) float64
	}{
		{"Exp", Exp, math.Exp},
		{"Sigmoid", Sigmoid, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
		{"SiLU", SiLU, func(x float64) float64 { return x / (1 + math.Exp(-x)) }},
		{"Softplus", Softplus, func(x float64) float64 {
			if x > 20 {
				return x
			}
			return math.Log1p(math.Exp(x))
		}},
	}
	for _, f := range fns {
		var n, off int
		sweep(1<<20, func(x float32) {
			if x != x || math.IsInf(float64(x), 0) {
				return
			}
			want := float32(f.ref(float64(x)))
			got := f.got(x)
			if want != want {
				return
			}
			n++
			if d := ulpDiff32(got, want); d > 1 {
				t.Fatalf("%s(%g) = %g, want %g (%d ulp)", f.name, x, got, want, d)
			} else if d == 1 {
				off++
			}
		})
		t.Logf("%s: %d inputs, %d differ from float32(math) by 1 ulp", f.name, n, off)
	}
	for _, x := range []float32{0, float32(math.Copysign(0, -1))} {
		if Exp(x) != 1 || Sigmoid(x) != 0.5 || SiLU(x) != 0 {
			t.Errorf("special values at %g", x)
		}
	}
	if !math.IsInf(float64(Exp(100)), 1) || Exp(-200) != 0 || Sigmoid(-200) != 0 || Sigmoid(200) != 1 {
		t.Errorf("overflow/underflow: Exp(100)=%g Exp(-200)=%g Sigmoid(±200)=%g,%g", Exp(100), Exp(-200), Sigmoid(-200), Sigmoid(200))
	}
	if Softplus(30) != 30 || Softplus(-200) != 0 {
		t.Errorf("Softplus thresholds")
	}
}

// TestFloat64Kernels compares the ported fdlibm kernels with Go's math.
func TestFloat64Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var worstExp, worstLog, worstSin, worstCos uint64
	for i := 0; i < 200000; i++ {
		x := (r.Float64()*2 - 1) * 700
		worstExp = max(worstExp, ulpDiff64(exp64(x), math.Exp(x)))
		y := math.Exp((r.Float64()*2 - 1) * 700)
		worstLog = max(worstLog, ulpDiff64(log64(y), math.Log(y)))
		a := r.Float64() * 300000
		s, c := sincos64(a)
		ms, mc := math.Sincos(a)
		worstSin = max(worstSin, ulpDiff64(s, ms))
		worstCos = max(worstCos, ulpDiff64(c, mc))
	}
	if worstExp > 2 || worstLog > 1 || worstSin > 1 || worstCos > 1 {
		t.Errorf("max ulp vs math: exp %d, log %d, sin %d, cos %d", worstExp, worstLog, worstSin, worstCos)
	}
	for _, y := range []float64{0, 1e-300, 1e-20, 1e-9, 0.5, 1, 3, 1e10} {
		if d := ulpDiff64(log1p64(y), math.Log1p(y)); d > 4 {
			t.Errorf("log1p64(%g): %d ulp from math.Log1p", y, d)
		}
	}
	if d := ulpDiff64(pow64(1e7, 0.75), math.Pow(1e7, 0.75)); d > 16 {
		t.Errorf("pow64: %d ulp", d)
	}
}

func TestRope(t *testing.T) {
	inv, err := RopeInvFreq(10000, 8)
	if err != nil {
		t.Fatal(err)
	}
	for j, f := range inv {
		want := float32(1 / math.Pow(10000, float64(float32(2*j)/8)))
		if ulpDiff32(f, want) > 1 {
			t.Errorf("inv[%d] = %g, want %g", j, f, want)
		}
	}
	cos, sin := make([]float32, 4), make([]float32, 4)
	RopeRow(inv, 1000, cos, sin)
	for j := range cos {
		a := float64(float32(1000 * inv[j]))
		if ulpDiff32(cos[j], float32(math.Cos(a))) > 1 || ulpDiff32(sin[j], float32(math.Sin(a))) > 1 {
			t.Errorf("pos 1000 j %d: cos %g sin %g, want %g %g", j, cos[j], sin[j], math.Cos(a), math.Sin(a))
		}
	}
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	y := slices.Clone(x)
	Rotate(y, cos, sin) // rotates dims 0..7 in pairs (i, i+4); 8 and 9 pass through
	for i := 0; i < 4; i++ {
		c, s := cos[i], sin[i]
		if y[i] != float32(x[i]*c)+float32(-x[i+4]*s) || y[i+4] != float32(x[i+4]*c)+float32(x[i]*s) {
			t.Errorf("pair %d rotated wrongly", i)
		}
	}
	if y[8] != 9 || y[9] != 10 {
		t.Errorf("pass-through dims changed")
	}
	if _, err := RopeInvFreq(10000, 7); err == nil {
		t.Errorf("odd rotary dim accepted")
	}
}

// digest is the SHA-256 of the little-endian bits of vals, with every NaN
// written as 0x7fc00000: NaN-ness is canonical, NaN payloads are not (amd64
// produces 0xffc00000 where arm64, riscv64, ppc64, loong64 and s390x
// produce 0x7fc00000, e.g. for SiLU(−∞) = −∞/∞).
func digest(vals ...[]float32) string {
	h := sha256.New()
	var b [4]byte
	for _, v := range vals {
		for _, f := range v {
			u := math.Float32bits(f)
			if f != f {
				u = 0x7fc00000
			}
			binary.LittleEndian.PutUint32(b[:], u)
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestGoldenDigests pins the bits of the canonical functions. The same
// digests must come out of every build: they do with and without -tags
// purego, under GOAMD64=v3, and (run by hand under qemu-user) on arm64,
// riscv64, ppc64le, loong64 and s390x. A change means the arithmetic
// changed, which needs an EXACTNESS.md entry and new GPU kernels, never
// just a new digest.
func TestGoldenDigests(t *testing.T) {
	var xs []float32
	sweep(1<<16, func(x float32) {
		if x == x {
			xs = append(xs, x)
		}
	})
	apply := func(f func(float32) float32) []float32 {
		out := make([]float32, len(xs))
		for i, x := range xs {
			out[i] = f(x)
		}
		return out
	}
	inv1, _ := RopeInvFreq(1e7, 64)
	c1, s1 := RopeTable(inv1, 8192)
	inv2, _ := RopeInvFreq(1e6, 128)
	c2, s2 := RopeTable(inv2, 4096)
	r := rand.New(rand.NewPCG(9, 10))
	var dots []float32
	for n := 1; n < 3000; n += 37 {
		w, x := randVec(r, n), randVec(r, n)
		wb := make([]uint16, n)
		for i := range w {
			wb[i] = bf16Round(w[i])
		}
		dots = append(dots, DotBF16(wb, x), Sum(x))
	}
	got := map[string]string{
		"exp":      digest(apply(Exp)),
		"sigmoid":  digest(apply(Sigmoid)),
		"silu":     digest(apply(SiLU)),
		"softplus": digest(apply(Softplus)),
		"rope":     digest(inv1, c1, s1, inv2, c2, s2),
		"dots":     digest(dots),
	}
	for k, v := range got {
		if w := goldenDigests[k]; v != w {
			t.Errorf("%s: digest %s, want %s", k, v, w)
		}
	}
}

var goldenDigests = map[string]string{
	"exp":      "0453eb08c33b2d90a9221e31bba8e7f7cc69a0c7d9243592630411bb61df5ab8",
	"sigmoid":  "06aef8bebe52f1ed37cbc18c410cf9c2ab58e8b1512e72e496cf63c80f5e508e",
	"silu":     "98ef5288f2a5744156ce125b97881943d37c3a00a3190c1458be22d383bb0375",
	"softplus": "99acc5a62bb32268de8672bf9d4b453c5d8a97f9cfe0d315edf62de37a294e27",
	"rope":     "0c647fa0de6c8f6e5f148130d1f71732629c0d8050b0bf50048d9b047e2b103d",
	"dots":     "c499383d10d0abe1453cd2a6c677b34b7769f5d917275dcf6d8839465577f15c",
}
