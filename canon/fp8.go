package canon

import "math"

// FP8 E4M3 ("e4m3fn", the OCP FP8 format of the fine-grained FP8
// checkpoints): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits, no
// infinities, NaN at S.1111.111 (0x7F, 0xFF), largest finite ±448, smallest
// subnormal 2^-9. Every finite value is an integer multiple of 2^-9.

// E4M3Max is the largest finite E4M3 value.
const E4M3Max = 448

var e4m3 = func() (t [256]float32) {
	for b := range 256 {
		e, m := b>>3&0xF, b&7
		var v float64
		switch {
		case e == 0xF && m == 7:
			v = math.NaN()
		case e == 0:
			v = math.Ldexp(float64(m), -9) // m·2^-9
		default:
			// (8+m)·2^(e-10), written without an addition feeding a
			// product (the compiler fused 1 + m/8 under GOAMD64=v3).
			v = math.Ldexp(float64(8+m), e-10)
		}
		if b&0x80 != 0 {
			v = -v
		}
		t[b] = float32(v)
	}
	return t
}()

// DecodeE4M3 is the exact float32 value of an E4M3 code (NaN for 0x7F and
// 0xFF).
func DecodeE4M3(b byte) float32 { return e4m3[b] }

// EncodeE4M3 rounds x to the nearest E4M3 value, ties to even, saturating:
// a magnitude at or above 448 (infinity included) gives ±448, NaN gives
// 0x7F. It is the conversion PTX's cvt.rn.satfinite.e4m3x2.f32 performs.
func EncodeE4M3(x float32) byte {
	b := math.Float32bits(x)
	sign := byte(b>>24) & 0x80
	a := b &^ (1 << 31)
	switch {
	case a > 0x7F800000: // NaN
		return sign | 0x7F
	case a >= 0x43E00000: // |x| ≥ 448
		return sign | 0x7E
	case a < 0x3C800000: // |x| < 2^-6: the subnormal range, steps of 2^-9
		// |x|·2^9 is exact (a power-of-two scaling of a value below 2^3);
		// rounded to an integer 0…8, it is the code (8 is 2^-6, 0x08).
		f := float64(math.Float32frombits(a)) * 512
		return sign | byte(math.RoundToEven(f))
	}
	// Normal: keep 3 of the 23 mantissa bits, ties to even; a carry out of
	// the mantissa moves into the exponent, as the encoding is monotone.
	e := a>>23 - 127 + 7 // 1…15
	m := a & 0x7FFFFF
	q, rem := m>>20, m&0xFFFFF
	if rem > 1<<19 || rem == 1<<19 && q&1 == 1 {
		q++
	}
	return sign | byte(e<<3+q)
}
