package tier

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// TestScrubAllReportsAnEarlierFault: a fault an earlier scrub found is
// returned by ScrubAll — the last check before attest run signs — even
// though the bad copy is no longer resident (it was dropped, so this pass
// hashes only good copies and finds nothing new).
func TestScrubAllReportsAnEarlierFault(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	if _, err := run(t, m, prompts[0], 4); err != nil {
		t.Fatal(err)
	}
	if n, err := h.ScrubAll(); n == 0 || err != nil {
		t.Fatalf("clean ScrubAll: %d bytes, %v", n, err)
	}
	id := flipResident(t, h)
	if _, errs := h.Scrub(1 << 40); len(errs) != 1 {
		t.Fatalf("scrub after a flipped bit: %v", errs)
	}
	n, err := h.ScrubAll()
	var f *ScrubFault
	if !errors.As(err, &f) || f.Expert != id || !errors.Is(err, jnf.ErrVerification) {
		t.Fatalf("ScrubAll after an earlier scrub found %v changed: %d bytes, %v", id, n, err)
	}
	if n == 0 {
		t.Error("ScrubAll hashed nothing")
	}
	if st := h.Stats(); st.ScrubFailures != 1 {
		t.Errorf("%d scrub failures counted, want 1 (the pass found nothing new)", st.ScrubFailures)
	}
	h.ClearFault()
	if _, err := h.ScrubAll(); err != nil {
		t.Fatalf("ScrubAll after ClearFault: %v", err)
	}
}

// TestScrubAllOfResidentTensorsFails: a failing ScrubExtra (the model's
// resident non-expert tensors no longer match) is a ScrubFault from
// ScrubAll and from a background pass: it names the tensors, wraps the
// mismatch and jnf.ErrVerification, is counted, and faults the hierarchy.
func TestScrubAllOfResidentTensorsFails(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	mismatch := errors.New("model.norm.weight: got blake3:00, want blake3:11")
	bad := false
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size,
		ScrubExtra: func() (int64, error) {
			if bad {
				return 10, mismatch
			}
			return 10, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	if _, err := run(t, m, prompts[0], 2); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ScrubAll(); err != nil {
		t.Fatalf("clean ScrubAll: %v", err)
	}
	bad = true
	for _, pass := range []struct {
		name string
		f    func() error
	}{
		{"ScrubAll", func() error { _, err := h.ScrubAll(); return err }},
		{"a background pass", func() error {
			if _, errs := h.scrubPass(true); len(errs) != 1 {
				return fmt.Errorf("%d failures: %v", len(errs), errs)
			}
			return h.Fault()
		}},
	} {
		before := h.Stats().ScrubFailures
		err := pass.f()
		var f *ScrubFault
		if !errors.As(err, &f) || f.Expert.Layer != -1 || !errors.Is(err, mismatch) || !errors.Is(err, jnf.ErrVerification) ||
			!strings.Contains(err.Error(), "a resident tensor") {
			t.Fatalf("%s with resident tensors changed: %v", pass.name, err)
		}
		if h.Fault() == nil {
			t.Errorf("%s: the hierarchy did not fault", pass.name)
		}
		if got := h.Stats().ScrubFailures - before; got != 1 {
			t.Errorf("%s: %d scrub failures counted, want 1", pass.name, got)
		}
		if _, err := run(t, m, prompts[0], 2); !errors.As(err, &f) {
			t.Errorf("%s: generation after the fault: %v", pass.name, err)
		}
		h.ClearFault()
	}
}

// recC records where each consumed expert came from.
type recC struct{ tiers map[int]ledger.Tier }

func (c *recC) Consume(x int, _ expertstream.Placed, tier ledger.Tier) error {
	if _, dup := c.tiers[x]; dup {
		return fmt.Errorf("expert %d consumed twice", x)
	}
	c.tiers[x] = tier
	return nil
}

// TestStreamReportsWhereBytesCameFrom: every use is delivered with the
// tier its bytes came from — storage (read and hashed for this use:
// staging buffers and RAM-tier misses) or RAM (a resident copy) — and the
// counters agree: hits are the RAM uses, misses plus streamed the storage
// ones, and the bytes hashed are exactly those of the storage uses. The
// engine's ledger counts hashed bytes by that tier, so a streamed copy
// reported as a RAM hit would under-report what was hashed.
func TestStreamReportsWhereBytesCameFrom(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	xs := []int{2, 5, 11, 14}
	const layer = 0
	length := func(h *Hierarchy, x int) int64 {
		return h.refs[h.dims.Index(weights.ExpertID{Layer: layer, Expert: x})].Length()
	}
	step := func(t *testing.T, h *Hierarchy, want map[int]ledger.Tier) {
		t.Helper()
		before := h.Stats()
		c := &recC{tiers: map[int]ledger.Tier{}}
		if err := h.Stream(context.Background(), layer, xs, c); err != nil {
			t.Fatal(err)
		}
		after := h.Stats()
		var ram, storage, hashed int64
		for _, x := range xs {
			if c.tiers[x] != want[x] {
				t.Errorf("expert %d delivered from %q, want %q", x, c.tiers[x], want[x])
			}
			switch want[x] {
			case ledger.TierRAM:
				ram++
			case ledger.TierStorage:
				storage++
				hashed += length(h, x)
			}
		}
		hits, stored := after.Hits-before.Hits, after.Misses-before.Misses+after.Streamed-before.Streamed
		if hits != ram || stored != storage {
			t.Errorf("counted %d hits and %d reads, want %d and %d", hits, stored, ram, storage)
		}
		if got := after.BytesHashed - before.BytesHashed; got != hashed {
			t.Errorf("%d bytes hashed, want %d (the storage uses' records)", got, hashed)
		}
	}
	all := func(tier ledger.Tier) map[int]ledger.Tier {
		m := map[int]ledger.Tier{}
		for _, x := range xs {
			m[x] = tier
		}
		return m
	}

	t.Run("staging buffers only", func(t *testing.T) {
		h, err := New(ck, Options{StagingBudget: 2 * size})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		step(t, h, all(ledger.TierStorage))
		step(t, h, all(ledger.TierStorage))
	})
	t.Run("RAM tier", func(t *testing.T) {
		h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		step(t, h, all(ledger.TierStorage)) // misses
		step(t, h, all(ledger.TierRAM))     // hits
	})
	t.Run("a resident copy that fails its on-use check", func(t *testing.T) {
		h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size, Scrub: Scrub{OnUse: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		step(t, h, all(ledger.TierStorage))
		id := flipResident(t, h) // the lowest resident: layer 0, expert xs[0]
		if id != (weights.ExpertID{Layer: layer, Expert: xs[0]}) {
			t.Fatalf("flipped %v", id)
		}
		want := all(ledger.TierRAM)
		want[xs[0]] = ledger.TierStorage // read again through a staging buffer
		step(t, h, want)
		if st := h.Stats(); st.ScrubFailures != 1 || h.Fault() != nil {
			t.Errorf("%d scrub failures, fault %v", st.ScrubFailures, h.Fault())
		}
	})
}

// New refuses a scrub schedule more often than MinScrubEvery before it
// starts anything: no reader, hasher or spare keeper is left running.
func TestNewRefusesBeforeStarting(t *testing.T) {
	ck := openCk(t, testModel(t))
	base := runtime.NumGoroutine()
	for range 20 {
		_, err := New(ck, Options{RAMBudget: Auto, StagingBudget: Auto, Scrub: Scrub{Every: MinScrubEvery / 2}})
		if err == nil || !strings.Contains(err.Error(), "more often than") {
			t.Fatalf("a scrub every %v: %v", MinScrubEvery/2, err)
		}
	}
	n := runtime.NumGoroutine()
	for end := time.Now().Add(5 * time.Second); n > base && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > base {
		t.Errorf("%d goroutines after 20 refused News, %d before", n, base)
	}
}
