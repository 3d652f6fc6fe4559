package engine

import (
	"context"
	"math"
	"slices"
	"testing"
)

// conformance: every fixture checkpoint against the fp32 Hugging Face
// reference logits (every prompt position) and 12-token greedy output.
var conformance = []struct{ fixture, ckpt string }{
	{"qwen3moe-dev-a", "qwen3moe-dev-a/checkpoint"},
	{"qwen35moe-dev-c", "qwen35moe-dev-c/checkpoint"},
	{"qwen35moe-dev-c", "qwen35moe-dev-c/checkpoint-official"},
	{"qwen35moe-dev-e-long", "qwen35moe-dev-e-long/checkpoint"},
}

func TestConformance(t *testing.T) {
	for _, c := range conformance {
		t.Run(c.ckpt, func(t *testing.T) {
			ref := readReference(t, c.fixture)
			m := load(t, c.ckpt, 0, false)
			V := m.Config().Vocab
			for i, p := range ref.Prompts {
				s := m.NewSession()
				lg, err := s.Forward(p, true)
				if err != nil {
					t.Fatal(err)
				}
				worst, at := 0.0, 0
				for pos := range p {
					want := ref.logits[i][pos*V : (pos+1)*V]
					for j, w := range want {
						if d := math.Abs(float64(lg[pos][j]) - float64(w)); d > worst || d != d {
							worst, at = d, pos
						}
					}
				}
				if !(worst <= ref.Atol) {
					t.Errorf("prompt %d (%d tokens): max|Δ| = %.3g at position %d, want <= %g", i, len(p), worst, at, ref.Atol)
				}
				s = m.NewSession()
				res, err := Generate(context.Background(), s, p, GenOptions{MaxTokens: 12}, nil)
				if err != nil {
					t.Fatal(err)
				}
				want := ref.Greedy["prompt"+itoa(i)+".fp32"]
				if !slices.Equal(res.Tokens, want) {
					t.Errorf("prompt %d greedy: got %v, want %v", i, res.Tokens, want)
				}
				t.Logf("prompt %d (%d tokens): max|Δ| = %.3g (atol %g), greedy 12/12 %v", i, len(p), worst, ref.Atol, slices.Equal(res.Tokens, want))
			}
		})
	}
}

// TestCanonicalLogits pins the exact bits of the logits at every position of
// every reference prompt. Every build (GOAMD64=v1/v3, arm64, any thread
// count) and every backend must reproduce them; a change of these digests is
// a change of the canonical arithmetic (EXACTNESS.md), never noise.
func TestCanonicalLogits(t *testing.T) {
	got := map[string]string{}
	for _, c := range conformance {
		ref := readReference(t, c.fixture)
		m := load(t, c.ckpt, 0, false)
		var all [][]float32
		for _, p := range ref.Prompts {
			lg, err := m.NewSession().Forward(p, true)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, lg...)
		}
		got[c.ckpt] = logitsDigest(all)
		if want := canonicalLogits[c.fixture]; got[c.ckpt] != want {
			t.Errorf("%s: logits digest %s, want %s", c.ckpt, got[c.ckpt], want)
		}
	}
}

var canonicalLogits = map[string]string{
	"qwen3moe-dev-a":       "18b2976889b3850c480ffcb10c0d85ff533dda0b1f107d5ed8544535e7927605",
	"qwen35moe-dev-c":      "79a0bc3dccb2b7aa6f0ee2b4b499b335a41c8ed049decfe1369c4d4a09bcbf39",
	"qwen35moe-dev-e-long": "822b4ae46ee1ae9257f8196c890df0f1754204e9b4b0e6a3ea5789a963802259",
}
