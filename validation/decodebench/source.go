package decodebench

import (
	"context"
	"sync"
	"time"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/sim"
)

// timedSource wraps the hierarchy the engine streams from and measures,
// from outside the engine, what the simulator's time model is made of: the
// time spent computing experts (inside Consume), the time between one
// layer's Stream and the next (the non-expert work of a layer), and the
// routing of every step (a measured trace) with the prefetch hint given
// before each step's Stream. Timing only: it passes every
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
	hint      sim.Hint   // the last hint, for the next Stream (Experts nil: none)
	curHints  []sim.Hint // the current token's, by MoE index of the Stream they preceded
	hints     [][]sim.Hint

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
	t.recording, t.lastEnd, t.lastLayer, t.cur, t.curHints = true, time.Time{}, -1, nil, nil
	t.mu.Unlock()
}

// stop also returns the hints: by token and MoE index, the hint given
// before that step's Stream.
func (t *timedSource) stop() ([][][]int, [][]sim.Hint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil {
		t.tokens = append(t.tokens, t.cur)
		t.hints = append(t.hints, t.curHints)
	}
	out, hints := t.tokens, t.hints
	t.recording, t.tokens, t.cur, t.hints, t.curHints = false, nil, nil, nil, nil
	return out, hints
}

func (t *timedSource) Stream(ctx context.Context, layer int, experts []int, c expertstream.Consumer) error {
	t.mu.Lock()
	rec := t.recording
	begin := time.Now()
	if rec {
		if layer <= t.lastLayer { // a new token
			if t.cur != nil {
				t.tokens = append(t.tokens, t.cur)
				t.hints = append(t.hints, t.curHints)
			}
			t.cur, t.curHints = nil, nil
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
			t.cur, t.curHints = make([][]int, n), make([]sim.Hint, n)
		}
		t.cur[t.moe[layer]] = append([]int(nil), experts...)
		t.curHints[t.moe[layer]] = t.hint
		t.lastLayer = layer
	}
	t.hint = sim.Hint{} // the hierarchy's Stream takes the pending hint
	t.mu.Unlock()
	var err error
	if rec {
		tc := timedConsumer{c: c}
		err = t.h.Stream(ctx, layer, experts, tc.wrap())
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

// Hint passes the engine's prefetch hints on, and keeps the last one for
// the next Stream's record (as the hierarchy keeps it for its next Stream).
func (t *timedSource) Hint(layer int, experts []int) {
	t.mu.Lock()
	if layer >= 0 && layer < len(t.moe) && t.moe[layer] >= 0 {
		xs := make([]int32, len(experts))
		for i, e := range experts {
			xs[i] = int32(e)
		}
		t.hint = sim.Hint{Layer: t.moe[layer], Experts: xs}
	} else {
		t.hint = sim.Hint{}
	}
	t.mu.Unlock()
	t.h.Hint(layer, experts)
}

// timedConsumer times a consumer's Consume calls. The hierarchy asks its
// consumer for the optional interfaces (expertstream.HostPlacer,
// expertstream.Prefiller); wrap passes on those c has, so that a timed
// step places and prefetches as the same step untimed would.
type timedConsumer struct {
	c expertstream.Consumer
	d time.Duration
	n int64
}

func (tc *timedConsumer) wrap() expertstream.Consumer {
	hp, isHP := tc.c.(expertstream.HostPlacer)
	pf, isPF := tc.c.(expertstream.Prefiller)
	switch {
	case isHP && isPF:
		return struct {
			*timedConsumer
			expertstream.HostPlacer
			expertstream.Prefiller
		}{tc, hp, pf}
	case isHP:
		return struct {
			*timedConsumer
			expertstream.HostPlacer
		}{tc, hp}
	case isPF:
		return struct {
			*timedConsumer
			expertstream.Prefiller
		}{tc, pf}
	}
	return tc
}

func (tc *timedConsumer) Consume(e int, p expertstream.Placed, tr ledger.Tier) error {
	t0 := time.Now()
	err := tc.c.Consume(e, p, tr)
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
