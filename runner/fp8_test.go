package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// fp8Model is the default model's recipe in block FP8 (synth --dtype
// fp8), converted.
func fp8Model(t *testing.T) string {
	t.Helper()
	o, err := synth.DefaultOptions()
	if err != nil {
		t.Fatal(err)
	}
	o.DType = synth.DTypeFP8
	dir, err := synth.Converted(context.Background(), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFP8Hierarchy: a block-FP8 model's experts go through the whole
// expert hierarchy — RAM tier, staging, the device level of a simulated
// device that checks every copy against its digest, host and device
// placements — and every replay of a golden record made on the CPU
// reference alone is exact; the ledger's mode names the precision.
func TestFP8Hierarchy(t *testing.T) {
	dir := fp8Model(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if ref.Mode() != ledger.ModeExactFP8 {
		t.Fatalf("mode %q", ref.Mode())
	}
	g, runs, err := ref.Record(context.Background(), ps, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		slots int
		place engine.Placement
	}{{0, engine.PlaceHost}, {0, engine.PlaceDevice}, {6, engine.PlaceRandom}, {6, engine.PlaceBalance}, {100000, engine.PlaceAuto}} {
		r, err := Open(context.Background(), dir, Options{Threads: 2, Placement: c.place,
			NewBackend: func() (backend.Backend, error) {
				return backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: c.slots, VerifyCopies: true}), nil
			},
			Tier: &tier.Options{RAMBudget: 1 << 20, StagingBudget: 64 << 10, Readers: 2}})
		if err != nil {
			t.Fatal(err)
		}
		diffs, err := r.Replay(context.Background(), g, runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			if !d.Exact() {
				t.Errorf("%d slots, placement %q: prompt %d: %+v", c.slots, c.place, d.Index, d)
			}
		}
		st := r.Tier.Stats()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d slots, placement %q: device %+v, RAM %+v", c.slots, c.place, st.Device, st.RAM)
		if c.slots > 0 && (st.Device.Uses == 0 || st.Device.Hits == 0) {
			t.Errorf("%d slots: device level %+v", c.slots, st.Device)
		}
	}
	// A bit flipped between the host's check and the device in every copy
	// of layer 0's experts: the device's check of the copy (codes and
	// scales, the record's bytes) stops the run, naming the expert.
	var be backend.Backend
	r, err := Open(context.Background(), dir, Options{Threads: 1, Placement: engine.PlaceDevice,
		NewBackend: func() (backend.Backend, error) {
			be = backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 1, Slots: 4, VerifyCopies: true})
			return be, nil
		},
		Tier: &tier.Options{RAMBudget: 1 << 20, StagingBudget: 64 << 10, Readers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for e := range r.Config.Experts {
		ref, err := r.Checkpoint.ExpertRef(0, e)
		if err != nil {
			t.Fatal(err)
		}
		backendtest.CorruptCopies(be, ref.Digest(), true)
	}
	if _, err := r.Replay(context.Background(), g, runs, nil); !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), "layer 0 expert") {
		t.Errorf("a corrupted copy of a block-FP8 expert: %v; want a verification error naming it", err)
	}
}
