package backend

import (
	"math"
	"testing"
)

// TestF16 checks every binary16 bit pattern against its value from the
// format's definition.
func TestF16(t *testing.T) {
	for h := range 1 << 16 {
		s, e, m := h>>15, (h>>10)&0x1F, float64(h&0x3FF)
		var want float64
		switch {
		case e == 0x1F && m == 0:
			want = math.Inf(1)
		case e == 0x1F:
			want = math.NaN()
		case e == 0:
			want = math.Ldexp(m, -24)
		default:
			want = math.Ldexp(1+m/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		got := F16(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("F16(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (s == 1) {
			t.Fatalf("F16(%#04x) = %v, want %v", h, got, want)
		}
	}
}
