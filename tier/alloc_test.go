//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package tier

import (
	"context"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

// TestStreamHitsAllocateNothing: a step whose experts are all resident
// allocates nothing.
func TestStreamHitsAllocateNothing(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, _ := New(ck, Options{RAMBudget: 64 * size, DeviceBudget: 2 * size})
	defer h.Close()
	c := nopC{}
	xs := []int{1, 4, 9, 12}
	for l := range 4 {
		if err := h.Stream(context.Background(), l, xs, c); err != nil {
			t.Fatal(err)
		}
	}
	n := testing.AllocsPerRun(100, func() {
		for l := range 4 {
			if err := h.Stream(context.Background(), l, xs, c); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != 0 {
		t.Errorf("%.1f allocations per token of resident experts", n)
	}
}
