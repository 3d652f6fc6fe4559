package policy

import (
	"fmt"
	"math"
	"testing"
)

// shiftsDetected replays s on a tier of predict and returns, per shift the
// pooled detector raised, the token after which it was raised and the change
// point it named.
func shiftsDetected(t *testing.T, s steps, d Dims, capacity int, part Partition) (at, start []int64) {
	t.Helper()
	c := newCache(t, d, capacity, part, "predict", Options{})
	pool := c.pols[0].(*predict).pool
	if part == PerLayer {
		for _, p := range c.pols {
			if p.(*predict).pool != pool {
				t.Fatal("the per-layer partitions do not share one shift detector")
			}
		}
	}
	epoch := 0
	for tok := range s {
		for l, set := range s[tok] {
			now := d.Step(tok, l)
			ids := make([]ExpertID, len(set))
			for j, e := range set {
				ids[j] = ExpertID{Layer: l, Expert: e}
			}
			if err := c.RequestSet(ids, now, nil, make([]Outcome, len(set))); err != nil {
				t.Fatalf("token %d layer %d: %v", tok, l, err)
			}
			for _, id := range ids {
				if err := c.Release(id); err != nil {
					t.Fatal(err)
				}
			}
			if pool.epoch != epoch {
				epoch = pool.epoch
				// Raised when the first layer of tok runs: the evidence of
				// tok − 1 decided.
				at, start = append(at, int64(tok-1)), append(start, pool.start)
			}
		}
	}
	return at, start
}

// When every layer's popularity shifts at once, the pooled detector (on
// the benchmarks' model shape, 48 layers × 256 experts, top-8) raises the
// shift at most two tokens late and names the shift's token as the
// change point, with a global capacity and with per-layer partitions, whose
// instances share the detector; and every layer's estimates then restart
// from the change point.
func TestPredictDetectsSharedShifts(t *testing.T) {
	const L, E, k, T, shift = 48, 256, 8, 400, 100
	s := synthSteps(t, fmt.Sprintf("zipf:s=0.8,reuse=0.5,shift=%d", shift), L, E, k, T)
	d := Dims{Layers: L, Experts: E}
	for _, part := range []Partition{Global, PerLayer} {
		at, start := shiftsDetected(t, s, d, d.N()/4, part)
		if len(at) != T/shift-1 {
			t.Errorf("%v: shifts detected after tokens %v (change points %v), want one after each of %d, %d, %d", part, at, start, shift, 2*shift, 3*shift)
			continue
		}
		for i := range at {
			want := int64((i + 1) * shift)
			if at[i] < want || at[i] > want+2 || start[i] < want-1 || start[i] > want {
				t.Errorf("%v: shift at token %d detected after token %d with change point %d, want after %d to %d with %d (±1)", part, want, at[i], start[i], want, want+2, want)
			}
		}
	}
	// The restart: after the last shift, every layer's growing estimate
	// counts the runs since its change point only.
	c := newCache(t, d, d.N()/4, Global, "predict", Options{})
	replay(t, c, s[:3*shift+10])
	p := c.pols[0].(*predict)
	if p.pool.epoch != 3 {
		t.Fatalf("%d shifts detected in %d tokens, want 3", p.pool.epoch, 3*shift+10)
	}
	for l := range L {
		runs := p.runs[nEst-1][l] // the log of the runs, undecayed
		got := math.Exp(runs)
		if want := float64(3*shift + 10 - int(p.pool.start)); got < want-0.5 || got > want+0.5 {
			t.Errorf("layer %d: the growing estimate counts %.1f runs, want the %v since the change point %d", l, got, want, p.pool.start)
		}
	}
}

// On stationary routing the pooled detector raises nothing (the same shape
// and half again the length): uniform routing
// (where the fresh model has an edge: the prior is the truth), skewed
// routing with and without reuse, and the reference trace.
func TestPredictNoFalseShifts(t *testing.T) {
	const L, E, k, T = 48, 256, 8, 600
	d := Dims{Layers: L, Experts: E}
	for _, spec := range []string{"zipf:s=0,reuse=0", "zipf:s=0.5,reuse=0", "zipf:s=0.5,reuse=0.5", "zipf:s=1.1,reuse=0.6"} {
		s := synthSteps(t, spec, L, E, k, T)
		for _, part := range []Partition{Global, PerLayer} {
			if at, _ := shiftsDetected(t, s, d, d.N()/4, part); len(at) != 0 {
				t.Errorf("%s, %v: shifts detected after tokens %v, want none", spec, part, at)
			}
		}
	}
}
