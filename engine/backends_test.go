package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cuda" // registers "cuda"; the engine itself imports no backend for OpenBackend
)

// TestOpenBackend checks that the backends Tarfa ships (Backends) are those
// that register themselves, and that OpenBackend keeps its errors now that
// it opens them through the registry: "" is the reference, a budget on the
// CPU and an unknown name are refused, and cuda in a build without it names
// the fix.
func TestOpenBackend(t *testing.T) {
	if got := backend.Registered(); !slices.Equal(got, Backends) {
		t.Fatalf("registered backends %q, want engine.Backends %q", got, Backends)
	}
	be, err := OpenBackend("", BackendOptions{Threads: 1})
	if err != nil || be.Name() != "cpu" {
		t.Fatalf(`OpenBackend("") = %v, %v; want the cpu backend`, be, err)
	}
	if _, err := OpenBackend("cpu", BackendOptions{VRAMBudget: 1 << 20}); err == nil || err.Error() != "engine: backend cpu: a device-memory budget needs a device backend, not cpu" {
		t.Fatalf("cpu with a budget: %v", err)
	}
	if _, err := OpenBackend("tpu", BackendOptions{}); err == nil || err.Error() != `engine: backend "tpu": want cpu or cuda` {
		t.Fatalf("unknown backend: %v", err)
	}
	if !cuda.Built {
		_, err := OpenBackend("cuda", BackendOptions{})
		if !errors.Is(err, cuda.ErrNotBuilt) || err.Error() != "engine: backend cuda: "+cuda.ErrNotBuilt.Error() {
			t.Fatalf("cuda without the cuda tag: %v", err)
		}
	}
}
