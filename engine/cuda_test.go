//go:build cuda

package engine

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

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
				m := loadResident(t, c.ckpt, Options{Backend: be, Placement: pl})
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
				// By name: every launch timed under its operation's name,
				// the times summing to the total.
				var n int64
				var sec float64
				for name, k := range run.KernelTimes {
					if name == "" || k.Launches <= 0 || !(k.Seconds > 0) {
						t.Errorf("kernel times %q: %+v", name, k)
					}
					n, sec = n+k.Launches, sec+k.Seconds
				}
				if n != run.Kernels || math.Abs(sec-run.KernelSeconds) > 1e-6*(1+run.KernelSeconds) {
					t.Errorf("kernel times by name: %d launches in %v s, want the totals %d in %v s (%v)", n, sec, run.Kernels, run.KernelSeconds, run.KernelTimes)
				}
			})
		}
	}
}

// TestCUDADroppedSessions is the pattern of `tarfa validate hf --backend
// cuda` that crashed on the H200 after its PASS table (2026-12-02):
// sessions run (Generate through the session's own Batch, and Forward) and
// dropped without Close, the backend closed — after Model.Close, as the
// runner does, and without it — and the garbage collector running the
// dropped sessions' cleanups after that. Nothing may crash; no error is
// expected where the model was closed first.
func TestCUDADroppedSessions(t *testing.T) {
	c := conformance[0]
	prompt := readReference(t, c.fixture).Prompts[1]
	for _, closeModel := range []bool{true, false} {
		t.Run(fmt.Sprintf("modelClosed=%v", closeModel), func(t *testing.T) {
			be, err := OpenBackend("cuda", BackendOptions{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			m := loadResident(t, c.ckpt, Options{Backend: be})
			collected := make(chan struct{}, 4)
			for range 4 {
				s := m.NewSession()
				if _, err := Generate(context.Background(), s, prompt, GenOptions{MaxTokens: 3}, nil); err != nil {
					t.Fatal(err)
				}
				f := m.NewSession()
				if _, err := f.Forward(prompt, true); err != nil {
					t.Fatal(err)
				}
				runtime.AddCleanup(f, func(ch chan struct{}) { ch <- struct{}{} }, collected)
			}
			if closeModel {
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := be.Close(); err != nil {
				t.Fatal(err)
			}
			got := 0
			for i := 0; got < 4 && i < 300; i++ {
				runtime.GC()
				select {
				case <-collected:
					got++
				case <-time.After(10 * time.Millisecond):
				}
			}
			if got < 4 {
				t.Fatalf("%d of 4 dropped sessions collected", got)
			}
			for range 5 {
				runtime.GC()
				time.Sleep(20 * time.Millisecond)
			}
			if !closeModel {
				m.Close() // after the backend: every call refused, none crashes
			}
		})
	}
}
