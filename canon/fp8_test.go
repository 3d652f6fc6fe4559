package canon

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nearestE4M3 is a brute-force reference: the finite code nearest to x
// (ties to the even code), saturating at ±448.
func nearestE4M3(x float32) byte {
	if x != x {
		return 0x7F
	}
	best, bestD := -1, math.Inf(1)
	for b := range 256 {
		v := float64(DecodeE4M3(byte(b)))
		if math.IsNaN(v) || (math.Signbit(v) != math.Signbit(float64(x))) {
			continue
		}
		d := math.Abs(v - float64(x))
		if d < bestD || d == bestD && b&1 == 0 {
			best, bestD = b, d
		}
	}
	return byte(best)
}

func TestDecodeE4M3(t *testing.T) {
	for _, c := range []struct {
		b    byte
		want float32
	}{{0x00, 0}, {0x01, 1.0 / 512}, {0x07, 7.0 / 512}, {0x08, 1.0 / 64}, {0x38, 1}, {0x3C, 1.5}, {0x7E, 448}, {0xFE, -448}, {0xB8, -1}} {
		if got := DecodeE4M3(c.b); got != c.want {
			t.Errorf("DecodeE4M3(%#x) = %v, want %v", c.b, got, c.want)
		}
	}
	if v := DecodeE4M3(0x7F); v == v {
		t.Errorf("0x7F = %v, want NaN", v)
	}
	if v := DecodeE4M3(0x80); v != 0 || !math.Signbit(float64(v)) {
		t.Errorf("0x80 = %v, want -0", v)
	}
	// Every finite value is an integer multiple of 2^-9.
	for b := range 256 {
		v := float64(DecodeE4M3(byte(b)))
		if !math.IsNaN(v) && v*512 != math.Trunc(v*512) {
			t.Errorf("%#x = %v is not a multiple of 2^-9", b, v)
		}
	}
}

func TestEncodeE4M3(t *testing.T) {
	// Every code round-trips (except NaN, which stays NaN).
	for b := range 256 {
		v := DecodeE4M3(byte(b))
		if got := EncodeE4M3(v); v == v && got != byte(b) {
			t.Errorf("EncodeE4M3(%v) = %#x, want %#x", v, got, b)
		}
	}
	// Midpoints between neighbours, and one f32 step either side of them.
	for b := range 0x7E {
		lo, hi := DecodeE4M3(byte(b)), DecodeE4M3(byte(b+1))
		mid := float32((float64(lo) + float64(hi)) / 2)
		for _, x := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000)} {
			for _, s := range []float32{1, -1} {
				if got, want := EncodeE4M3(s*x), nearestE4M3(s*x); got != want {
					t.Fatalf("EncodeE4M3(%v) = %#x, want %#x", s*x, got, want)
				}
			}
		}
	}
	for _, c := range []struct {
		x    float32
		want byte
	}{{448, 0x7E}, {463.9, 0x7E}, {464, 0x7E}, {1e9, 0x7E}, {float32(math.Inf(1)), 0x7E}, {float32(math.Inf(-1)), 0xFE},
		{1.0 / 1024, 0x00}, {1.5 / 1024, 0x01}, {3.0 / 1024, 0x02}, {-1.0 / 1024, 0x80}, {1e-30, 0}} {
		if got := EncodeE4M3(c.x); got != c.want {
			t.Errorf("EncodeE4M3(%v) = %#x, want %#x", c.x, got, c.want)
		}
	}
	if got := EncodeE4M3(float32(math.NaN())); got&0x7F != 0x7F {
		t.Errorf("EncodeE4M3(NaN) = %#x", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		x := math.Float32frombits(r.Uint32())
		if x != x || math.Abs(float64(x)) > 448 {
			continue
		}
		if got, want := EncodeE4M3(x), nearestE4M3(x); got != want {
			t.Fatalf("EncodeE4M3(%v) = %#x, want %#x", x, got, want)
		}
	}
	for range 200000 { // the range the codes span
		x := float32(r.NormFloat64() * math.Ldexp(1, r.IntN(24)-14))
		if math.Abs(float64(x)) >= 448 {
			continue
		}
		if got, want := EncodeE4M3(x), nearestE4M3(x); got != want {
			t.Fatalf("EncodeE4M3(%v) = %#x, want %#x", x, got, want)
		}
	}
}
