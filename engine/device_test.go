package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/tarfa-ai/tarfa/engine/backendtest"
)

// TestDeviceBackendPlacements runs every reference prompt on a simulated
// device backend (deferred execution, its own memory, experts resident by
// digest) under every placement of the routed experts between the device
// and the host, with no, few and all experts resident: the logits must
// have the pinned digests of the CPU reference (TestCanonicalLogits), and
// the placements must really differ. (Three slots are too few for hits
// with first-in-first-out eviction over four MoE layers: they check that
// evicted copies are not used.)
func TestDeviceBackendPlacements(t *testing.T) {
	for _, c := range conformance {
		for _, pl := range []Placement{PlaceDevice, PlaceHost, PlaceRandom, PlaceAuto} {
			for _, slots := range []int{0, 3, 1000} {
				t.Run(fmt.Sprintf("%s/%s/slots=%d", c.ckpt, pl, slots), func(t *testing.T) {
					ref := readReference(t, c.fixture)
					m := loadWith(t, c.ckpt, Options{Backend: backendtest.NewDevice(2, slots), Placement: pl, ExpertCacheBytes: -1})
					defer m.Close()
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
					t.Logf("experts on the device %d (resident %d), on the host %d", st.ExpertsOnDevice, st.ExpertDeviceHits, st.ExpertsOnHost)
					switch {
					case pl == PlaceDevice && st.ExpertsOnHost != 0:
						t.Errorf("placement device computed %d experts on the host", st.ExpertsOnHost)
					case pl == PlaceHost && st.ExpertsOnHost != st.ExpertsOnDevice-st.ExpertDeviceHits+st.ExpertsOnHost:
						t.Errorf("placement host: %d of the streamed experts on the device", st.ExpertsOnDevice-st.ExpertDeviceHits)
					case pl == PlaceRandom && (st.ExpertsOnHost == 0 || st.ExpertsOnDevice == st.ExpertDeviceHits):
						t.Errorf("placement random used one side only")
					}
					if slots >= 1000 && pl != PlaceHost && st.ExpertDeviceHits == 0 {
						t.Errorf("room for every expert on the device and none served from it")
					}
					if (slots == 0 || pl == PlaceHost) && st.ExpertDeviceHits != 0 {
						t.Errorf("%d experts served from %d device slots", st.ExpertDeviceHits, slots)
					}
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
				opt := Options{ExpertCacheBytes: -1}
				if dev {
					opt.Backend = backendtest.NewDevice(2, 4)
					opt.Placement = PlaceRandom
				}
				m := loadWith(t, c.ckpt, opt)
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
