package golden

import (
	"fmt"
	"math"
	"slices"
)

// StepDiff compares one step.
type StepDiff struct {
	Identical bool    `json:"identical"` // every logit bit-identical
	MaxAbs    float64 `json:"max_abs"`
	Top1Agree bool    `json:"top1_agree"`
	KL        float64 `json:"kl"` // KL(golden ‖ replay) of the softmax distributions, nats
}

// PromptDiff compares one prompt's replay with its golden run.
type PromptDiff struct {
	Index          int     `json:"index"`
	Steps          int     `json:"steps"`           // golden steps
	Compared       int     `json:"compared"`        // steps compared (until the token sequences diverge)
	Identical      int     `json:"identical_steps"` // bit-identical steps
	MaxAbs         float64 `json:"max_abs"`
	Top1Agree      int     `json:"top1_agree"`
	MaxKL          float64 `json:"max_kl"`
	FirstDivergent int     `json:"first_divergent_step"` // −1 if none
	TokensEqual    bool    `json:"tokens_equal"`
	PromptEqual    bool    `json:"prompt_equal"`
	Note           string  `json:"note,omitempty"`
}

// Exact reports whether the replay reproduced every step bit for bit.
func (d PromptDiff) Exact() bool {
	return d.PromptEqual && d.TokensEqual && d.Identical == d.Steps && d.Compared == d.Steps
}

// CompareStep compares two logits rows.
func CompareStep(golden, replay []float32) StepDiff {
	d := StepDiff{Identical: len(golden) == len(replay)}
	if !d.Identical {
		d.MaxAbs = math.Inf(1)
		d.KL = math.Inf(1)
		return d
	}
	for i := range golden {
		if math.Float32bits(golden[i]) != math.Float32bits(replay[i]) {
			d.Identical = false
		}
		d.MaxAbs = math.Max(d.MaxAbs, math.Abs(float64(golden[i])-float64(replay[i])))
	}
	d.Top1Agree = Argmax(golden) == Argmax(replay)
	d.KL = kl(golden, replay)
	return d
}

// Compare compares a replay run with the golden run of the same prompt.
// Steps are compared while the generated tokens agree; after the first
// differing token the contexts differ and later steps are not comparable.
func Compare(index int, golden, replay *Run) PromptDiff {
	d := PromptDiff{Index: index, Steps: len(golden.Logits), FirstDivergent: -1, PromptEqual: slices.Equal(golden.PromptTokens, replay.PromptTokens)}
	d.TokensEqual = slices.Equal(golden.Generated, replay.Generated)
	if !d.PromptEqual {
		d.FirstDivergent = 0
		d.Note = "prompt tokens differ (tokenizer or prompt file changed)"
		return d
	}
	for j := 0; j < len(golden.Logits) && j < len(replay.Logits); j++ {
		s := CompareStep(golden.Logits[j], replay.Logits[j])
		d.Compared++
		if s.Identical {
			d.Identical++
		} else if d.FirstDivergent < 0 {
			d.FirstDivergent = j
		}
		if s.Top1Agree {
			d.Top1Agree++
		}
		d.MaxAbs = math.Max(d.MaxAbs, s.MaxAbs)
		d.MaxKL = math.Max(d.MaxKL, s.KL)
		if j < len(golden.Generated) && j < len(replay.Generated) && golden.Generated[j] != replay.Generated[j] {
			if d.FirstDivergent < 0 {
				d.FirstDivergent = j
			}
			d.Note = fmt.Sprintf("generated token %d differs (golden %d, replay %d); later steps not comparable", j, golden.Generated[j], replay.Generated[j])
			break
		}
	}
	if d.FirstDivergent < 0 && len(golden.Logits) != len(replay.Logits) {
		d.FirstDivergent = min(len(golden.Logits), len(replay.Logits))
		d.Note = fmt.Sprintf("golden has %d steps, replay %d", len(golden.Logits), len(replay.Logits))
	}
	return d
}

// Argmax is the index of the largest value, the lowest index among equal
// maxima (Tarfa's greedy rule).
func Argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// kl is KL(p‖q) for p = softmax(a), q = softmax(b), in float64.
func kl(a, b []float32) float64 {
	lp, lq := logSoftmax(a), logSoftmax(b)
	var s float64
	for i := range lp {
		p := math.Exp(lp[i])
		if p > 0 {
			s += p * (lp[i] - lq[i])
		}
	}
	return math.Max(s, 0)
}

func logSoftmax(v []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, float64(x))
	}
	var z float64
	for _, x := range v {
		z += math.Exp(float64(x) - m)
	}
	lz := math.Log(z) + m
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) - lz
	}
	return out
}
