package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
)

// invarianceCases are the checkpoints and token sequences the bit-identity
// tests run on: the longest reference prompt of each fixture.
func invarianceTokens(t testing.TB, fixture string) []int {
	ref := readReference(t, fixture)
	p := ref.Prompts[len(ref.Prompts)-1]
	if len(p) > 80 {
		p = p[:80] // keep the suite fast; 80 tokens cross a 64-token chunk
	}
	return p
}

var invarianceCkpts = []struct{ fixture, ckpt string }{
	{"qwen3moe-dev-a", "qwen3moe-dev-a/checkpoint"},
	{"qwen35moe-dev-c", "qwen35moe-dev-c/checkpoint-official"},
	{"qwen35moe-dev-e-long", "qwen35moe-dev-e-long/checkpoint"},
}

// allLogits runs tokens through a fresh session in the given chunks (their
// lengths) and returns the logits of every position.
func allLogits(t testing.TB, m *Model, tokens []int, chunks []int) [][]float32 {
	t.Helper()
	s := m.NewSession()
	var out [][]float32
	off := 0
	for _, n := range chunks {
		lg, err := s.Forward(tokens[off:off+n], true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lg...)
		off += n
	}
	if off != len(tokens) || s.Len() != len(tokens) {
		t.Fatalf("chunks cover %d of %d tokens, Len %d", off, len(tokens), s.Len())
	}
	return out
}

func ones(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

func randomChunks(n int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	var c []int
	for n > 0 {
		k := min(n, 1+r.IntN(9))
		c = append(c, k)
		n -= k
	}
	return c
}

func compareAll(t *testing.T, what string, a, b [][]float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vs %d positions", what, len(a), len(b))
	}
	same := 0
	for i := range a {
		if bitsEqual(a[i], b[i]) {
			same++
		}
	}
	if same != len(a) {
		t.Errorf("%s: %d of %d positions bit-identical", what, same, len(a))
	} else {
		t.Logf("%s: %d of %d positions bit-identical", what, same, len(a))
	}
}

// TestDecodeEqualsPrefill: one prefill call, token-by-token decode, random
// chunkings and internal chunk sizes all give the same bits.
func TestDecodeEqualsPrefill(t *testing.T) {
	for _, c := range invarianceCkpts {
		t.Run(c.ckpt, func(t *testing.T) {
			m := load(t, c.ckpt, 1, false)
			toks := invarianceTokens(t, c.fixture)
			full := allLogits(t, m, toks, []int{len(toks)})
			compareAll(t, "decode 1 token at a time vs prefill", allLogits(t, m, toks, ones(len(toks))), full)
			compareAll(t, "random chunks vs prefill", allLogits(t, m, toks, randomChunks(len(toks), 7)), full)
			defer func(n int) { maxChunk = n }(maxChunk)
			for _, mc := range []int{1, 5, 1000} {
				maxChunk = mc
				compareAll(t, fmt.Sprintf("internal chunk %d vs 64", mc), allLogits(t, m, toks, []int{len(toks)}), full)
			}
			// all=false returns exactly the last row of all=true.
			s := m.NewSession()
			last, err := s.Forward(toks, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(last) != 1 || !bitsEqual(last[0], full[len(full)-1]) {
				t.Errorf("Forward(all=false) differs from the last row of Forward(all=true)")
			}
		})
	}
}

// TestThreadInvariance: 1 goroutine vs 2, 3 and 8 goroutines with every
// operation forced onto the parallel path give the same bits.
func TestThreadInvariance(t *testing.T) {
	for _, c := range invarianceCkpts {
		t.Run(c.ckpt, func(t *testing.T) {
			toks := invarianceTokens(t, c.fixture)
			ref := allLogits(t, load(t, c.ckpt, 1, false), toks, []int{len(toks)})
			for _, n := range []int{2, 3, 8} {
				m := load(t, c.ckpt, n, true)
				compareAll(t, fmt.Sprintf("%d threads (forced parallel) vs 1", n), allLogits(t, m, toks, []int{len(toks)}), ref)
				compareAll(t, fmt.Sprintf("%d threads decode vs 1 thread prefill", n), allLogits(t, m, toks[:min(len(toks), 24)], ones(min(len(toks), 24))), ref[:min(len(toks), 24)])
			}
		})
	}
}

// TestConcurrentSessions: sessions of one model running at the same time do
// not disturb each other.
func TestConcurrentSessions(t *testing.T) {
	m := load(t, "qwen35moe-dev-c/checkpoint", 2, true)
	toks := invarianceTokens(t, "qwen35moe-dev-c")
	want := allLogits(t, m, toks, []int{len(toks)})
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			s := m.NewSession()
			for i, tok := range toks {
				lg, err := s.Forward([]int{tok}, false)
				if err != nil {
					errs <- err
					return
				}
				if !bitsEqual(lg[0], want[i]) {
					errs <- fmt.Errorf("goroutine %d position %d differs", g, i)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestExpertCounters: every token evaluates exactly top-k routed experts
// in every MoE layer, counted where the evaluation happens.
func TestExpertCounters(t *testing.T) {
	for _, c := range invarianceCkpts {
		t.Run(c.ckpt, func(t *testing.T) {
			m := load(t, c.ckpt, 1, false)
			toks := invarianceTokens(t, c.fixture)
			allLogits(t, m, toks, randomChunks(len(toks), 3))
			res, err := Generate(context.Background(), m.NewSession(), toks[:3], GenOptions{MaxTokens: 5}, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := int64(len(toks) + 3 + len(res.Tokens) - 1)
			st := m.Stats()
			if st.Tokens != n {
				t.Errorf("Stats.Tokens = %d, want %d", st.Tokens, n)
			}
			cfg := m.Config()
			for l, e := range st.ExpertEvals {
				want := int64(0)
				if cfg.Sparse[l] {
					want = n * int64(cfg.TopK)
				}
				if e != want {
					t.Errorf("layer %d: %d expert evaluations for %d tokens, want %d (top-k %d)", l, e, n, want, cfg.TopK)
				}
				if f := st.ExpertFetches[l]; cfg.Sparse[l] && (f <= 0 || f > e) {
					t.Errorf("layer %d: %d expert fetches for %d evaluations", l, f, e)
				}
			}
			if st.TopK != cfg.TopK {
				t.Errorf("Stats.TopK = %d, want %d", st.TopK, cfg.TopK)
			}
		})
	}
}

// TestDecodeAllocations: in steady state a decode step allocates only the
// logits it returns (the row and the [][]float32 holding it).
func TestDecodeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items on purpose)")
	}
	for _, th := range []int{1, 3} {
		be := cpu.New(th)
		be.SetMinParallelWork(0)
		m := loadResident(t, "qwen35moe-dev-e-long/checkpoint", Options{Backend: be, CheckExperts: true}) // every expert resident in the RAM tier
		s := m.NewSession()
		toks := invarianceTokens(t, "qwen35moe-dev-e-long")
		if _, err := s.Forward(toks[:40], false); err != nil {
			t.Fatal(err)
		}
		i := 40
		n := testing.AllocsPerRun(30, func() {
			if _, err := s.Forward(toks[i:i+1], false); err != nil {
				t.Fatal(err)
			}
			i++
		})
		t.Logf("threads %d: %.1f allocations per decode step", th, n)
		if n > 2 {
			t.Errorf("threads %d: %.1f allocations per decode step, want <= 2", th, n)
		}
	}
}
