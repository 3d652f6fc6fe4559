package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/backend/cpu"
)

// checkDeviceCounters checks a simulated device's counters against what the
// model did: at load, the bytes of every weight it uploaded (all of them:
// onDevice is false when some may stay on the host); since (run), for every
// expert the model placed on the device, one copy of the expert's bytes
// (each matrix padded to align bytes) or one computed on the host by the
// backend, and no use of a slot: without a source that places experts in
// device slots (the tier's device level), the engine keeps none.
func checkDeviceCounters(t *testing.T, m *Model, atLoad, run backend.Counters, align int64, allUploaded bool) {
	t.Helper()
	var up int64
	for _, w := range m.weights {
		up += w.Bytes()
	}
	if (allUploaded && atLoad.UploadBytes != up) || atLoad.UploadBytes > up || up == 0 {
		t.Errorf("counters: %d bytes uploaded at load, the model uploaded %d", atLoad.UploadBytes, up)
	}
	st := m.Stats()
	if run.ExpertsLoaded+run.HostExperts != st.ExpertsOnDevice || run.ExpertsCached != 0 {
		t.Errorf("counters: %d experts loaded, %d computed on the host, %d slot uses; the model placed %d experts on the device",
			run.ExpertsLoaded, run.HostExperts, run.ExpertsCached, st.ExpertsOnDevice)
	}
	cfg := m.Config()
	mat := (2*int64(cfg.Hidden)*int64(cfg.MoEIntermediate) + align - 1) / align * align // BF16
	per := 3 * mat
	if run.ExpertH2DBytes != run.ExpertsLoaded*per {
		t.Errorf("counters: %d expert bytes copied for %d experts of %d bytes", run.ExpertH2DBytes, run.ExpertsLoaded, per)
	}
	if run.H2DBytes <= run.ExpertH2DBytes || run.D2HBytes == 0 {
		t.Errorf("counters: %d bytes to the device (%d of experts), %d back: activations not counted", run.H2DBytes, run.ExpertH2DBytes, run.D2HBytes)
	}
}

// TestDeviceBackendPlacements runs every reference prompt on a simulated
// device backend (deferred execution, its own memory; with and without
// slots, which the engine's own source never fills) under every placement
// of the routed experts between the device and the host: the logits must
// have the pinned digests of the CPU reference (TestCanonicalLogits), and
// the placements must really differ. (The device level's slots are the
// tier's: runner.TestDeviceLevelReplay.)
func TestDeviceBackendPlacements(t *testing.T) {
	for _, c := range conformance {
		for _, pl := range []Placement{PlaceDevice, PlaceHost, PlaceRandom, PlaceAuto, PlaceBalance} {
			for _, slots := range []int{0, 3} {
				t.Run(fmt.Sprintf("%s/%s/slots=%d", c.ckpt, pl, slots), func(t *testing.T) {
					ref := readReference(t, c.fixture)
					be := backendtest.NewDevice(2, slots)
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
					st := m.Stats()
					t.Logf("experts on the device %d, on the host %d", st.ExpertsOnDevice, st.ExpertsOnHost)
					switch {
					case pl == PlaceDevice && st.ExpertsOnHost != 0:
						t.Errorf("placement device computed %d experts on the host", st.ExpertsOnHost)
					case pl == PlaceHost && st.ExpertsOnDevice != 0:
						t.Errorf("placement host: %d of the streamed experts on the device", st.ExpertsOnDevice)
					case pl == PlaceRandom && (st.ExpertsOnHost == 0 || st.ExpertsOnDevice == 0):
						t.Errorf("placement random used one side only")
					}
					checkDeviceCounters(t, m, loaded, be.(backend.Meter).Counters().Sub(loaded), 1, true)
				})
			}
		}
	}
}

// TestBatchMatchesSolo steps several sessions together — different prompt
// lengths, then decode steps, sessions joining and leaving — on the CPU and
// on the simulated device, and compares every session's logits with the
// same session run alone, bit for bit.
func TestBatchMatchesSolo(t *testing.T) {
	for _, c := range invarianceCkpts {
		for _, dev := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/device=%v", c.ckpt, dev), func(t *testing.T) {
				var opt Options
				if dev {
					opt.Backend = backendtest.NewDevice(2, 4)
					opt.Placement = PlaceRandom
				}
				m := loadResident(t, c.ckpt, opt)
				defer m.Close()
				toks := invarianceTokens(t, c.fixture)
				// Three sequences: prompts of 1, 5 and 11 tokens, each then
				// continued with tokens of its own.
				seqs := [][]int{toks[:1], toks[3:8], toks[10:21]}
				cont := func(i, step int) int { return toks[(7*i+3*step)%len(toks)] }
				solo := make([][][]float32, len(seqs))
				for i, p := range seqs {
					s := m.NewSession()
					lg, err := s.Forward(p, false)
					if err != nil {
						t.Fatal(err)
					}
					solo[i] = append(solo[i], lg[0])
					for step := range 6 {
						lg, err := s.Forward([]int{cont(i, step)}, false)
						if err != nil {
							t.Fatal(err)
						}
						solo[i] = append(solo[i], lg[0])
					}
				}
				b, err := m.NewBatch()
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				sess := []*Session{m.NewSession(), m.NewSession(), m.NewSession()}
				got := make([][][]float32, len(seqs))
				next := make([]int, len(seqs)) // steps taken by each session
				// Session 2 joins a step late; session 0 leaves a step early.
				for round := range 8 {
					var ss []*Session
					var ts [][]int
					var who []int
					for i := range seqs {
						if (i == 2 && round == 0) || next[i] > 6 {
							continue
						}
						ss = append(ss, sess[i])
						if next[i] == 0 {
							ts = append(ts, seqs[i])
						} else {
							ts = append(ts, []int{cont(i, next[i]-1)})
						}
						who = append(who, i)
					}
					if len(ss) == 0 {
						break
					}
					lg, err := b.Step(context.Background(), ss, ts)
					if err != nil {
						t.Fatal(err)
					}
					for j, i := range who {
						got[i] = append(got[i], lg[j])
						next[i]++
					}
				}
				for i := range seqs {
					if len(got[i]) != len(solo[i]) {
						t.Fatalf("session %d: %d batched steps, %d solo", i, len(got[i]), len(solo[i]))
					}
					for st := range got[i] {
						if !bitsEqual(got[i][st], solo[i][st]) {
							t.Errorf("session %d step %d: batched logits differ from solo", i, st)
						}
					}
				}
			})
		}
	}
}

// TestCPUCounters checks the CPU backend's counters: an expert taken by
// LoadExpert for every expert use the model computed on it, and nothing
// copied to a device.
func TestCPUCounters(t *testing.T) {
	c := conformance[0]
	be := cpu.New(2)
	m := loadResident(t, c.ckpt, Options{Backend: be})
	defer m.Close()
	ref := readReference(t, c.fixture)
	s := m.NewSession()
	defer s.Close()
	if _, err := s.Forward(ref.Prompts[0], true); err != nil {
		t.Fatal(err)
	}
	got, st := be.Counters(), m.Stats()
	if got.ExpertsLoaded != st.ExpertsOnDevice || got.ExpertsLoaded == 0 || st.ExpertsOnHost != 0 {
		t.Errorf("cpu counters: %d experts loaded, the model computed %d on its backend (%d on the host)", got.ExpertsLoaded, st.ExpertsOnDevice, st.ExpertsOnHost)
	}
	if got.H2DBytes != 0 || got.ExpertH2DBytes != 0 || got.UploadBytes != 0 || got.KernelSeconds != 0 {
		t.Errorf("cpu counters: %+v: a host backend copies nothing to a device", got)
	}
}
