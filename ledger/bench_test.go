package ledger

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
)

// decodeToken is the ledger's work for one decoded token of
// Qwen3.5-122B-A10B: 48 MoE layers routing 8 of 256 experts, the expert
// uses recorded, and the logits chain over a 248 320-entry vocabulary.
type decodeToken struct {
	l      *Ledger
	idx    [][]int32
	w      [][]float32
	logits []float32
	pos    int
}

func newDecodeToken() *decodeToken {
	const layers, experts, k, vocab = 48, 256, 8, 248320
	d := &decodeToken{l: New(testRoot(), layers, k, ModeExact), idx: make([][]int32, layers),
		w: make([][]float32, layers), logits: make([]float32, vocab), pos: 3}
	d.l.Prompt([]int{1, 2, 3})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range layers {
		for range k {
			d.idx[i] = append(d.idx[i], int32(rng.IntN(experts)))
			d.w[i] = append(d.w[i], rng.Float32())
		}
	}
	for i := range d.logits {
		d.logits[i] = rng.Float32()
	}
	return d
}

// token does one token's ledger work, as the engine reports it.
func (d *decodeToken) token() {
	var dg jnf.Digest
	d.l.BeginChunk(d.pos, 1)
	for i := range d.idx {
		d.l.Route(i, d.idx[i], d.w[i], len(d.idx[i]))
		for _, e := range d.idx[i] {
			d.l.UseExpert(i, int(e), dg, TierRAM, 1, 0)
		}
	}
	d.l.EndChunk()
	d.l.Step(d.logits, 7)
	d.pos++
}

// BenchmarkDecodeToken is the ledger's work for one decoded token of
// Qwen3.5-122B-A10B (decodeToken), tokens back to back with nothing between
// them: the whole of what a session ledger adds to a token when nothing can
// overlap it (BENCHMARKS.md relates it to measured seconds per token).
func BenchmarkDecodeToken(b *testing.B) {
	d := newDecodeToken()
	for b.Loop() {
		d.token()
	}
	d.l.waitChain()
}

// waitChain waits for the pending step's hash, if any.
func (l *Ledger) waitChain() {
	l.chainMu.Lock()
	l.chainMu.Unlock()
}

// spinSink keeps spin's loop from being optimised away.
var spinSink uint64

// spin is n rounds of a serial multiply-add: work on the calling goroutine
// standing in for a token's compute.
func spin(n int) {
	x := spinSink
	for i := range n {
		x = x*6364136223846793005 + uint64(i)
	}
	spinSink = x
}

// spinRounds is the number of spin rounds that take about 2 ms here,
// calibrated once (the best of five timings of 2²⁰ rounds).
var spinRounds = sync.OnceValue(func() int {
	const n = 1 << 20
	best := time.Duration(1<<63 - 1)
	for range 5 {
		t0 := time.Now()
		spin(n)
		best = min(best, time.Since(t0))
	}
	return int(float64(n) * float64(2*time.Millisecond) / float64(best))
})

// BenchmarkDecodeTokenOverlapped is the ledger's cost per token next to
// the token's own compute: each iteration times about 2 ms of work (spin)
// alone, then the ledger's work for a token (decodeToken) followed by the
// same work and a wait for the ledger's logits chain. It reports the mean
// difference as ledger-ns/token, the median of the iterations' differences
// as ledger-p50-ns/token (less sensitive to a preempted iteration), and the
// work alone as work-ns/token. What the ledger does off the calling
// goroutine while the work runs costs nothing there unless no core is free
// for it.
func BenchmarkDecodeTokenOverlapped(b *testing.B) {
	d := newDecodeToken()
	n := spinRounds()
	var alone, with time.Duration
	diffs := make([]time.Duration, 0, 4096)
	for b.Loop() {
		t0 := time.Now()
		spin(n)
		t1 := time.Now()
		d.token()
		spin(n)
		d.l.waitChain()
		t2 := time.Now()
		alone += t1.Sub(t0)
		with += t2.Sub(t1)
		diffs = append(diffs, t2.Sub(t1)-t1.Sub(t0))
	}
	slices.Sort(diffs)
	b.ReportMetric(float64(alone.Nanoseconds())/float64(b.N), "work-ns/token")
	b.ReportMetric(float64((with-alone).Nanoseconds())/float64(b.N), "ledger-ns/token")
	b.ReportMetric(float64(diffs[len(diffs)/2].Nanoseconds()), "ledger-p50-ns/token")
}
