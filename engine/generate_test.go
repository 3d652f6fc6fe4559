package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/canon"
)

// TestPCGIsFixed pins the sampling PRNG's output: Go's PCG-DXSM algorithm
// is part of the sampling contract.
func TestPCGIsFixed(t *testing.T) {
	p := rand.NewPCG(42, PCGStream)
	got := []uint64{p.Uint64(), p.Uint64(), p.Uint64()}
	want := goldenPCG
	if !slices.Equal(got, want) {
		t.Errorf("PCG(42, PCGStream) = %#x, want %#x", got, want)
	}
}

var goldenPCG = []uint64{0xaecce153e2f709a8, 0xdae690c5b4a4ada4, 0x1bee2b1c2b9b8d03}

func TestSamplingDeterministic(t *testing.T) {
	m := load(t, "qwen35moe-dev-c/checkpoint", 1, false)
	prompt := []int{5, 17, 99}
	gen := func(g GenOptions) []int {
		res, err := Generate(context.Background(), m.NewSession(), prompt, g, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StopReason != StopLength || len(res.Tokens) != g.MaxTokens {
			t.Fatalf("%+v: stop %q after %d tokens", g, res.StopReason, len(res.Tokens))
		}
		return res.Tokens
	}
	g := GenOptions{MaxTokens: 16, Temperature: 1.3, TopP: 0.95, TopK: 50, Seed: 7}
	a, b := gen(g), gen(g)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different tokens: %v vs %v", a, b)
	}
	g.Seed = 8
	if c := gen(g); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same 16 tokens %v", a)
	}
	greedy := gen(GenOptions{MaxTokens: 16})
	if k1 := gen(GenOptions{MaxTokens: 16, Temperature: 2, TopK: 1, Seed: 3}); !slices.Equal(k1, greedy) {
		t.Errorf("TopK=1 sampling %v differs from greedy %v", k1, greedy)
	}
	if p0 := gen(GenOptions{MaxTokens: 16, Temperature: 2, TopP: 1e-6, Seed: 3}); !slices.Equal(p0, greedy) {
		t.Errorf("TopP→0 sampling %v differs from greedy %v", p0, greedy)
	}
	if hot := gen(GenOptions{MaxTokens: 16, Temperature: 5, Seed: 3}); slices.Equal(hot, greedy) {
		t.Errorf("temperature 5 reproduced greedy output %v", hot)
	}
}

// TestSamplerDistribution: the sampler draws from softmax(z/T) restricted by
// top-k/top-p (a loose frequency check over many seeds).
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{2, 1, 0.5, 0, -1, -3}
	const n = 20000
	count := func(g GenOptions) []float64 {
		c := make([]float64, len(logits))
		sp := newSampler(g)
		for i := 0; i < n; i++ {
			k, err := sp.Pick(logits)
			if err != nil {
				t.Fatal(err)
			}
			c[k]++
		}
		for i := range c {
			c[i] /= n
		}
		return c
	}
	softmax := func(T float64, keep int) []float64 {
		p := make([]float64, len(logits))
		z := 0.0
		for i := 0; i < keep; i++ {
			p[i] = math.Exp(float64(logits[i]) / T)
			z += p[i]
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	check := func(name string, got, want []float64) {
		for i := range got {
			if math.Abs(got[i]-want[i]) > 0.015 {
				t.Errorf("%s: token %d frequency %.3f, want %.3f", name, i, got[i], want[i])
			}
		}
	}
	check("T=1", count(GenOptions{Temperature: 1, Seed: 1}), softmax(1, 6))
	check("T=0.5", count(GenOptions{Temperature: 0.5, Seed: 2}), softmax(0.5, 6))
	check("T=1 top-k 3", count(GenOptions{Temperature: 1, TopK: 3, Seed: 3}), softmax(1, 3))
	// softmax(1) cumulative: .557, .762, .886, ... → top-p 0.7 keeps 2 tokens.
	check("T=1 top-p 0.7", count(GenOptions{Temperature: 1, TopP: 0.7, Seed: 4}), softmax(1, 2))
}

func TestGenerateStopAndCallbacks(t *testing.T) {
	m := load(t, "qwen3moe-dev-a/checkpoint", 1, false)
	ref := readReference(t, "qwen3moe-dev-a")
	prompt, want := ref.Prompts[1], ref.Greedy["prompt1.fp32"]
	s := m.NewSession()
	var seen []int
	res, err := Generate(context.Background(), s, prompt, GenOptions{MaxTokens: 12, Stop: []int{want[4]}}, func(tok int, logits []float32) error {
		if len(logits) != m.Config().Vocab || canon.Argmax(logits) != tok {
			t.Errorf("callback: token %d is not the argmax of its %d logits", tok, len(logits))
		}
		seen = append(seen, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAt := slices.Index(want, want[4])
	if res.StopReason != StopToken || !slices.Equal(res.Tokens, want[:stopAt+1]) || !slices.Equal(seen, res.Tokens) {
		t.Errorf("stop: reason %q tokens %v seen %v, want %v", res.StopReason, res.Tokens, seen, want[:stopAt+1])
	}
	if s.Len() != len(prompt)+len(res.Tokens)-1 {
		t.Errorf("session length %d, want %d", s.Len(), len(prompt)+len(res.Tokens)-1)
	}
	boom := errors.New("boom")
	_, err = Generate(context.Background(), m.NewSession(), prompt, GenOptions{MaxTokens: 5}, func(int, []float32) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("callback error: got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Generate(ctx, m.NewSession(), prompt, GenOptions{MaxTokens: 5}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
	for _, g := range []GenOptions{{}, {MaxTokens: 1, Temperature: -1}, {MaxTokens: 1, TopP: 1.5}, {MaxTokens: 1, TopK: -2}} {
		if _, err := Generate(context.Background(), m.NewSession(), prompt, g, nil); err == nil {
			t.Errorf("%+v accepted", g)
		}
	}
	if _, err := Generate(context.Background(), m.NewSession(), nil, GenOptions{MaxTokens: 1}, nil); err == nil {
		t.Errorf("empty prompt accepted")
	}
}
