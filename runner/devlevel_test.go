package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/tier"
)

// TestDeviceLevelReplay: on a simulated device backend with expert slots
// (every copy checked against its digest), Open gives the tier the
// backend's slots as its device level; golden replays recorded on the CPU
// reference are exact, inclusive and exclusive, with few slots and with
// one for every expert, and the device level serves hits.
func TestDeviceLevelReplay(t *testing.T) {
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
	for _, c := range []struct {
		slots     int
		exclusive bool
	}{{8, false}, {100000, false}, {100000, true}} {
		r, err := Open(context.Background(), dir, Options{Threads: 1,
			NewBackend: func() (backend.Backend, error) {
				return backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 1, Slots: c.slots, VerifyCopies: true}), nil
			},
			Tier: &tier.Options{RAMBudget: 1 << 20, StagingBudget: 64 << 10, Readers: 2, Exclusive: c.exclusive}})
		if err != nil {
			t.Fatal(err)
		}
		diffs, err := r.Replay(context.Background(), g, runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			if !d.Exact() {
				t.Errorf("%d slots, exclusive %v: prompt %d: %+v", c.slots, c.exclusive, d.Index, d)
			}
		}
		st := r.Tier.Stats()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d slots, exclusive %v: device %+v, RAM %+v", c.slots, c.exclusive, st.Device, st.RAM)
		if st.Device.Capacity == 0 || st.Device.Uses == 0 || st.Device.Hits == 0 || st.RAM.Uses != st.Device.Uses-st.Device.Hits {
			t.Errorf("%d slots: device level %+v, RAM %+v", c.slots, st.Device, st.RAM)
		}
	}
}
