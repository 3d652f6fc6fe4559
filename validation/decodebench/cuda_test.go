//go:build cuda

package decodebench

import (
	"context"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cuda"
	"github.com/tarfa-ai/tarfa/engine"
)

// TestCUDAPinnedSlots (on a GPU: -tags cuda) runs the decodes of the
// default model on the cpu backend and on cuda with the hierarchy's device
// slots pinned by the backend and without: the logits must be the same
// bits, every expert copied to the device must be copied from where it lies
// when the tier's buffers are pinned (its staging buffers and its RAM
// tier's: no staging copy), and none when they are not. The cuda backends keep no expert resident (every expert
// not in the RAM tier is streamed each time) and compute every one on the
// device.
func TestCUDAPinnedSlots(t *testing.T) {
	dir := defaultModel(t)
	open := func() (backend.Backend, error) {
		return cuda.New(cuda.Options{ExpertSlots: -1, Threads: 2, Timing: true})
	}
	res, err := Run(context.Background(), dir, Options{Threads: 2, Readers: 2, RAMFractions: []float64{0.01}, DecodeTokens: 4, Repeat: 1, NoDrop: true,
		Backends: []Backend{{Name: "cpu"}, {Name: "cuda", Placement: engine.PlaceDevice, PinSlots: true, New: open},
			{Name: "cuda", Placement: engine.PlaceDevice, New: open}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Identical {
		t.Errorf("logits differ between the cpu and cuda generations")
	}
	for _, d := range res.Decode {
		t.Logf("%s: direct %v, streamed %v per token, %v expert bytes to the device", d.Name, d.ExpertsDirectPerToken.Median, d.StreamedPerToken.Median, d.ExpertH2DBytesPerToken.Median)
		want := 0.0
		if d.Backend.PinSlots {
			want = d.ExpertsOnDevicePerToken.Median - d.ExpertsResidentPerToken.Median
			if d.StreamedPerToken.Median == 0 || want <= d.StreamedPerToken.Median {
				t.Errorf("%s: %v streamed through the staging buffers, %v copied: want both, from the RAM tier too", d.Name, d.StreamedPerToken.Median, want)
			}
		}
		if d.ExpertsDirectPerToken.Median != want {
			t.Errorf("%s: %v experts per token copied from pinned slots, want %v", d.Name, d.ExpertsDirectPerToken.Median, want)
		}
		if d.Backend.Name == "cuda" && !(d.KernelSecondsPerToken.Median > 0 && d.GPUBusy.Median > 0 && d.GPUBusy.Median <= 1) {
			t.Errorf("%s: kernel time %v s per token, GPU busy %v", d.Name, d.KernelSecondsPerToken, d.GPUBusy)
		}
	}
}
