package decodebench

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/tier/sim"
	"github.com/tarfa-ai/tarfa/validation/synth"
	"github.com/tarfa-ai/tarfa/weights"
)

func defaultModel(t *testing.T) string {
	t.Helper()
	dir, _, err := synth.EnsureDefault(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRun(t *testing.T) {
	dir := defaultModel(t)
	var calls int64
	res, err := Run(context.Background(), dir, Options{Threads: 1, Readers: 3, RAMFractions: []float64{0.25, 1}, Prefetch: true,
		DecodeTokens: 5, Repeat: 2, Ledger: true, NoDrop: true, Progress: func(done, total int64) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Identical || res.Generations < 2*(4+2) || res.Digest == "" {
		t.Errorf("bit identity: identical %v over %d generations, digest %q", res.Identical, res.Generations, res.Digest)
	}
	arms := int64(4 + 4 + 2)
	if calls != 2*arms+1 {
		t.Errorf("progress called %d times, want %d", calls, 2*arms+1)
	}
	if res.Raw.Bytes == 0 || res.Raw.Bytes != res.Verified.Bytes || res.Raw.Reads != int64(res.MoELayers*res.Experts) {
		t.Errorf("raw %+v verified %+v", res.Raw, res.Verified)
	}
	if res.Raw.GBps.N != 2 || !(res.VerifiedRatio > 0) || res.RatioPerRound.N != 2 || !(res.HashPerCore.GBps.Median > 0) {
		t.Errorf("bandwidths: raw %+v ratio %v per round %+v hash %+v", res.Raw.GBps, res.VerifiedRatio, res.RatioPerRound, res.HashPerCore.GBps)
	}
	if len(res.Decode) != 4 {
		t.Fatalf("%d decode figures", len(res.Decode))
	}
	for _, d := range res.Decode {
		if d.SecondsPerToken.N != 2 || !(d.SecondsPerToken.Median > 0) || d.HitRate.Median < 0 || d.HitRate.Median > 1 {
			t.Errorf("%s: %+v", d.Name, d)
		}
		if d.RAMSlots != int(math.Ceil(d.RAMFraction*float64(res.MoELayers*res.Experts))) {
			t.Errorf("%s: %d RAM slots", d.Name, d.RAMSlots)
		}
		// every decode is predicted from its own trace
		if d.Predicted.N != 2 || !(d.Predicted.Median > 0) {
			t.Errorf("%s: predicted %+v", d.Name, d.Predicted)
		}
		if !d.Warm && d.RAMFraction == 0.25 && !(d.StorageBytesPerToken.Median > 0 && d.BoundSecondsPerToken > 0 && d.RatioToBound > 0) {
			t.Errorf("%s: a quarter of the experts resident, cold, but %v bytes per token from storage", d.Name, d.StorageBytesPerToken)
		}
		// The simulator replays the engine's own hints: it prefetches where
		// the hierarchy did (cold, a quarter resident), and times Streams.
		// (On this random-weight model the hints seldom come true, so their
		// ranks are scored and not read ahead: the simulator must agree.)
		if !d.Warm && d.RAMFraction == 0.25 && (d.PrefetchIssued+d.PrefetchSkipped == 0 || (d.PrefetchIssued == 0) != (d.PredictedPrefetchIssued == 0)) {
			t.Errorf("%s: prefetch issued %d (%d skipped), simulated %d", d.Name, d.PrefetchIssued, d.PrefetchSkipped, d.PredictedPrefetchIssued)
		}
		if d.StreamSecondsPerToken.N != 2 || !(d.StreamSecondsPerToken.Median > 0) || !(d.GapSecondsPerToken.Median > 0) || !(d.PredictedStreamSecondsPerToken.Median > 0) {
			t.Errorf("%s: streams %+v gaps %+v predicted %+v", d.Name, d.StreamSecondsPerToken, d.GapSecondsPerToken, d.PredictedStreamSecondsPerToken)
		}
		// What it reads then is speculative: a prefetch hint may name an
		// expert the prompt never routes to.
		if d.Warm && d.RAMFraction == 1 && d.DemandReadBytes != 0 {
			t.Errorf("%s: every expert resident after a generation of the same prompt, yet the decode read %d bytes for its own uses (%v bytes per token in all, prefetches included)", d.Name, d.DemandReadBytes, d.StorageBytesPerToken)
		}
	}
	if res.Ledger == nil || res.Ledger.With.N != 2 || res.Ledger.Without.N != 2 || math.IsNaN(res.Ledger.Overhead) {
		t.Errorf("ledger %+v", res.Ledger)
	}
	phases := map[sim.Phase]bool{}
	for _, f := range res.Fits {
		phases[f.Phase] = true
	}
	// On the tiny model the token's own work (its LM head, sampling) can
	// measure shorter than a layer's under load: then the token phase is
	// left out, and the result says why.
	unfitted := map[sim.Phase]string{}
	for _, u := range res.Unfitted {
		unfitted[u.Phase] = u.Reason
		if phases[u.Phase] {
			t.Errorf("phase %s both fitted and unfitted (%s)", u.Phase, u.Reason)
		}
	}
	for _, p := range []sim.Phase{sim.PhaseRead, sim.PhaseHash, sim.PhaseCPUExpert, sim.PhaseDense, sim.PhaseToken} {
		if !phases[p] && (p != sim.PhaseToken || unfitted[p] == "") {
			t.Errorf("calibration has no %s fit: %+v, unfitted %+v", p, res.Fits, res.Unfitted)
		}
	}
	if res.Hardware.QueueDepth != 3 || res.CacheDropped {
		t.Errorf("hardware %+v, cache dropped %v", res.Hardware, res.CacheDropped)
	}
}

func TestRunRefuses(t *testing.T) {
	dir := defaultModel(t)
	for _, o := range []Options{
		{DecodeTokens: 1, Repeat: 1},
		{DecodeTokens: 3, Repeat: 0},
		{DecodeTokens: 3, Repeat: 1, RAMFractions: []float64{0}},
		{DecodeTokens: 3, Repeat: 1, RAMFractions: []float64{1.5}},
		{DecodeTokens: 3, Repeat: 1, RAMFractions: []float64{math.NaN()}},
	} {
		o.NoDrop = true
		if _, err := Run(context.Background(), dir, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, dir, Options{DecodeTokens: 3, Repeat: 1, NoDrop: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
}

// TestRunCounters checks each decode figure's counters against what a
// decode step must do on the default model: every routed expert use (top-k
// per MoE layer and token) computed on the backend, each streamed one
// copied whole to the (simulated) device when the placement puts it there,
// none copied when it puts it on the host or on the CPU backend; and the
// placement a device backend gets when none is given (auto) is one the
// engine accepts.
func TestRunCounters(t *testing.T) {
	dir := defaultModel(t)
	for _, c := range []struct {
		name  string
		place engine.Placement
		dev   bool
		pin   bool
	}{{"cpu", "", false, false}, {"device", engine.PlaceDevice, true, false}, {"device-pinned", engine.PlaceDevice, true, true}, {"host", engine.PlaceHost, true, false}, {"device-auto", engine.PlaceAuto, true, false}} {
		t.Run(c.name, func(t *testing.T) {
			// A RAM tier of one expert: most reads stream through the
			// staging buffers.
			opt := Options{Threads: 1, Readers: 2, RAMFractions: []float64{0.01}, DecodeTokens: 4, Repeat: 1, NoDrop: true}
			if c.dev {
				opt.Backends = []Backend{{Name: "fake-device", Placement: c.place, PinSlots: c.pin, New: func() (backend.Backend, error) { return backendtest.NewDevice(1, 0), nil }}}
			}
			res, err := Run(context.Background(), dir, opt)
			if err != nil {
				t.Fatal(err)
			}
			uses := float64(res.TopK * res.MoELayers)
			for _, d := range res.Decode {
				onBackend, onHost := d.ExpertsOnDevicePerToken.Median, d.ExpertsOnHostPerToken.Median
				if onBackend+onHost != uses {
					t.Errorf("%s: %v experts per token on the backend and %v on the host, want %v in all", d.Name, onBackend, onHost, uses)
				}
				wantCopied := 0.0
				if c.place == engine.PlaceDevice {
					wantCopied = uses * float64(res.ExpertBytes)
					if onHost != 0 || d.ExpertsResidentPerToken.Median != 0 {
						t.Errorf("%s: placement device, no slots: %v on the host, %v resident", d.Name, onHost, d.ExpertsResidentPerToken.Median)
					}
				}
				if c.place == engine.PlaceAuto && c.dev {
					// No staging buffers: each expert auto puts on the
					// device is copied to it whole.
					wantCopied = onBackend * float64(res.ExpertBytes)
				}
				if c.place == engine.PlaceHost && onHost != uses {
					t.Errorf("%s: placement host: %v of %v on the host", d.Name, onHost, uses)
				}
				// Pinned slots: every expert copied to the device came from
				// where it lay, the staging buffers or the RAM tier's (both
				// pinned); else none.
				wantDirect := 0.0
				if c.pin {
					wantDirect = d.ExpertH2DBytesPerToken.Median / float64(res.ExpertBytes)
					if d.StreamedPerToken.Median == 0 {
						t.Errorf("%s: nothing streamed through the staging buffers", d.Name)
					}
				}
				if got := d.ExpertsDirectPerToken.Median; math.Abs(got-wantDirect) > 1e-9 {
					t.Errorf("%s: %v experts per token copied from pinned slots, want %v", d.Name, got, wantDirect)
				}
				if got := d.ExpertH2DBytesPerToken.Median; got != wantCopied {
					t.Errorf("%s: %v expert bytes per token to the device, want %v", d.Name, got, wantCopied)
				}
				if !c.dev && (d.H2DBytesPerToken.Max != 0 || d.GPUBusy.Max != 0) {
					t.Errorf("%s: the cpu backend copied %v bytes per token, busy %v", d.Name, d.H2DBytesPerToken, d.GPUBusy)
				}
				if c.dev && !(d.H2DBytesPerToken.Median > d.ExpertH2DBytesPerToken.Median) {
					t.Errorf("%s: %v bytes per token to the device, no activations", d.Name, d.H2DBytesPerToken)
				}
				if d.Hashers != runtime.GOMAXPROCS(0) || d.HashedBytesPerToken.Median != d.StorageBytesPerToken.Median {
					t.Errorf("%s: %d hashers, %v bytes hashed per token, %v read", d.Name, d.Hashers, d.HashedBytesPerToken, d.StorageBytesPerToken)
				}
			}
			for _, d := range res.Decode {
				if d.Backend.Name != map[bool]string{false: "cpu", true: "fake-device"}[c.dev] || d.Residency == nil {
					t.Errorf("%s: backend %q, residency %+v", d.Name, d.Backend.Name, d.Residency)
				}
			}
		})
	}
}

// TestRunDeviceCache runs a device backend that keeps routed experts in its
// own memory next to the cpu backend: those uses never reach the hierarchy,
// so the device's decodes are measured but not predicted (their streams
// hold fewer than top-k experts a layer), and the cpu decodes, on the
// backend the simulator is calibrated on, are predicted.
func TestRunDeviceCache(t *testing.T) {
	dir := defaultModel(t)
	opt := Options{Threads: 1, Readers: 2, RAMFractions: []float64{0.25}, DecodeTokens: 6, Repeat: 1, NoDrop: true, Ledger: true,
		Backends: []Backend{{Name: "cpu"}, {Name: "fake-device", New: func() (backend.Backend, error) { return backendtest.NewDevice(1, 64), nil }}}}
	res, err := Run(context.Background(), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	var cpu, dev int
	for _, d := range res.Decode {
		switch d.Backend.Name {
		case "cpu":
			cpu++
			if d.NotPredicted != "" || d.Predicted.N != 1 {
				t.Errorf("%s: not predicted (%q), %+v", d.Name, d.NotPredicted, d.Predicted)
			}
		default:
			dev++
			if d.NotPredicted == "" || d.Predicted.N != 0 {
				t.Errorf("%s: predicted %+v, want none", d.Name, d.Predicted)
			}
			if d.Warm && d.ExpertsResidentPerToken.Median == 0 {
				t.Errorf("%s: warm, 64 staging buffers, no expert resident on the device", d.Name)
			}
		}
	}
	if cpu != 2 || dev != 2 {
		t.Errorf("%d cpu and %d device decodes, want 2 and 2", cpu, dev)
	}
}

// ReadBound reads every routed expert record, aligned, once per job count.
func TestReadBound(t *testing.T) {
	dir := defaultModel(t)
	res, err := ReadBound(context.Background(), dir, []int{1, 3}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := weights.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg := ck.Config()
	var want int64
	n := 0
	for l, sp := range cfg.Sparse {
		for e := 0; sp && e < cfg.Experts; e++ {
			r, err := ck.ExpertRef(l, e)
			if err != nil {
				t.Fatal(err)
			}
			want += r.ReadLength()
			n++
		}
	}
	if res.Bytes != want || res.Experts != n || n == 0 {
		t.Fatalf("read %d records of %d bytes; the model has %d of %d", res.Experts, res.Bytes, n, want)
	}
	if len(res.Figures) != 2 || res.Figures[0].Jobs != 1 || res.Figures[1].Jobs != 3 || res.Best.GBps <= 0 || res.CacheDropped {
		t.Fatalf("figures %+v, best %+v, dropped %v", res.Figures, res.Best, res.CacheDropped)
	}
	if _, err := ReadBound(context.Background(), dir, []int{0}, true, true); err == nil {
		t.Fatal("0 reads in flight accepted")
	}
}

// TestRunDevicePrefetch: a device backend listed with and without
// DevicePrefetch, decodes only: the timed decode steps with it copy hinted
// experts into device slots and then bind them (the timing wrapper passes
// the engine's expertstream.Prefiller on to the hierarchy), those without
// it copy none, and every generation's logits are the first one's.
func TestRunDevicePrefetch(t *testing.T) {
	dir := defaultModel(t)
	dev := func() (backend.Backend, error) {
		return backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 1, Slots: 12}), nil
	}
	opt := Options{Threads: 1, Readers: 2, RAMFractions: []float64{1}, DecodeTokens: 12, Repeat: 2, NoDrop: true, DecodeOnly: true,
		Backends: []Backend{{Name: "fake-device", Placement: engine.PlaceDevice, New: dev},
			{Name: "fake-device", Placement: engine.PlaceDevice, New: dev, DevicePrefetch: true}}}
	res, err := Run(context.Background(), dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Identical || res.Generations < 2*len(res.Decode) {
		t.Errorf("%d generations, identical %v", res.Generations, res.Identical)
	}
	if !res.DecodeOnly || res.Raw.Bytes != 0 || res.Raw.GBps.N != 0 || len(res.Fits) != 0 {
		t.Errorf("decode only: raw %+v, fits %v", res.Raw, res.Fits)
	}
	if len(res.Decode) != 4 {
		t.Fatalf("%d decode figures, want 4", len(res.Decode))
	}
	for _, d := range res.Decode {
		on := d.Backend.DevicePrefetch
		t.Logf("%s: %.4f s/token, device hits %d of %d, prefetched %d, used %d, unused %d, skipped %d", d.Name, d.SecondsPerToken.Median,
			d.DeviceHits, d.DeviceUses, d.DevicePrefetched, d.DevicePrefetchUsed, d.DevicePrefetchUnused, d.DevicePrefetchSkipped)
		if d.SecondsPerToken.N != 2 || !strings.HasPrefix(d.NotPredicted, "decode only") {
			t.Errorf("%s: %d rounds summarized, not predicted %q", d.Name, d.SecondsPerToken.N, d.NotPredicted)
		}
		if !on && d.DevicePrefetched+d.DevicePrefetchSkipped != 0 {
			t.Errorf("%s: no device prefetch, %d copied and %d skipped", d.Name, d.DevicePrefetched, d.DevicePrefetchSkipped)
		}
		if on && d.Warm && (d.DevicePrefetched == 0 || d.DevicePrefetchUsed == 0) {
			t.Errorf("%s: device prefetch on, warm: %d copied, %d used", d.Name, d.DevicePrefetched, d.DevicePrefetchUsed)
		}
		if on != strings.Contains(d.Name, "device prefetch") {
			t.Errorf("figure %q: device prefetch %v", d.Name, on)
		}
	}
}
