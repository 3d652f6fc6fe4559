//go:build cuda

package engine

import (
	"fmt"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	_ "github.com/tarfa-ai/tarfa/backend/cuda" // registers "cuda" for OpenBackend
)

// TestCUDACounters runs the reference prompts on the CUDA backend (a GPU
// is needed: build with -tags cuda) under every placement, with the whole
// device and under a budget, and checks its counters (backend.Meter)
// against what the model did, as for the simulated device, and that the
// event-timed device seconds were measured. The logits must have the
// pinned digests of the CPU reference.
func TestCUDACounters(t *testing.T) {
	c := conformance[0]
	for _, pl := range []Placement{PlaceDevice, PlaceHost, PlaceRandom} {
		for _, budget := range []int64{0, 1 << 30} {
			t.Run(fmt.Sprintf("%s/budget=%d", pl, budget), func(t *testing.T) {
				be, err := OpenBackend("cuda", BackendOptions{Threads: 2, VRAMBudget: budget, Timing: true})
				if err != nil {
					t.Fatal(err)
				}
				defer be.Close()
				ref := readReference(t, c.fixture)
				m := loadWith(t, c.ckpt, Options{Backend: be, Placement: pl, ExpertCacheBytes: -1})
				defer m.Close()
				loaded := be.(backend.Meter).Counters()
				var all [][]float32
				for _, p := range ref.Prompts {
					s := m.NewSession()
					lg, err := s.Forward(p, true)
					if err != nil {
						t.Fatal(err)
					}
					all = append(all, lg...)
					s.Close()
				}
				if got, want := logitsDigest(all), canonicalLogits[c.fixture]; got != want {
					t.Errorf("logits digest %s, want %s", got, want)
				}
				run := be.(backend.Meter).Counters().Sub(loaded)
				t.Logf("%+v", run)
				checkDeviceCounters(t, m, loaded, run, 256, budget == 0)
				if run.Kernels == 0 || !(run.KernelSeconds > 0) || !(run.H2DSeconds > 0) {
					t.Errorf("%d kernels in %v s, copies %v s: device time not measured", run.Kernels, run.KernelSeconds, run.H2DSeconds)
				}
			})
		}
	}
}
