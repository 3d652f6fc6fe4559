package tier

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
)

// phase is a stretch of the read-ahead tests' routing: its tokens, the
// stable experts every token of a layer uses, and how often the engine's
// hint names each of the others right.
type phase struct {
	tokens, stable int
	right          float64
}

// engineSteps is routing of the phases one after the other over layers ×
// experts, top-k, with the hints the engine gives before each step for the
// next one: for a layer after the first, the router's prediction of its
// experts then the experts the previous token used there; for the first
// layer (given after the last one), the experts this token used there.
func engineSteps(seed uint64, layers, experts, k int, phases ...phase) (sets [][]int, hints [][]int) {
	rng := rand.New(rand.NewPCG(seed, 3))
	other := func(a, b []int) int {
		for {
			if e := rng.IntN(experts); !slices.Contains(a, e) && !slices.Contains(b, e) {
				return e
			}
		}
	}
	var right []float64 // by step
	for _, ph := range phases {
		for range ph.tokens {
			for l := range layers {
				var set []int
				for j := range ph.stable {
					set = append(set, (l*5+j)%experts)
				}
				for len(set) < k {
					set = append(set, other(set, nil))
				}
				sets = append(sets, set)
				right = append(right, ph.right)
			}
		}
	}
	hints = make([][]int, len(sets))
	for i := range len(sets) - 1 {
		next, l := i+1, (i+1)%layers
		var xs []int
		add := func(e int) {
			if !slices.Contains(xs, e) {
				xs = append(xs, e)
			}
		}
		if l > 0 {
			for _, e := range sets[next] {
				if rng.Float64() < right[next] {
					add(e)
				} else {
					add(other(xs, sets[next]))
				}
			}
			if next >= layers {
				for _, e := range sets[next-layers] {
					add(e)
				}
			}
		} else {
			for _, e := range sets[i+1-layers] {
				add(e)
			}
		}
		hints[i] = xs
	}
	return sets, hints
}

// slowConsumer computes each expert for compute (a sleep).
type slowConsumer struct{ compute time.Duration }

func (c slowConsumer) Consume(int, expertstream.Placed, ledger.Tier) error {
	time.Sleep(c.compute)
	return nil
}

// readAheadBench is a hierarchy over the test model with a fake storage:
// every read takes read, two at a time, hashed on one core; every step
// spends dense before its Stream and compute per expert.
type readAheadBench struct {
	h                    *Hierarchy
	layers               int
	read, dense, compute time.Duration
}

func newReadAheadBench(t *testing.T, read, dense, compute time.Duration) *readAheadBench {
	t.Helper()
	ck := openCk(t, testModel(t))
	cfg := ck.Config()
	for l, sp := range cfg.Sparse {
		if !sp {
			t.Fatalf("layer %d of the test model is dense", l)
		}
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 16 * size, StagingBudget: 4 * size, Readers: 2, Hashers: 1, Policy: "lru", Prefetch: true, Direct: DirectOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.files.slow = func() { time.Sleep(read) }
	return &readAheadBench{h: h, layers: cfg.Layers, read: read, dense: dense, compute: compute}
}

// run streams the steps of tokens [from, to) and returns the counters of
// those tokens (their reads ahead settled).
func (b *readAheadBench) run(t *testing.T, sets, hints [][]int, from, to int) Stats {
	t.Helper()
	b.h.Settle()
	before := b.h.Stats()
	for i := from * b.layers; i < to*b.layers; i++ {
		time.Sleep(b.dense)
		if len(hints[i]) > 0 {
			b.h.Hint((i+1)%b.layers, hints[i])
		}
		if err := b.h.Stream(context.Background(), i%b.layers, sets[i], slowConsumer{b.compute}); err != nil {
			t.Fatal(err)
		}
	}
	b.h.Settle()
	after := b.h.Stats()
	return Stats{PrefetchIssued: after.PrefetchIssued - before.PrefetchIssued, PrefetchUseful: after.PrefetchUseful - before.PrefetchUseful,
		PrefetchSkipped: after.PrefetchSkipped - before.PrefetchSkipped, PrefetchBackedOff: after.PrefetchBackedOff - before.PrefetchBackedOff,
		PrefetchProbes: after.PrefetchProbes - before.PrefetchProbes, PrefetchUnused: after.PrefetchUnused - before.PrefetchUnused,
		PrefetchLate: after.PrefetchLate - before.PrefetchLate, PrefetchSavedSeconds: after.PrefetchSavedSeconds - before.PrefetchSavedSeconds,
		PrefetchUnusedSeconds: after.PrefetchUnusedSeconds - before.PrefetchUnusedSeconds}
}

func hintedOf(s Stats) int64 { return s.PrefetchIssued + s.PrefetchSkipped + s.PrefetchBackedOff }

// The hierarchy's read ahead over a fake storage (every read 2 ms, two at a
// time): (a) on uniform routing with a weak predictor the reads ahead fall
// to nearly none after the warm-up; (b) on local routing they go on and are
// used; (c) after a switch from uniform to local they come back.
func TestReadAheadOverFakeStorage(t *testing.T) {
	const k = 4
	b := newReadAheadBench(t, 2*time.Millisecond, time.Millisecond, 200*time.Microsecond)
	uniform, local := phase{40, 0, 0.3}, phase{40, 2, 0.95}
	sets, hints := engineSteps(1, b.layers, 16, k, uniform, local)
	b.run(t, sets, hints, 0, 25)
	u := b.run(t, sets, hints, 25, 40)
	b.run(t, sets, hints, 40, 50)
	l := b.run(t, sets, hints, 50, 80)
	t.Logf("uniform, tokens 25–40: %d read ahead of %d hinted (%d used), %d held back", u.PrefetchIssued, hintedOf(u), u.PrefetchUseful, u.PrefetchBackedOff)
	t.Logf("local, tokens 50–80: %d read ahead of %d hinted, %d used, %d late, %d probes; %.3f s hidden, %.3f s unused",
		l.PrefetchIssued, hintedOf(l), l.PrefetchUseful, l.PrefetchLate, l.PrefetchProbes, l.PrefetchSavedSeconds, l.PrefetchUnusedSeconds)
	if u.PrefetchIssued*50 > hintedOf(u) {
		t.Errorf("uniform routing after the warm-up: %d read ahead of %d hinted", u.PrefetchIssued, hintedOf(u))
	}
	if l.PrefetchIssued < 30 || l.PrefetchUseful*10 < 8*l.PrefetchIssued || l.PrefetchSavedSeconds <= 0 {
		t.Errorf("local routing after uniform: %d read ahead in 30 tokens, %d used, %.3f s hidden", l.PrefetchIssued, l.PrefetchUseful, l.PrefetchSavedSeconds)
	}
}

// Over storage far slower than the compute (every read 10 ms, two at a
// time), a hint's first read ahead is served in the time the storage is
// idle before its step, and the later ones are still queued when it
// comes: the hierarchy measures them late and holds back the places that
// are not in time, at least a quarter of the hinted experts that pay.
func TestReadAheadOverSlowStorage(t *testing.T) {
	b := newReadAheadBench(t, 10*time.Millisecond, 200*time.Microsecond, 50*time.Microsecond)
	sets, hints := engineSteps(2, b.layers, 16, 4, phase{40, 0, 0.75})
	b.run(t, sets, hints, 0, 10)
	s := b.run(t, sets, hints, 10, 40)
	t.Logf("%d read ahead (%d late, %d probes) of %d hinted, %d held back, %d used", s.PrefetchIssued, s.PrefetchLate, s.PrefetchProbes, hintedOf(s),
		s.PrefetchBackedOff, s.PrefetchUseful)
	if s.PrefetchLate == 0 || 4*s.PrefetchBackedOff < s.PrefetchIssued+s.PrefetchBackedOff || s.PrefetchUseful*10 < 6*s.PrefetchIssued {
		t.Errorf("slow storage: %d read ahead, %d late, %d used, %d held back", s.PrefetchIssued, s.PrefetchLate, s.PrefetchUseful, s.PrefetchBackedOff)
	}
}

// A hinted expert a device slot holds is not read ahead into the RAM tier:
// its use binds the slot, and the copy would be lost. With every expert
// fitting on the device and an exclusive RAM tier (which never holds what
// the device does), reads ahead are only of experts not yet on the device,
// and none is lost.
func TestReadAheadSkipsDeviceResident(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	be := cpu.New(2)
	be.SetSlots(1000)
	h, err := New(ck, Options{RAMBudget: 8 * size, StagingBudget: 4 * size, Readers: 2, Slots: be, Exclusive: true, Prefetch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prompts {
		if _, err := run(t, m, p, 16); err != nil {
			t.Fatal(err)
		}
	}
	h.Settle()
	st := h.Stats()
	t.Logf("device %+v; prefetch issued %d, useful %d, unused %d, lost %d, skipped %d; hints %d of %d true", st.Device, st.PrefetchIssued, st.PrefetchUseful,
		st.PrefetchUnused, st.PrefetchLost, st.PrefetchSkipped, st.HintsTrue, st.HintsScored)
	if st.PrefetchLost != 0 || st.Device.Hits == 0 || st.HintsTrue == 0 {
		t.Errorf("%d reads ahead lost (their expert used from a device slot); %d device hits, %d hints true", st.PrefetchLost, st.Device.Hits, st.HintsTrue)
	}
}
