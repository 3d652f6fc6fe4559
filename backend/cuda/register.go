package cuda

import "github.com/tarfa-ai/tarfa/backend"

// The CUDA backend registers as "cuda" (backend.Open) in every build: in a
// binary built without -tags cuda, New is the stub whose error names the
// fix (ErrNotBuilt), so asking for cuda says why rather than that the name
// is unknown.
func init() {
	backend.Register("cuda", func(o backend.Options) (backend.Backend, error) {
		return New(Options{Device: o.Device, VRAMBudget: o.VRAMBudget, Threads: o.Threads, Timing: o.Timing, VerifyCopies: o.VerifyCopies})
	})
}
