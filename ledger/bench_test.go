package ledger

import (
	"math/rand/v2"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

// BenchmarkDecodeToken is the ledger's work for one decoded token of
// Qwen3.5-122B-A10B: 48 MoE layers routing 8 of 256 experts, the expert
// uses recorded, and the logits chain over a 248 320-entry vocabulary. It
// is the whole of what a session ledger adds to a token (BENCHMARKS.md
// relates it to measured seconds per token).
func BenchmarkDecodeToken(b *testing.B) {
	const layers, experts, k, vocab = 48, 256, 8, 248320
	l := New(testRoot(), layers, k, ModeExact)
	l.Prompt([]int{1, 2, 3})
	rng := rand.New(rand.NewPCG(1, 2))
	idx := make([][]int32, layers)
	w := make([][]float32, layers)
	for i := range layers {
		for range k {
			idx[i] = append(idx[i], int32(rng.IntN(experts)))
			w[i] = append(w[i], rng.Float32())
		}
	}
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = rng.Float32()
	}
	var d jnf.Digest
	pos := 3
	for b.Loop() {
		l.BeginChunk(pos, 1)
		for i := range layers {
			l.Route(i, idx[i], w[i], k)
			for _, e := range idx[i] {
				l.UseExpert(i, int(e), d, TierRAM, 1, 0)
			}
		}
		l.EndChunk()
		l.Step(logits, 7)
		pos++
	}
}
