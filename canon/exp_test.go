package canon

import (
	"math"
	"math/big"
	"runtime"
	"testing"
)

// crExp is e**x correctly rounded to float64, from a 400-bit Taylor series
// of e**(x/2²⁰) squared 20 times (an independent reference: no fdlibm).
func crExp(x float64) float64 {
	const prec = 400
	r := new(big.Float).SetPrec(prec).SetFloat64(x)
	r.SetMantExp(r, -20)
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	for i := int64(1); i < 40; i++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(i))
		sum.Add(sum, term)
	}
	for range 20 {
		sum.Mul(sum, sum)
	}
	f, _ := sum.Float64()
	return f
}

// TestExpIsThePortNotMathExp pins the exp that the transcendentals are
// built from (exp64: Exp, Sigmoid, SiLU, Softplus, the RoPE table's powers)
// at float32 inputs where it is not Go's math.Exp: there the port gives the
// correctly rounded float64 and amd64's assembly math.Exp (with and without
// FMA: GODEBUG=cpu.fma=off, checked by hand) one ulp off, so a port
// replaced by math.Exp fails here. (Rounded to float32 the two agree on
// every finite float32 input on this machine, for Exp, Sigmoid, SiLU and
// Softplus alike — a full sweep found no difference — so the float64 value
// is where they differ. canon.cuh's port is compared with this one on every
// float32 input by validation/gpuprobe.)
func TestExpIsThePortNotMathExp(t *testing.T) {
	for _, c := range []struct {
		x    uint32 // float32 bits
		want uint64 // exp64, float64 bits
	}{
		{0x40cf2585, 0x40843d182248d4dc}, // 6.47333
		{0xc1148f99, 0x3f1853bd42e11360}, // −9.285058
		{0xc04843f1, 0x3fa66711f302b83d}, // −3.1291468
		{0x41e06838, 0x427624fe89538a7f}, // 28.050888
	} {
		x := float64(math.Float32frombits(c.x))
		got := exp64(x)
		if math.Float64bits(got) != c.want {
			t.Errorf("exp64(%v) = %016x, want %016x", x, math.Float64bits(got), c.want)
		}
		if cr := crExp(x); math.Float64bits(cr) != c.want {
			t.Errorf("e**%v correctly rounded is %016x, the pin %016x", x, math.Float64bits(cr), c.want)
		}
		if m := math.Exp(x); runtime.GOARCH == "amd64" && m == got {
			t.Errorf("math.Exp(%v) = exp64's %016x: the case does not tell them apart", x, math.Float64bits(m))
		}
		if Exp(float32(x)) != float32(got) {
			t.Errorf("Exp(%v) is not exp64 rounded once", x)
		}
	}
}
