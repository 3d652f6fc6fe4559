package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Batch runs steps that serve several sessions at once (continuous
// batching): the new tokens of every session go through the layers as one
// set of rows — one matrix multiplication per weight for all of them, each
// routed expert fetched once for every row routed to it — while attention
// and the DeltaNet recurrence read each session's own state. Every row is
// computed with the canonical per-row arithmetic, so a session's logits
// are bit-identical to those of the same tokens run alone (tested). A Batch
// has its own queue and scratch; it is not safe for concurrent use.
type Batch struct {
	m    *Model
	w    *work
	segs []segment
	// stepNanos is the steps' wall time (Times).
	stepNanos atomic.Int64
}

// Norms returns, after a step whose sessions asked (Session.SetSoftmaxNorm)
// on a backend that computes them (backend.Normaliser), the softmax
// normaliser of each row of logits the step returned: m and s of row i at
// 2i and 2i+1 (canon.Max and canon.ExpSum of the row); nil otherwise. They
// live in b's buffers until its next step.
func (b *Batch) Norms() []float32 {
	if !b.w.normed {
		return nil
	}
	return b.w.norms
}

// Argmaxes returns, after a step whose sessions asked (Session.SetArgmax)
// on a backend that finds them (backend.Argmaxer), canon.Argmax of each row
// of logits the step returned (−1 for a row holding a NaN); nil otherwise.
// They live in b's buffers until its next step.
func (b *Batch) Argmaxes() []int32 {
	if !b.w.amaxed {
		return nil
	}
	return b.w.amax
}

// BatchTimes are where a Batch's steps spent their wall time (Batch.Times):
// Step is the steps' whole wall time; Sync is the part the host spent
// waiting for the device queue (Syncs of them: one after each MoE layer's
// router, one for the logits), so Step − Sync is the host's own work in
// the steps (launches, routing, the expert hierarchy), some of it beside
// the device's.
type BatchTimes struct {
	Syncs      int64
	Step, Sync time.Duration
}

// Times returns the counters of b's steps so far. It is safe to call
// beside a step.
func (b *Batch) Times() BatchTimes {
	return BatchTimes{Syncs: b.w.syncs.Load(),
		Step: time.Duration(b.stepNanos.Load()), Sync: time.Duration(b.w.syncNanos.Load())}
}

// NewBatch returns a Batch for m's sessions.
func (m *Model) NewBatch() (*Batch, error) {
	w, err := m.newWork()
	if err != nil {
		return nil, err
	}
	return &Batch{m: m, w: w}, nil
}

// Close releases the batch's queue and scratch.
func (b *Batch) Close() error { return b.w.close() }

// Step appends tokens[i] to sessions[i] (distinct sessions of b's model)
// in one step and returns, for each session, the logits of its last new
// position. The rows of one step are not chunked: a caller with long
// prompts feeds them in pieces. After an error every session of the step
// must be Reset.
func (b *Batch) Step(ctx context.Context, sessions []*Session, tokens [][]int) ([][]float32, error) {
	return b.step(ctx, sessions, tokens, false)
}

// StepReuse is Step, but the logits it returns live in b's buffers and are
// valid only until b's next step: a caller that is done with them before
// then (a scheduler that picks each session's token at once) allocates
// nothing per step.
func (b *Batch) StepReuse(ctx context.Context, sessions []*Session, tokens [][]int) ([][]float32, error) {
	return b.step(ctx, sessions, tokens, true)
}

func (b *Batch) step(ctx context.Context, sessions []*Session, tokens [][]int, reuse bool) ([][]float32, error) {
	if len(sessions) == 0 || len(sessions) != len(tokens) {
		return nil, fmt.Errorf("engine: batch step of %d sessions with %d token lists", len(sessions), len(tokens))
	}
	b.segs = b.segs[:0]
	n := 0
	for i, s := range sessions {
		if s.m != b.m {
			return nil, fmt.Errorf("engine: batch step: session %d belongs to another model", i)
		}
		for j := range i {
			if sessions[j] == s {
				return nil, fmt.Errorf("engine: batch step: session %d is also session %d", i, j)
			}
		}
		if err := s.check(tokens[i]); err != nil {
			return nil, fmt.Errorf("engine: batch step, session %d: %w", i, err)
		}
		b.segs = append(b.segs, segment{s: s, n: len(tokens[i]), want: 1})
		n += len(tokens[i])
	}
	ids := grow(&b.w.ids, n)[:0]
	for _, t := range tokens {
		for _, id := range t {
			ids = append(ids, int32(id))
		}
	}
	t0 := time.Now()
	lg, err := b.w.step(ctx, b.segs, reuse)
	b.stepNanos.Add(int64(time.Since(t0)))
	if err != nil {
		for _, sg := range b.segs {
			sg.s.broken = err
		}
	}
	clear(b.segs) // b keeps no session alive (a session's own Batch included)
	if err != nil {
		return nil, err
	}
	b.m.forwards.Add(1)
	return lg, nil
}
