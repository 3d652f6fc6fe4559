package engine

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/engine/backend"
	"github.com/tarfa-ai/tarfa/engine/cpu"
	"github.com/tarfa-ai/tarfa/engine/cuda"
)

// Backends are the backend names OpenBackend knows.
var Backends = []string{"cpu", "cuda"}

// BackendOptions configures OpenBackend.
type BackendOptions struct {
	// Threads is the number of host goroutines per operation (0: all
	// cores): the CPU backend's, or the host side of a device backend.
	Threads int
	// VRAMBudget bounds a device backend's memory in bytes (0: the whole
	// device); an error for the CPU backend.
	VRAMBudget int64
	// Device is the device ordinal of a device backend.
	Device int
	// Timing makes a device backend measure the device time of its kernels
	// and copies (backend.Meter), for benchmarks.
	Timing bool
	// VerifyCopies makes a device backend hash every routed expert it copies
	// into device memory, there, against its digest (cuda.Options).
	VerifyCopies bool
}

// OpenBackend opens a backend by name: "cpu" (the reference) or "cuda" (an
// error naming the fix in a binary built without CUDA).
func OpenBackend(name string, o BackendOptions) (backend.Backend, error) {
	switch name {
	case "", "cpu":
		if o.VRAMBudget != 0 {
			return nil, fmt.Errorf("engine: a device-memory budget needs a device backend, not cpu")
		}
		return cpu.New(o.Threads), nil
	case "cuda":
		be, err := cuda.New(cuda.Options{Device: o.Device, VRAMBudget: o.VRAMBudget, Threads: o.Threads, Timing: o.Timing, VerifyCopies: o.VerifyCopies})
		if err != nil {
			return nil, fmt.Errorf("engine: backend cuda: %w", err)
		}
		return be, nil
	}
	return nil, fmt.Errorf("engine: backend %q: want cpu or cuda", name)
}
