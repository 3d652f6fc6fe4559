package engine

import (
	"context"
	"math"
	"slices"
	"testing"
)

// TestGenerateIsForwardLoop: Generate (a Decoder through the session's own
// Batch, the prompt maxChunk tokens a step) gives the tokens and the
// logits bits of a plain loop over Forward and a Sampler, for a prompt of
// several chunks, greedy and sampled; and leaves the session at prompt +
// tokens − 1 positions.
func TestGenerateIsForwardLoop(t *testing.T) {
	m := load(t, "qwen35moe-dev-c/checkpoint", 1, false)
	prompt := make([]int, 2*maxChunk+21)
	for i := range prompt {
		prompt[i] = (37*i + 11) % m.Config().Vocab
	}
	for _, g := range []GenOptions{{MaxTokens: 12}, {MaxTokens: 12, Temperature: 0.8, TopK: 30, Seed: 5}} {
		var gotLg [][]float32
		s := m.NewSession()
		res, err := Generate(context.Background(), s, prompt, g, func(_ int, lg []float32) error {
			gotLg = append(gotLg, slices.Clone(lg))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := len(prompt) + len(res.Tokens) - 1; s.Len() != want {
			t.Errorf("%+v: session at %d positions, want %d", g, s.Len(), want)
		}
		ref := m.NewSession()
		smp := newSampler(g)
		lg, err := ref.Forward(prompt, false)
		var want []int
		for err == nil {
			tok, perr := smp.Pick(lg[0])
			if perr != nil {
				t.Fatal(perr)
			}
			j := len(want)
			want = append(want, tok)
			if j >= len(gotLg) || !slices.EqualFunc(lg[0], gotLg[j], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("%+v: step %d: Generate's logits differ from Forward's", g, j)
			}
			if len(want) >= g.MaxTokens {
				break
			}
			lg, err = ref.Forward([]int{tok}, false)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, want) {
			t.Errorf("%+v: Generate %v, Forward loop %v", g, res.Tokens, want)
		}
	}
}
