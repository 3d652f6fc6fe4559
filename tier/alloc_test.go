//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package tier

import (
	"context"
	"testing"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
)

// TestStreamHitsAllocateNothing: a step whose experts are all resident
// allocates nothing.
func TestStreamHitsAllocateNothing(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, _ := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size})
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

// TestDecodeAllocatesNothing: steady-state decoding with every expert
// resident in the RAM tier allocates nothing per token (the engine's
// buffers and the hierarchy's are recycled; Generate's own loop included).
func TestDecodeAllocatesNothing(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 4 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h, Threads: 1})
	// A long generation's allocations, minus a short one's, per token: the
	// runtime adds a few now and then (under 0.05 per token over 240 tokens);
	// one allocation per token would be 1.
	gen := func(n int) float64 {
		return testing.AllocsPerRun(3, func() {
			if _, err := engine.Generate(context.Background(), m.NewSession(), []int{1, 2, 3}, engine.GenOptions{MaxTokens: n}, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	gen(256) // warm: every expert resident, every buffer grown
	short, long := gen(16), gen(256)
	if per := (long - short) / 240; per > 0.05 {
		t.Errorf("%v allocations for 16 tokens, %v for 256: %.2f per decoded token", short, long, per)
	}
}
