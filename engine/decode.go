package engine

import (
	"context"
	"errors"
	"time"
)

// Decoder is one generation's loop state: the prompt still to feed, the
// sampler, the stop ids and the tokens generated. It is the one generation
// loop of Tarfa: the scheduler (package runner) drives a Decoder per
// request through shared Batch steps, and Generate drives one through its
// session's own Batch. A Decoder allocates nothing per token.
//
// Each step: Input gives the tokens to append to the session; after the
// step, Fed reports whether the step's logits choose the next token, and
// if so Emit picks it (and records it in the session's ledger).
type Decoder struct {
	s      *Session
	prompt []int
	g      GenOptions
	smp    *Sampler
	stop   map[int]bool
	fed    int    // prompt tokens fed
	one    [1]int // the last generated token, the next decode step's input
	gen    []int
}

// NewDecoder starts a generation of up to g.MaxTokens tokens after prompt
// (kept, not copied) in s: it checks g and records the prompt in s's
// ledger.
func NewDecoder(s *Session, prompt []int, g GenOptions) (*Decoder, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, errors.New("engine: Generate needs a non-empty prompt")
	}
	d := &Decoder{s: s, prompt: prompt, g: g, smp: newSampler(g), stop: make(map[int]bool, len(g.Stop)),
		gen: make([]int, 0, min(g.MaxTokens, 4096))}
	for _, t := range g.Stop {
		d.stop[t] = true
	}
	s.ledger.Prompt(prompt)
	s.SetArgmax(g.Temperature == 0)
	return d, nil
}

// Session is the decoder's session.
func (d *Decoder) Session() *Session { return d.s }

// Prefilling reports whether prompt tokens are still to be fed.
func (d *Decoder) Prefilling() bool { return d.fed < len(d.prompt) }

// Input is the next step's tokens: up to n (at least 1) of the prompt's
// while prefilling, else the last generated token. The slice is valid
// until the next Emit.
func (d *Decoder) Input(n int) []int {
	if d.Prefilling() {
		return d.prompt[d.fed:min(d.fed+max(n, 1), len(d.prompt))]
	}
	return d.one[:]
}

// Fed records that a step appended n tokens of Input to the session; true
// when that step's logits choose the next token (the whole prompt is in).
func (d *Decoder) Fed(n int) bool {
	if d.Prefilling() {
		d.fed += n
		return !d.Prefilling()
	}
	return true
}

// Emit picks the next token from logits (the last step's, of length
// vocab), records it and the logits in the session's ledger and reports
// whether the generation has ended (a stop id or MaxTokens).
func (d *Decoder) Emit(logits []float32) (tok int, done bool, err error) {
	return d.emit(logits, unknownArgmax)
}

// EmitRow is Emit for row i of a Batch step's logits, given the step's
// Batch.Argmaxes (nil when it found none): a greedy pick then takes the
// row's argmax as the backend found it instead of a pass over the logits;
// a sampled pick does not use it.
func (d *Decoder) EmitRow(logits []float32, argmaxes []int32, i int) (tok int, done bool, err error) {
	return d.emit(logits, argmaxOf(argmaxes, i))
}

// argmaxOf is row i of argmaxes (Batch.Argmaxes), or unknownArgmax when
// the step found none.
func argmaxOf(argmaxes []int32, i int) int {
	if argmaxes == nil {
		return unknownArgmax
	}
	return int(argmaxes[i])
}

func (d *Decoder) emit(logits []float32, amax int) (tok int, done bool, err error) {
	tok, err = d.smp.pick(logits, amax)
	if err != nil {
		return 0, true, err
	}
	d.gen = append(d.gen, tok)
	d.s.ledger.Step(logits, tok)
	d.one[0] = tok
	return tok, d.stop[tok] || len(d.gen) >= d.g.MaxTokens, nil
}

// Tokens are the generated ids so far (the decoder's own slice: not to be
// changed).
func (d *Decoder) Tokens() []int { return d.gen }

// StopReason is StopToken after a stop id, StopLength after MaxTokens,
// else "" (the generation has not ended by itself).
func (d *Decoder) StopReason() string {
	switch {
	case len(d.gen) > 0 && d.stop[d.gen[len(d.gen)-1]]:
		return StopToken
	case len(d.gen) >= d.g.MaxTokens:
		return StopLength
	}
	return ""
}

// soloBatch is a Batch over the session's own work (its Forward's queue
// and scratch), for Generate; it is not to be closed (Session.Close frees
// the work).
func (s *Session) soloBatch() (*Batch, error) {
	if s.st.solo == nil {
		w, err := s.m.newWork()
		if err != nil {
			return nil, err
		}
		s.st.solo = w
	}
	if s.st.soloB == nil || s.st.soloB.w != s.st.solo {
		s.st.soloB = &Batch{m: s.m, w: s.st.solo}
	}
	return s.st.soloB, nil
}

// generate is Generate's loop: d through s's own Batch, maxChunk prompt
// tokens a step.
func generate(ctx context.Context, d *Decoder, res *GenResult, onToken func(tok int, logits []float32) error) error {
	s := d.s
	b, err := s.soloBatch()
	if err != nil {
		return err
	}
	sessions := [1]*Session{s}
	var tokens [1][]int
	t0 := time.Now()
	prefilled := false
	endPrefill := func() {
		res.Prefill = time.Since(t0)
		s.ledger.Time("prefill", res.Prefill)
		prefilled, t0 = true, time.Now()
	}
	defer func() {
		if prefilled {
			res.Decode = time.Since(t0)
			s.ledger.Time("decode", res.Decode)
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		tokens[0] = d.Input(maxChunk)
		lg, err := b.StepReuse(ctx, sessions[:], tokens[:])
		if err != nil {
			if !prefilled {
				res.Prefill = time.Since(t0)
				s.ledger.Time("prefill", res.Prefill)
			}
			return err
		}
		if !d.Fed(len(tokens[0])) {
			continue
		}
		if !prefilled {
			endPrefill()
		}
		tok, done, err := d.EmitRow(lg[0], b.Argmaxes(), 0)
		res.Tokens = d.gen
		if err != nil {
			return err
		}
		if onToken != nil {
			if err := onToken(tok, lg[0]); err != nil {
				return err
			}
		}
		if done {
			res.StopReason = d.StopReason()
			return nil
		}
	}
}
