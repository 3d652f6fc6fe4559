package cuda

import "testing"

// TestPinRanges: a range is found only inside one recorded range, at its
// start, its end and between; not across two, nor below the first, nor
// after it is removed.
func TestPinRanges(t *testing.T) {
	var r pinRanges
	for _, b := range []uintptr{0x5000, 0x1000, 0x9000, 0x3000} {
		if !r.add(b, 0x1000) {
			t.Fatalf("add %#x", b)
		}
	}
	if r.add(0x3000, 0x10) {
		t.Error("a base added twice")
	}
	for _, c := range []struct {
		a    uintptr
		n    int
		want bool
	}{
		{0x1000, 0x1000, true}, {0x1800, 0x800, true}, {0x1fff, 1, true}, {0x9000, 1, true},
		{0x1800, 0x801, false}, {0x0fff, 2, false}, {0x2000, 1, false}, {0xa000, 1, false}, {0x500, 1, false},
		{0x3fff, 0x1002, false}, // across 0x3000 and 0x5000, with a gap
	} {
		if got := r.contains(c.a, c.n); got != c.want {
			t.Errorf("contains(%#x, %#x) = %v, want %v", c.a, c.n, got, c.want)
		}
	}
	if !r.remove(0x5000) || r.remove(0x5000) || r.contains(0x5000, 1) || !r.contains(0x3000, 1) || !r.contains(0x9000, 0x1000) {
		t.Error("remove")
	}
}
