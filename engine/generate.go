package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tarfa-ai/tarfa/canon"
)

// GenOptions controls Generate.
type GenOptions struct {
	MaxTokens   int     // > 0: most tokens to generate
	Temperature float32 // 0 = greedy (argmax, ties to the lowest id); > 0 = sample
	TopP        float32 // nucleus mass in (0, 1); 0 or 1 = off (sampling only)
	TopK        int     // keep the K most likely tokens; 0 = off (sampling only)
	Seed        uint64  // sampling seed: same seed, same tokens
	Stop        []int   // generation ends after emitting one of these ids
}

// Stop reasons of GenResult.
const (
	StopToken  = "stop"   // a Stop token was generated (it is included in Tokens)
	StopLength = "length" // MaxTokens reached
)

// GenResult is what Generate produced.
type GenResult struct {
	Tokens       []int // generated ids, including a final stop token
	StopReason   string
	PromptTokens int
	Prefill      time.Duration // time of the prompt Forward
	Decode       time.Duration // time of the decode Forwards
}

// Generate runs prompt through s and then generates up to g.MaxTokens
// tokens, calling onToken (if not nil) with each new token and the logits
// it was chosen from (valid only during the call: the decode loop reuses
// the session's buffers and allocates nothing per token; copy to keep); an
// error from onToken stops generation and is returned. It is a thin
// wrapper over the scheduler's loop: a Decoder stepped through the
// session's own Batch, the prompt 64 tokens a step. The last generated token is not run through the model, so
// afterwards s.Len() == Len before + len(prompt) + len(Tokens) − 1; feed it
// first when continuing the sequence.
//
// Sampling (Temperature > 0) is deterministic for a seed, as EXACTNESS.md
// specifies it: logits are divided by the temperature (float32),
// candidates are ordered by that value, descending, ties to the lower id,
// and cut to TopK; the largest value must be finite (else an error);
// probabilities are e_i = canon.Exp(z_i − z_max), p_i = e_i / Sum(e)
// (canon order over the ordered candidates); TopP keeps the shortest
// prefix whose sequential float32 cumulative p reaches TopP; one draw
// u = (x>>40)·2⁻²⁴ per token from math/rand/v2's PCG (seeded
// NewPCG(Seed, PCGStream) once per call), target u·Sum(e over kept), and
// the first kept candidate whose sequential cumulative e exceeds the
// target is chosen (the last kept one if none does).
func Generate(ctx context.Context, s *Session, prompt []int, g GenOptions, onToken func(tok int, logits []float32) error) (res GenResult, err error) {
	res = GenResult{PromptTokens: len(prompt), Tokens: []int{}}
	d, err := NewDecoder(s, prompt, g)
	if err != nil {
		return res, err
	}
	res.Tokens = d.gen
	err = generate(ctx, d, &res, onToken)
	return res, err
}

func (g GenOptions) check() error {
	switch {
	case g.MaxTokens <= 0:
		return fmt.Errorf("engine: MaxTokens = %d, want > 0", g.MaxTokens)
	case !(g.Temperature >= 0) || g.Temperature > 1e6:
		return fmt.Errorf("engine: Temperature = %g, want 0 (greedy) or a positive number", g.Temperature)
	case !(g.TopP >= 0 && g.TopP <= 1):
		return fmt.Errorf("engine: TopP = %g, want in [0, 1]", g.TopP)
	case g.TopK < 0:
		return fmt.Errorf("engine: TopK = %d, want >= 0", g.TopK)
	}
	return nil
}

// PCGStream is the fixed second seed word of the sampling PCG.
const PCGStream uint64 = 0x7461726661736d70 // "tarfasmp"

// NewSampler returns a Sampler for g's temperature, TopP, TopK and Seed
// (MaxTokens and Stop are not its business and not checked).
func NewSampler(g GenOptions) (*Sampler, error) {
	g.MaxTokens = max(g.MaxTokens, 1)
	if err := g.check(); err != nil {
		return nil, err
	}
	return newSampler(g), nil
}

// Pick chooses the next token from logits (length vocab). Greedy picks
// are the argmax, ties to the lowest id; a sampled pick draws once from
// the sampler's PCG.
func (sp *Sampler) Pick(logits []float32) (int, error) { return sp.pick(logits, unknownArgmax) }

// unknownArgmax is pick's amax when no backend found the logits' argmax
// (no int32 of Batch.Argmaxes is).
const unknownArgmax = math.MinInt

// Sampler picks tokens from logits the way Generate does (the rule is in
// Generate's doc comment); it owns its scratch buffers and its PCG, so a
// caller that steps sessions itself (a batching scheduler) picks the same
// tokens as Generate for the same logits and options. A Sampler is not
// safe for concurrent use.
type Sampler struct {
	g    GenOptions
	rng  *rand.PCG
	cand []int32
	z, e []float32
}

func newSampler(g GenOptions) *Sampler {
	return &Sampler{g: g, rng: rand.NewPCG(g.Seed, PCGStream)}
}

// pick is Pick given amax, canon.Argmax(logits) as a backend found it
// (unknownArgmax: not found; −1: the logits hold a NaN).
func (sp *Sampler) pick(logits []float32, amax int) (int, error) {
	if sp.g.Temperature == 0 {
		a := amax
		switch {
		case a == unknownArgmax:
			a = canon.Argmax(logits)
		case a < -1 || a >= len(logits):
			return 0, fmt.Errorf("engine: the backend's argmax is %d, of %d logits", a, len(logits))
		}
		if a < 0 {
			return 0, errors.New("engine: logits contain NaN")
		}
		return a, nil
	}
	V := len(logits)
	z := grow(&sp.z, V)
	cand := grow(&sp.cand, V)
	for i, l := range logits {
		if l != l {
			return 0, errors.New("engine: logits contain NaN")
		}
		z[i] = l / sp.g.Temperature
		cand[i] = int32(i)
	}
	slices.SortFunc(cand, func(a, b int32) int {
		switch {
		case z[a] > z[b]:
			return -1
		case z[a] < z[b]:
			return 1
		}
		return int(a - b)
	})
	if sp.g.TopK > 0 && sp.g.TopK < V {
		cand = cand[:sp.g.TopK]
	}
	e := grow(&sp.e, len(cand))
	zmax := z[cand[0]]
	if math.IsInf(float64(zmax), 0) {
		// +∞ (a logit of +∞, or ℓ/T overflowing) or every logit −∞:
		// z − z_max would be NaN.
		return 0, fmt.Errorf("engine: sampling: the largest logit/temperature is %g (token %d, logit %g, temperature %g), want a finite value",
			zmax, cand[0], logits[cand[0]], sp.g.Temperature)
	}
	for i, c := range cand {
		e[i] = canon.Exp(z[c] - zmax)
	}
	if p := sp.g.TopP; p > 0 && p < 1 {
		sum := canon.Sum(e)
		var cum float32
		n := 0
		for n < len(e) {
			cum = cum + e[n]/sum
			n++
			if cum >= p {
				break
			}
		}
		cand, e = cand[:n], e[:n]
	}
	u := float32(sp.rng.Uint64()>>40) * 0x1p-24
	target := float32(u * canon.Sum(e))
	var cum float32
	for i, x := range e {
		cum = cum + x
		if target < cum {
			return int(cand[i]), nil
		}
	}
	return int(cand[len(cand)-1]), nil
}
