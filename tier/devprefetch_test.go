package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
)

// prefillConsumer is a slotConsumer that also takes the device prefetch's
// copies (expertstream.Prefiller), recording which experts it filled.
type prefillConsumer struct {
	slotConsumer
	prefilled []string
	fail      error // Prefill's error, when set
}

func (c *prefillConsumer) Prefill(p expertstream.Placed) error {
	if c.fail != nil {
		return c.fail
	}
	ve := p.Host
	if p.Slot == nil || ve.ID() != p.ID || ve.Digest() != p.Digest {
		return fmt.Errorf("prefill of %s: slot %v, bytes of %s", p.ID, p.Slot, ve.ID())
	}
	if err := c.q.(backend.SlotQueue).FillSlot(p.Slot, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), c.I, c.H); err != nil {
		return err
	}
	c.prefilled = append(c.prefilled, p.ID.String())
	return nil
}

// TestDevicePrefetchCopiesHintedExperts drives the hierarchy's Streams
// itself. Once every expert is in the RAM tier, a Stream of layer 0 after a
// hint for layer 1 copies the hinted experts of layer 1 the device does not
// hold into slots, at its end, through the consumer's Prefill (and only
// through a Prefiller: a plain consumer gets none); the next Stream of
// layer 1 finds them as device hits (bound, not filled), and they are
// counted used. Hints that never come true stop being copied once their
// ranks were scored (policy.ReadAhead's rule, hintMinScored), and are
// counted unused and skipped. Without DevicePrefetch nothing is copied.
func TestDevicePrefetchCopiesHintedExperts(t *testing.T) {
	ck := openCk(t, testModel(t))
	cfg := ck.Config()
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	n := cfg.Layers * cfg.Experts
	setup := func(t *testing.T, on bool, slots int, more ...func(*Options)) (*Hierarchy, *prefillConsumer) {
		t.Helper()
		be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 1, Slots: slots, VerifyCopies: true})
		o := Options{RAMBudget: int64(n) * size, StagingBudget: 4 * size, Readers: 2, Hashers: 1, Policy: "lru",
			Slots: be.(backend.SlotPool), DevicePrefetch: on}
		for _, f := range more {
			f(&o)
		}
		h, err := New(ck, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		c := &prefillConsumer{slotConsumer: newSlotConsumer(t, be, cfg)}
		// Every expert of layers 0 and 1 read into the RAM tier once.
		all := everyExpert(cfg.Experts)
		for _, l := range []int{0, 1} {
			if err := h.Stream(context.Background(), l, all, &c.slotConsumer); err != nil {
				t.Fatal(err)
			}
		}
		return h, c
	}
	stream := func(t *testing.T, h *Hierarchy, c expertstream.Consumer, q backend.Queue, l int, xs []int) {
		t.Helper()
		if err := h.Stream(context.Background(), l, xs, c); err != nil {
			t.Fatal(err)
		}
		if err := q.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// Few slots: the layer-1 experts are evicted by layer 0's between
	// tokens, so each token's hint has something to copy.
	slots := 2 * cfg.TopK
	l0 := []int{0, 1}
	hinted := []int{cfg.Experts - 1, cfg.Experts - 2}

	t.Run("true hints", func(t *testing.T) {
		h, c := setup(t, true, slots)
		h.dra.TrustAll()
		for tok := range 6 {
			// Evict layer 1's hinted experts from the device: a Stream of
			// other layer-1 experts in between.
			others := []int{2, 3, 4, 5, 6, 7}
			stream(t, h, c, c.q, 1, others)
			c.prefilled = c.prefilled[:0]
			before := h.Stats()
			h.Hint(1, hinted)
			stream(t, h, c, c.q, 0, l0)
			if len(c.prefilled) == 0 {
				t.Fatalf("token %d: a true hint for layer 1 copied nothing (stats %+v)", tok, h.Stats())
			}
			binds := c.binds
			stream(t, h, c, c.q, 1, hinted)
			st := h.Stats()
			if got := c.binds - binds; got < len(c.prefilled) {
				t.Errorf("token %d: %d prefetched, then %d of layer 1's experts bound from slots", tok, len(c.prefilled), got)
			}
			if used := st.DevicePrefetchUsed - before.DevicePrefetchUsed; used != int64(len(c.prefilled)) {
				t.Errorf("token %d: %d prefetched, %d counted used", tok, len(c.prefilled), used)
			}
		}
		st := h.Stats()
		if st.DevicePrefetched == 0 || st.DevicePrefetchUnused != 0 {
			t.Errorf("true hints: %d prefetched, %d unused", st.DevicePrefetched, st.DevicePrefetchUnused)
		}
	})

	t.Run("false hints back off", func(t *testing.T) {
		h, c := setup(t, true, slots)
		wrong := hinted
		used := []int{2, 3}
		var copied []int
		for range 12 {
			stream(t, h, c, c.q, 1, []int{4, 5}) // evict what a copy put there
			c.prefilled = c.prefilled[:0]
			h.Hint(1, wrong)
			stream(t, h, c, c.q, 0, l0)
			copied = append(copied, len(c.prefilled))
			stream(t, h, c, c.q, 1, used) // the hint never comes true
		}
		st := h.Stats()
		if slices.ContainsFunc(copied, func(n int) bool { return n > 0 }) {
			t.Errorf("hints that never come true were copied: %v a token (%+v)", copied, st)
		}
		if st.DevicePrefetchSkipped == 0 {
			t.Errorf("no hinted expert was counted skipped: %+v", st)
		}
	})

	t.Run("true hints earn their copies", func(t *testing.T) {
		h, c := setup(t, true, slots)
		var copied []int
		for range 10 {
			stream(t, h, c, c.q, 1, []int{2, 3, 4, 5, 6, 7})
			c.prefilled = c.prefilled[:0]
			h.Hint(1, hinted)
			stream(t, h, c, c.q, 0, l0)
			copied = append(copied, len(c.prefilled))
			stream(t, h, c, c.q, 1, hinted)
		}
		// The first hintMinScored hints of a rank are only scored; then a
		// rank that always came true is copied.
		for tok, n := range copied {
			if want := tok >= 5; (n == len(hinted)) != want {
				t.Errorf("true hints, not trusted: %v copied a token, want none for 5 tokens, then every one", copied)
				break
			}
		}
	})

	t.Run("experts out of range or named twice", func(t *testing.T) {
		// With the storage prefetch on too, which looks up every hinted
		// expert's record: Hint drops the experts its layer does not have.
		h, c := setup(t, true, slots, func(o *Options) { o.Prefetch = true })
		h.dra.TrustAll()
		stream(t, h, c, c.q, 1, []int{2, 3, 4, 5, 6, 7})
		last := cfg.Layers - 1 // where an expert out of range is past every record
		h.Hint(last, []int{-1, cfg.Experts, cfg.Experts + 5})
		stream(t, h, c, c.q, 0, l0)
		h.Hint(1, []int{hinted[0], hinted[0]})
		stream(t, h, c, c.q, 0, l0)
		if len(c.prefilled) != 1 {
			t.Errorf("hints out of range, then one expert named twice: %v copied, want the one", c.prefilled)
		}
	})

	t.Run("a failed copy", func(t *testing.T) {
		// A Prefill that fails ends its Stream with the error; the slot
		// holds nothing, and the expert's next use fills it.
		h, c := setup(t, true, slots)
		h.dra.TrustAll()
		stream(t, h, c, c.q, 1, []int{2, 3, 4, 5, 6, 7})
		c.fail = errors.New("the copy failed")
		h.Hint(1, hinted)
		if err := h.Stream(context.Background(), 0, l0, c); !errors.Is(err, c.fail) {
			t.Fatalf("a failed prefill: the Stream gave %v", err)
		}
		c.fail = nil
		fills := c.fills
		stream(t, h, c, c.q, 1, hinted)
		if c.fills-fills != len(hinted) || h.Stats().DevicePrefetched != 0 {
			t.Errorf("after a failed prefill: %d of the %d hinted experts filled by their use, %d counted prefetched",
				c.fills-fills, len(hinted), h.Stats().DevicePrefetched)
		}
	})

	t.Run("trusted false hints are unused", func(t *testing.T) {
		h, c := setup(t, true, slots)
		h.dra.TrustAll()
		for range 3 {
			stream(t, h, c, c.q, 1, []int{4, 5})
			h.Hint(1, hinted)
			stream(t, h, c, c.q, 0, l0)
			stream(t, h, c, c.q, 1, []int{2, 3})
		}
		if st := h.Stats(); st.DevicePrefetched == 0 || st.DevicePrefetchUnused != st.DevicePrefetched || st.DevicePrefetchUsed != 0 {
			t.Errorf("wrong hints copied anyway: %d prefetched, %d used, %d unused", st.DevicePrefetched, st.DevicePrefetchUsed, st.DevicePrefetchUnused)
		}
	})

	t.Run("off, or a consumer that cannot prefill", func(t *testing.T) {
		for _, on := range []bool{false, true} {
			h, c := setup(t, on, slots)
			h.dra.TrustAll()
			var consumer expertstream.Consumer = c
			if on {
				consumer = &c.slotConsumer
			}
			stream(t, h, consumer, c.q, 1, []int{4, 5})
			h.Hint(1, hinted)
			stream(t, h, consumer, c.q, 0, l0)
			if st := h.Stats(); st.DevicePrefetched != 0 || len(c.prefilled) != 0 {
				t.Errorf("DevicePrefetch %v: %d prefetched, %v prefilled", on, st.DevicePrefetched, c.prefilled)
			}
		}
	})
}

// TestDevicePrefetchDoesNotChangeABit: the engine on a simulated device
// whose copies are checked, with the device prefetch on (every hint
// trusted, so that it copies every step) and few slots, computes the
// default path's logits bit for bit, and its prefetched experts are bound
// as device hits: more of them than the same runs make without it.
func TestDevicePrefetchDoesNotChangeABit(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	n := ck.Config().Layers * ck.Config().Experts
	hitsOff := map[int]int64{}
	for _, slots := range []int{2 * ck.Config().TopK, n / 2} {
		be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: slots})
		h, err := New(ck, Options{RAMBudget: int64(n) * size, StagingBudget: 4 * size, Readers: 2, Slots: be.(backend.SlotPool)})
		if err != nil {
			t.Fatal(err)
		}
		m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for _, p := range prompts {
				if _, err := run(t, m, p, 8); err != nil {
					t.Fatal(err)
				}
			}
		}
		hitsOff[slots] = h.Stats().Device.Hits
		h.Close()
	}
	for _, slots := range []int{2 * ck.Config().TopK, n / 2} {
		be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: slots, VerifyCopies: true})
		h, err := New(ck, Options{RAMBudget: int64(n) * size, StagingBudget: 4 * size, Readers: 2, Slots: be.(backend.SlotPool), DevicePrefetch: true})
		if err != nil {
			t.Fatal(err)
		}
		h.dra.TrustAll()
		m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			for i, p := range prompts {
				want, err := run(t, ref, p, 8)
				if err != nil {
					t.Fatal(err)
				}
				got, err := run(t, m, p, 8)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, want) {
					t.Fatalf("%d slots, round %d, prompt %d: logits differ from the default path", slots, round, i)
				}
			}
		}
		st := h.Stats()
		t.Logf("%d slots: device %+v, prefetched %d, used %d, unused %d", slots, st.Device, st.DevicePrefetched, st.DevicePrefetchUsed, st.DevicePrefetchUnused)
		if st.DevicePrefetched == 0 || st.DevicePrefetchUsed == 0 {
			t.Errorf("%d slots: %d prefetched, %d used", slots, st.DevicePrefetched, st.DevicePrefetchUsed)
		}
		if st.DevicePrefetchUsed+st.DevicePrefetchUnused > st.DevicePrefetched {
			t.Errorf("%d used and %d unused of %d prefetched", st.DevicePrefetchUsed, st.DevicePrefetchUnused, st.DevicePrefetched)
		}
		// A prefetched slot bound at the next Stream may be the queue's last
		// fill, which the backend does not count as cached.
		if bc := be.(backend.Meter).Counters(); bc.ExpertsCached > st.Device.Hits || bc.ExpertsCached == 0 {
			t.Errorf("%d device hits, the backend bound %d slots filled before", st.Device.Hits, bc.ExpertsCached)
		}
		h.Close()
		if st.Device.Hits <= hitsOff[slots] {
			t.Errorf("%d slots: %d device hits with the prefetch, %d without", slots, st.Device.Hits, hitsOff[slots])
		}
	}
}

// TestDevicePrefetchNeedsAnInclusiveRAMTier: the device prefetch copies
// from the RAM tier's verified copies, so New refuses it with an exclusive
// device level or without a RAM tier, saying why.
func TestDevicePrefetchNeedsAnInclusiveRAMTier(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{RAMBudget: 8 * size, StagingBudget: 4 * size, Exclusive: true, DevicePrefetch: true}, "inclusive"},
		{Options{RAMBudget: 0, StagingBudget: 4 * size, DevicePrefetch: true}, "RAM budget is 0"},
	} {
		h, err := New(ck, c.o)
		if err == nil {
			h.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.o, err, c.want)
		}
	}
	h, err := New(ck, Options{RAMBudget: 8 * size, StagingBudget: 4 * size, DevicePrefetch: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}
