package canon

import "math"

// The float64 kernels below are fdlibm's algorithms (as in Go's pure-Go
// math package) with every product written float64(a*b) wherever it can
// reach an addition — also across statements and function returns, since
// the compiler fuses on its SSA form — so that no compiler setting can
// contract them into FMA (TestNoFMA checks the generated code).
// Their results are therefore the same on every platform and every
// GOAMD64/GOARM64 level, and a CUDA port with __dmul_rn/__dadd_rn/__ddiv_rn
// reproduces them bit for bit. The float32 functions evaluate the float64
// kernel on the exact float64 value of their argument and round once.

// Exp returns e**x rounded to float32.
func Exp(x float32) float32 { return float32(exp64(float64(x))) }

// Sigmoid returns 1/(1+e**-x), evaluated in float64 and rounded once.
func Sigmoid(x float32) float32 { return float32(1 / (1 + exp64(-float64(x)))) }

// SiLU returns x/(1+e**-x), evaluated in float64 and rounded once.
func SiLU(x float32) float32 {
	d := float64(x)
	return float32(d / (1 + exp64(-d)))
}

// Softplus is torch's softplus with beta 1 and threshold 20: x if x > 20,
// else log1p(e**x) evaluated in float64 and rounded once.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(log1p64(exp64(float64(x))))
}

// Log returns the natural logarithm of x rounded to float32 (fdlibm's log
// in float64 with explicit rounding, rounded once). The engine does not use
// it; it gives build-invariant results where Go's math.Log does not (that
// is assembly on amd64 and s390x, and pure Go that the compiler fuses on
// arm64, riscv64, ppc64, loong64).
func Log(x float32) float32 { return float32(log64(float64(x))) }

// exp64 is fdlibm's exp (Go's math.exp) with explicit rounding. Results below
// 2**-1022 (x < -708.4) may be double rounded; they are far below anything
// a float32 caller can observe.
func exp64(x float64) float64 {
	const (
		ln2Hi     = 6.93147180369123816490e-01
		ln2Lo     = 1.90821492927058770002e-10
		log2e     = 1.44269504088896338700e+00
		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
		nearZero  = 1.0 / (1 << 28)

		p1 = 1.66666666666666657415e-01
		p2 = -2.77777777770155933842e-03
		p3 = 6.61375632143793436117e-05
		p4 = -1.65339022054652515390e-06
		p5 = 4.13813679705723846039e-08
	)
	switch {
	case x != x || x > overflow:
		if x != x {
			return x
		}
		return math.Inf(1)
	case x < underflow:
		return 0
	case -nearZero < x && x < nearZero:
		return 1 + x
	}
	var k int
	switch {
	case x < 0:
		k = int(float64(log2e*x) - 0.5)
	case x > 0:
		k = int(float64(log2e*x) + 0.5)
	}
	hi := x - float64(float64(k)*ln2Hi)
	lo := float64(float64(k) * ln2Lo)
	r := hi - lo
	t := r * r
	c := r - float64(t*(p1+float64(t*(p2+float64(t*(p3+float64(t*(p4+float64(t*p5)))))))))
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return scalb(y, k)
}

// scalb returns y·2**k for y in [0.5, 2] and k in [-1100, 1030], with one
// rounding except in the float64-subnormal range.
func scalb(y float64, k int) float64 {
	switch {
	case k > 1023:
		y *= 0x1p1023
		k -= 1023
	case k < -1022:
		y *= 0x1p-1022
		k += 1022
	}
	if k < -1022 {
		k = -1022 // underflows to 0 or a subnormal; only reachable for x < -708
	}
	if k > 1023 {
		k = 1023
	}
	return float64(y * math.Float64frombits(uint64(k+1023)<<52))
}

// log64 is fdlibm's log (Go's math.log) with explicit rounding.
func log64(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
		l1    = 6.666666666666735130e-01
		l2    = 3.999999999940941908e-01
		l3    = 2.857142874366239149e-01
		l4    = 2.222219843214978396e-01
		l5    = 1.818357216161805012e-01
		l6    = 1.531383769920937332e-01
		l7    = 1.479819860511658591e-01
	)
	switch {
	case x != x || math.IsInf(x, 1):
		return x
	case x < 0:
		return math.NaN()
	case x == 0:
		return math.Inf(-1)
	}
	f1, ki := frexp(x)
	if f1 < math.Sqrt2/2 {
		f1 *= 2
		ki--
	}
	f := f1 - 1
	k := float64(ki)
	s := f / (2 + f)
	s2 := s * s
	s4 := s2 * s2
	t1 := float64(s2 * (l1 + float64(s4*(l3+float64(s4*(l5+float64(s4*l7)))))))
	t2 := float64(s4 * (l2 + float64(s4*(l4+float64(s4*l6)))))
	R := t1 + t2
	hfsq := float64(float64(0.5*f) * f)
	return float64(k*ln2Hi) - ((hfsq - (float64(s*(hfsq+R)) + float64(k*ln2Lo))) - f)
}

// frexp splits a positive finite x into f·2**e with f in [0.5, 1).
func frexp(x float64) (float64, int) {
	e := 0
	if x < 0x1p-1022 { // subnormal: scale into the normal range (exact)
		x *= 0x1p52
		e = -52
	}
	b := math.Float64bits(x)
	e += int((b>>52)&0x7ff) - 1022
	b = b&^(0x7ff<<52) | 1022<<52
	return math.Float64frombits(b), e
}

// log1p64 returns log(1+y) for y >= 0 using log64 and the classic correction
// log1p(y) = log(u)·y/(u−1), u = 1+y (Goldberg 1991), accurate to a few
// float64 ulps.
func log1p64(y float64) float64 {
	u := 1 + y
	if u == 1 {
		return y
	}
	if math.IsInf(u, 1) {
		return u
	}
	return float64(log64(u) * (y / (u - 1)))
}

// pow64 returns b**e for b > 0 as exp64(e·log64(b)); relative error a few
// 1e-15 for the arguments RoPE uses.
func pow64(b, e float64) float64 { return exp64(float64(e * log64(b))) }

// sincos64 returns sin(x) and cos(x) for |x| < 2**29 with Go's math.sin/cos
// algorithm (Cody–Waite reduction by π/4 in three parts, Cephes
// polynomials) and explicit rounding. It panics for larger |x|, which RoPE
// never produces (angles are at most the position).
func sincos64(x float64) (sin, cos float64) {
	const (
		pi4A = 7.85398125648498535156e-1
		pi4B = 3.77489470793079817668e-8
		pi4C = 2.69515142907905952645e-15
	)
	if x != x || math.IsInf(x, 0) || math.Abs(x) >= 1<<29 {
		panic("canon: sincos64 argument out of range")
	}
	if x == 0 {
		return x, 1
	}
	sinSign, cosSign := false, false
	if x < 0 {
		x = -x
		sinSign = true
	}
	// The conversion to uint64 subtracts 2⁶³ from large values, which
	// riscv64, ppc64 and loong64 would fuse with the product (a branch that
	// |x| < 2²⁹ never takes, but the rounding is written out anyway).
	j := uint64(float64(x * (4 / math.Pi)))
	y := float64(j)
	if j&1 == 1 {
		j++
		y++
	}
	j &= 7
	z := ((x - float64(y*pi4A)) - float64(y*pi4B)) - float64(y*pi4C)
	if j > 3 {
		j -= 4
		sinSign, cosSign = !sinSign, !cosSign
	}
	if j > 1 {
		cosSign = !cosSign
	}
	zz := z * z
	c := 1.0 - float64(0.5*zz) + float64(float64(zz*zz)*cosPoly(zz))
	s := z + float64(float64(z*zz)*sinPoly(zz))
	if j == 1 || j == 2 {
		s, c = c, s
	}
	if cosSign {
		c = -c
	}
	if sinSign {
		s = -s
	}
	return s, c
}

func sinPoly(zz float64) float64 {
	const (
		s0 = 1.58962301576546568060e-10
		s1 = -2.50507477628578072866e-8
		s2 = 2.75573136213857245213e-6
		s3 = -1.98412698295895385996e-4
		s4 = 8.33333333332211858878e-3
		s5 = -1.66666666666666307295e-1
	)
	p := float64(s0*zz) + s1
	p = float64(p*zz) + s2
	p = float64(p*zz) + s3
	p = float64(p*zz) + s4
	return float64(p*zz) + s5
}

func cosPoly(zz float64) float64 {
	const (
		c0 = -1.13585365213876817300e-11
		c1 = 2.08757008419747316778e-9
		c2 = -2.75573141792967388112e-7
		c3 = 2.48015872888517045348e-5
		c4 = -1.38888888888730564116e-3
		c5 = 4.16666666666665929218e-2
	)
	p := float64(c0*zz) + c1
	p = float64(p*zz) + c2
	p = float64(p*zz) + c3
	p = float64(p*zz) + c4
	return float64(p*zz) + c5
}
