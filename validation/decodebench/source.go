package decodebench

import (
	"context"
	"sync"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/weights"
)

// timedSource wraps the hierarchy the engine streams from and measures,
// from outside the engine, what the simulator's time model is made of: the
// time spent computing experts (inside Consume), the time between one
// layer's Stream and the next (the non-expert work of a layer), and the
// routing of every step (a measured trace). Timing only: it passes every
// call through unchanged, so the logits are those of the hierarchy alone.
type timedSource struct {
	h   *tier.Hierarchy
	moe []int // model layer → MoE index (−1: dense)

	mu        sync.Mutex
	recording bool
	lastEnd   time.Time
	lastLayer int
	cur       [][]int // the current token's experts by MoE index
	tokens    [][][]int

	consume     time.Duration // inside Consume
	consumes    int64
	intra       time.Duration // between the Streams of one token
	intraN      int64
	cross       time.Duration // from a token's last Stream to the next token's first
	crossN      int64
	streamTotal time.Duration // inside Stream
}

func newTimedSource(h *tier.Hierarchy, sparse []bool) *timedSource {
	t := &timedSource{h: h, moe: make([]int, len(sparse)), lastLayer: -1}
	n := 0
	for l, s := range sparse {
		t.moe[l] = -1
		if s {
			t.moe[l] = n
			n++
		}
	}
	return t
}

// start begins a measured stretch (the decode steps of one generation);
// stop ends it and returns the routing of its tokens.
func (t *timedSource) start() {
	t.mu.Lock()
	t.recording, t.lastEnd, t.lastLayer, t.cur = true, time.Time{}, -1, nil
	t.mu.Unlock()
}

func (t *timedSource) stop() [][][]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil {
		t.tokens = append(t.tokens, t.cur)
	}
	out := t.tokens
	t.recording, t.tokens, t.cur = false, nil, nil
	return out
}

func (t *timedSource) Stream(ctx context.Context, layer int, experts []int, c engine.ExpertConsumer) error {
	t.mu.Lock()
	rec := t.recording
	begin := time.Now()
	if rec {
		if layer <= t.lastLayer { // a new token
			if t.cur != nil {
				t.tokens = append(t.tokens, t.cur)
			}
			t.cur = nil
		}
		if !t.lastEnd.IsZero() {
			if layer > t.lastLayer {
				t.intra += begin.Sub(t.lastEnd)
				t.intraN++
			} else {
				t.cross += begin.Sub(t.lastEnd)
				t.crossN++
			}
		}
		if t.cur == nil {
			n := 0
			for _, m := range t.moe {
				if m >= 0 {
					n++
				}
			}
			t.cur = make([][]int, n)
		}
		t.cur[t.moe[layer]] = append([]int(nil), experts...)
		t.lastLayer = layer
	}
	t.mu.Unlock()
	var err error
	if rec {
		tc := timedConsumer{c: c}
		err = t.h.Stream(ctx, layer, experts, &tc)
		end := time.Now()
		t.mu.Lock()
		t.consume += tc.d
		t.consumes += tc.n
		t.streamTotal += end.Sub(begin)
		t.lastEnd = end
		t.mu.Unlock()
	} else {
		err = t.h.Stream(ctx, layer, experts, c)
	}
	return err
}

// Hint passes the engine's prefetch hints on.
func (t *timedSource) Hint(layer int, experts []int) { t.h.Hint(layer, experts) }

type timedConsumer struct {
	c engine.ExpertConsumer
	d time.Duration
	n int64
}

func (tc *timedConsumer) Consume(e int, ve weights.VerifiedExpert, tr ledger.Tier) error {
	t0 := time.Now()
	err := tc.c.Consume(e, ve, tr)
	tc.d += time.Since(t0)
	tc.n++
	return err
}

// phases are the timings of a measured stretch.
type phases struct {
	consume, intra, cross, stream time.Duration
	consumes, intraN, crossN      int64
}

func (t *timedSource) take() phases {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := phases{t.consume, t.intra, t.cross, t.streamTotal, t.consumes, t.intraN, t.crossN}
	t.consume, t.intra, t.cross, t.streamTotal, t.consumes, t.intraN, t.crossN = 0, 0, 0, 0, 0, 0, 0
	return p
}
