//go:build cuda

package cuda

import (
	"os"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/engine/backend"
	"github.com/tarfa-ai/tarfa/engine/backendtest"
)

// open returns a CUDA backend or, without a usable GPU, skips the test —
// unless TARFA_TEST_DISALLOW_SKIP is set (as on the GPU machine), where a
// missing GPU fails it. (gorgonia.org/cu exits the process at start on a
// machine without a driver, so a -tags cuda test binary fails there anyway.)
func open(t *testing.T, o Options) backend.Backend {
	t.Helper()
	be, err := New(o)
	if err != nil {
		if os.Getenv("TARFA_TEST_DISALLOW_SKIP") != "" {
			t.Fatalf("no CUDA backend: %v", err)
		}
		t.Skipf("no CUDA backend: %v", err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return be
}

// TestCUDA runs the conformance suite on the whole device: every weight
// and every routed expert resident.
func TestCUDA(t *testing.T) {
	be := open(t, Options{})
	t.Logf("%+v", be.Residency())
	backendtest.Run(t, be, backendtest.Options{})
	r := be.Residency()
	if r.HostWeightCount != 0 || r.ExpertSlots == 0 {
		t.Errorf("whole device: %d weights on the host, %d expert slots; want none and some", r.HostWeightCount, r.ExpertSlots)
	}
}

// TestCUDATightBudget runs the suite under a budget that leaves room for a
// few weights only: the rest, the embedding tables and every routed expert
// are computed on the host, with the same bits; the memory in use never
// exceeds the budget and Residency says where everything is.
func TestCUDATightBudget(t *testing.T) {
	probe := open(t, Options{})
	used := probe.Residency().InUse
	budget := used + DefaultReserve + 3<<20
	be := open(t, Options{VRAMBudget: budget, Reserve: DefaultReserve})
	backendtest.Run(t, be, backendtest.Options{})
	r := be.Residency()
	t.Logf("%+v", r)
	if r.InUse > budget {
		t.Errorf("%d bytes in use, budget %d", r.InUse, budget)
	}
	if r.HostWeightCount == 0 || r.DeviceWeightCount == 0 {
		t.Errorf("budget of %d MiB over %d MiB in use: %d weights on the device, %d on the host; want some on each",
			budget>>20, used>>20, r.DeviceWeightCount, r.HostWeightCount)
	}
	if !slices.ContainsFunc(r.HostResident, func(n string) bool { return n == "w.bf16.300x257" }) {
		t.Errorf("the embedding-table kind of weight is not on the host under a budget: %v", r.HostResident)
	}
}

// TestCUDAFewSlots: fewer resident expert slots than the suite's experts
// (evictions, streamed experts in transient slots), and none at all.
func TestCUDAFewSlots(t *testing.T) {
	for _, n := range []int{2, -1} {
		be := open(t, Options{ExpertSlots: n})
		backendtest.Run(t, be, backendtest.Options{Short: true})
		r := be.Residency()
		t.Logf("%+v", r)
		if want := max(n, 0); r.ExpertSlots != want {
			t.Errorf("ExpertSlots %d: %d slots, want %d", n, r.ExpertSlots, want)
		}
	}
}

// TestBudgetRefused: a budget below what is already in use is an error
// naming both.
func TestBudgetRefused(t *testing.T) {
	probe := open(t, Options{})
	used := probe.Residency().InUse
	if _, err := New(Options{VRAMBudget: used / 2}); err == nil {
		t.Fatalf("a budget of %d bytes with %d in use: no error", used/2, used)
	} else {
		t.Log(err)
	}
}
