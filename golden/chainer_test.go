package golden

import (
	"math"
	"testing"
)

// TestChainerIsChainNext: a Chainer reused over rows shorter and longer
// than its buffer gives ChainNext's heads, and allocates nothing once warm.
func TestChainerIsChainNext(t *testing.T) {
	var c Chainer
	head := ChainStart([32]byte{1, 2, 3}, []int{7, 8})
	want := head
	for j, n := range []int{1, 5, 4096, 4097, 248320, 3, 12000} {
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(math.Sin(float64(i*(j+1)))) * 17
		}
		row[n/2] = float32(math.Inf(-1))
		head, want = c.Next(head, row), ChainNext(want, row)
		if head != want {
			t.Fatalf("row %d (%d logits): Chainer %x, ChainNext %x", j, n, head, want)
		}
	}
	row := make([]float32, 5000)
	if n := testing.AllocsPerRun(20, func() { head = c.Next(head, row) }); n != 0 {
		t.Errorf("%.1f allocations per Chainer.Next, want 0", n)
	}
}
