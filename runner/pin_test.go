package runner

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/tier"
)

// TestPinnedSlots: on a (simulated) device backend that can pin, the
// tier's staging buffers are pinned by default, so every expert streamed to
// the device (no RAM tier: every use streams) is copied from where it was
// read; PinSlots false turns that
// off; the generations are the CPU reference's either way.
func TestPinnedSlots(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	g, runs, err := ref.Record(context.Background(), ps, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	for _, pin := range []*bool{nil, &off} {
		var dev backend.Backend
		r, err := Open(context.Background(), dir, Options{Threads: 1, Placement: engine.PlaceDevice,
			NewBackend: func() (backend.Backend, error) { dev = backendtest.NewDevice(1, 0); return dev, nil },
			Tier:       &tier.Options{StagingBudget: 64 << 10, Readers: 2}, PinSlots: pin})
		if err != nil {
			t.Fatal(err)
		}
		diffs, err := r.Replay(context.Background(), g, runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			if !d.Exact() {
				t.Errorf("pin %v: prompt %d on the device: %+v", pin, d.Index, d)
			}
		}
		c := dev.(backend.Meter).Counters()
		st := r.Tier.Stats()
		if err := r.Close(); err != nil { // the tier's unpins come before the backend's Close
			t.Fatal(err)
		}
		if n := backendtest.CallsAfterClose(dev); n != 0 {
			t.Errorf("pin %v: %d calls on the device after its Close", pin, n)
		}
		if c.ExpertsLoaded == 0 || st.Misses+st.Streamed == 0 {
			t.Fatalf("pin %v: nothing streamed to the device: %+v, tier %+v", pin, c, st)
		}
		if want := c.ExpertsLoaded; pin != nil {
			want = 0
			if c.ExpertsDirect != want {
				t.Errorf("pin off: %d of %d experts copied from pinned slots, want none", c.ExpertsDirect, c.ExpertsLoaded)
			}
		} else if c.ExpertsDirect != want {
			t.Errorf("pin by default: %d of %d experts copied from pinned slots, want all", c.ExpertsDirect, c.ExpertsLoaded)
		}
	}
	on := true
	if _, err := Open(context.Background(), dir, Options{Tier: &tier.Options{StagingBudget: 64 << 10}, PinSlots: &on}); err == nil ||
		!strings.Contains(err.Error(), "not cpu") {
		t.Errorf("pinned slots on cpu: %v", err)
	}
	if _, err := Open(context.Background(), dir, Options{PinSlots: &on}); err == nil || !strings.Contains(err.Error(), "need a tier") {
		t.Errorf("pinned slots without a tier: %v", err)
	}
	// A Pinner the caller set is kept, on any backend.
	var cp countingPinner
	r, err := Open(context.Background(), dir, Options{Threads: 1, Tier: &tier.Options{StagingBudget: 64 << 10, Pinner: &cp}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Replay(context.Background(), g, runs, nil); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if cp.n.Load() == 0 {
		t.Errorf("the caller's Pinner pinned nothing")
	}
}

// countingPinner counts the buffers it is asked to pin (and pins none).
type countingPinner struct{ n atomic.Int64 }

func (p *countingPinner) Pin(mem []byte) (func() error, error) {
	p.n.Add(1)
	return func() error { return nil }, nil
}
