// Package enginebench measures the CPU reference engine's prefill and decode
// throughput at several thread counts on one model, and checks beside every
// number that the logits are bit-identical across the thread counts.
//
// # Method
//
// Options.Repeat rounds run the thread counts interleaved — 1 2 1 2 … (see
// package benchrun). For each thread count in each round (a cell) the model
// is opened and warmed up with one untimed generation (the RAM tier and
// the page cache filled); then the same greedy generation of a fixed
// synthetic prompt is repeated until both its prefills and its decodes have
// been timed for at least Options.MinDuration, giving one prefill and one
// decode figure in tokens per second, and the model is closed. Only one
// model is open at a time: with a RAM tier of every expert one holds most of
// the experts it has used, gigabytes for real layer shapes. Each thread count
// is summarised by the minimum, median and maximum of its rounds, and
// compared with the first thread count by the ratio of the medians.
//
// Every generation's logits, the warm-ups' included, are compared bit for
// bit with those of the first warm-up.
package enginebench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/validation/benchrun"
)

// Options configures Run.
type Options struct {
	// Threads are the thread counts compared, in this order (default 1 and
	// GOMAXPROCS; 0 means GOMAXPROCS).
	Threads []int
	// PromptTokens is the prompt length (default 64).
	PromptTokens int
	// DecodeTokens is the number of tokens each generation produces
	// (default 16, at least 2: the first comes from the prefill's logits).
	DecodeTokens int
	// RAMBudget is the RAM tier's budget (runner.Options.Tier: the engine
	// keeps no expert of its own): -1 (tier.Auto) keeps every verified
	// expert in RAM after the warm-up when they fit in half the available
	// memory (compute alone), 0 reads and verifies every expert on every
	// use (the cost of streaming from the page cache), else bytes.
	RAMBudget int64
	// Repeat is the number of rounds (default 5).
	Repeat int
	// MinDuration is how long, at least, the prefills and the decodes of
	// one thread count in one round are each timed (default 2 s).
	MinDuration time.Duration
	// Progress, if not nil, is called with the cells done and the cells in
	// all (a cell: one thread count in one round). It is not called after
	// Run has returned.
	Progress func(done, total int64)
}

// Cell is one thread count's measurement in one round.
type Cell struct {
	Round       int     `json:"round"`
	Threads     int     `json:"threads"`
	Generations int     `json:"generations"`
	PrefillSecs float64 `json:"prefill_seconds"`
	DecodeSecs  float64 `json:"decode_seconds"`
	PrefillTokS float64 `json:"prefill_tokens_per_second"`
	DecodeTokS  float64 `json:"decode_tokens_per_second"`
	// LogitsDigest is the digest of every step's logits of the cell's
	// generations (they are all compared bit for bit, see BitIdentical).
	LogitsDigest string `json:"logits_digest"`
	// BitIdentical: every generation of the cell gave the reference logits.
	BitIdentical bool `json:"bit_identical"`
}

// Figure summarises one thread count over all rounds.
type Figure struct {
	Threads     int              `json:"threads"`
	PrefillTokS benchrun.Summary `json:"prefill_tokens_per_second"`
	DecodeTokS  benchrun.Summary `json:"decode_tokens_per_second"`
	// PrefillRatio and DecodeRatio are this figure's medians ÷ the first
	// thread count's medians.
	PrefillRatio float64 `json:"prefill_ratio_to_first"`
	DecodeRatio  float64 `json:"decode_ratio_to_first"`
	// Generations counts the timed generations over all rounds.
	Generations  int    `json:"generations"`
	LogitsDigest string `json:"logits_digest"`
	// BitIdentical: every generation at this thread count, warm-up
	// included, gave logits bit-identical to the reference.
	BitIdentical  bool    `json:"bit_identical"`
	ExpertsPerTok float64 `json:"experts_per_token_per_moe_layer"`
}

// Result is a whole run.
type Result struct {
	Model        string        `json:"model"`
	Host         benchrun.Host `json:"host"`
	Started      time.Time     `json:"started"`
	LoadBefore   float64       `json:"load_before"` // 1-minute load average (-1: unknown)
	LoadAfter    float64       `json:"load_after"`
	Repeat       int           `json:"repeat"`
	MinSeconds   float64       `json:"min_seconds"`
	PromptTokens int           `json:"prompt_tokens"`
	DecodeTokens int           `json:"decode_tokens"`
	RAMBudget    int64         `json:"ram_budget_bytes"`
	// ReferenceDigest is the digest of the reference logits: the first
	// warm-up generation (first thread count, first round).
	ReferenceDigest string `json:"reference_digest"`
	// Order is the thread counts in the order of each round.
	Order   []int    `json:"order"`
	Figures []Figure `json:"figures"`
	Cells   []Cell   `json:"cells"`
}

// BitIdentical reports whether every generation gave the reference logits.
func (r *Result) BitIdentical() bool {
	for _, f := range r.Figures {
		if !f.BitIdentical {
			return false
		}
	}
	return len(r.Figures) > 0
}

// Run benchmarks the JNF model in dir. It returns as soon as ctx is done
// with ctx.Err(); a forward pass then in flight (the engine's Forward takes
// no context) finishes in the background, after which the models are
// closed.
func Run(ctx context.Context, dir string, opt Options) (*Result, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	var stopped atomic.Bool
	if p := opt.Progress; p != nil {
		opt.Progress = func(done, total int64) {
			if !stopped.Load() {
				p(done, total)
			}
		}
	}
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := run(ctx, dir, opt)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		stopped.Store(true)
		return nil, ctx.Err()
	}
}

func (o *Options) defaults() error {
	if len(o.Threads) == 0 {
		o.Threads = []int{1, runtime.GOMAXPROCS(0)}
	}
	if o.PromptTokens == 0 {
		o.PromptTokens = 64
	}
	if o.DecodeTokens == 0 {
		o.DecodeTokens = 16
	}
	if o.Repeat == 0 {
		o.Repeat = 5
	}
	if o.MinDuration == 0 {
		o.MinDuration = 2 * time.Second
	}
	o.Threads = slices.Clone(o.Threads)
	for i, th := range o.Threads {
		if th < 0 {
			return fmt.Errorf("enginebench: %d threads, want at least 1 (or 0 for all cores)", th)
		}
		if th == 0 {
			o.Threads[i] = runtime.GOMAXPROCS(0)
		}
	}
	switch {
	case o.PromptTokens < 1:
		return fmt.Errorf("enginebench: prompt of %d tokens, want at least 1", o.PromptTokens)
	case o.DecodeTokens < 2:
		return fmt.Errorf("enginebench: %d decode tokens, want at least 2 (the first comes from the prefill)", o.DecodeTokens)
	case o.Repeat < 1:
		return fmt.Errorf("enginebench: %d rounds, want at least 1", o.Repeat)
	case o.MinDuration < 0:
		return fmt.Errorf("enginebench: minimum duration %v, want > 0", o.MinDuration)
	case o.RAMBudget < -1:
		return fmt.Errorf("enginebench: RAM budget of %d bytes, want -1 (auto: every expert), 0 (none) or a size", o.RAMBudget)
	}
	return nil
}

// arm is one thread count: its model while a cell runs, and its tallies.
type arm struct {
	threads int
	r       *runner.Runner // open from the cell's Prepare to its After
	s       *engine.Session
	gens    int
	ok      bool
	cells   []Cell
	prefill []float64
	decode  []float64
	// evals and tokens count routed-expert evaluations in MoE layers and
	// tokens over the timed generations, and moe the MoE layers.
	evals, tokens int64
	moe           int
}

func run(ctx context.Context, dir string, opt Options) (_ *Result, err error) {
	res := &Result{Model: dir, Host: benchrun.ThisHost(), Started: time.Now().UTC(), LoadBefore: benchrun.LoadAverage(),
		Repeat: opt.Repeat, MinSeconds: opt.MinDuration.Seconds(), PromptTokens: opt.PromptTokens,
		DecodeTokens: opt.DecodeTokens, RAMBudget: opt.RAMBudget, Order: opt.Threads}
	total := int64(len(opt.Threads) * opt.Repeat)
	var done int64
	arms := make([]*arm, len(opt.Threads))
	defer func() {
		for _, a := range arms {
			if a != nil && a.r != nil {
				a.r.Close()
			}
		}
	}()
	var prompt []int
	var ref [][]float32
	var runs []benchrun.Arm
	for i, th := range opt.Threads {
		a := &arm{threads: th, ok: true}
		arms[i] = a
		runs = append(runs, benchrun.Arm{
			Name: fmt.Sprintf("%d threads", th),
			// One model is open at a time (a RAM tier of every expert can
			// hold most of a layer's experts): open it, and warm the
			// RAM tier and the page cache with one untimed
			// generation. The very first one's logits are the reference.
			Prepare: func(ctx context.Context) error {
				r, err := runner.Open(ctx, dir, runner.Options{Threads: th,
					Tier: &tier.Options{RAMBudget: opt.RAMBudget, StagingBudget: tier.Auto}})
				if err != nil {
					return err
				}
				a.r, a.s = r, r.Engine.NewSession()
				if a.moe == 0 {
					for _, sparse := range r.Config.Sparse {
						if sparse {
							a.moe++
						}
					}
				}
				if prompt == nil {
					V := r.Config.Vocab
					prompt = make([]int, opt.PromptTokens)
					for j := range prompt {
						prompt[j] = (j*7919 + 13) % V
					}
				}
				var keep func(int, []float32) error
				if ref == nil {
					keep = func(_ int, lg []float32) error {
						ref = append(ref, slices.Clone(lg))
						return nil
					}
				}
				g, err := a.generate(ctx, prompt, opt.DecodeTokens, ref, keep)
				if err != nil {
					return err
				}
				if res.ReferenceDigest == "" {
					res.ReferenceDigest = g.digest
				}
				a.ok = a.ok && g.identical
				return nil
			},
			Run: func(ctx context.Context) error {
				before := a.r.Engine.Stats()
				c := Cell{Round: len(a.cells), Threads: th, BitIdentical: true}
				var pre, dec time.Duration
				var preTok, decTok int
				for pre < opt.MinDuration || dec < opt.MinDuration {
					g, err := a.generate(ctx, prompt, opt.DecodeTokens, ref, nil)
					if err != nil {
						return err
					}
					if c.Generations == 0 {
						c.LogitsDigest = g.digest
					}
					c.Generations++
					c.BitIdentical = c.BitIdentical && g.identical && g.digest == c.LogitsDigest
					pre += g.res.Prefill
					dec += g.res.Decode
					preTok += g.res.PromptTokens
					decTok += len(g.res.Tokens) - 1
				}
				after := a.r.Engine.Stats()
				for l, n := range after.ExpertEvals {
					if a.r.Config.Sparse[l] {
						a.evals += n - before.ExpertEvals[l]
					}
				}
				a.tokens += after.Tokens - before.Tokens
				c.PrefillSecs, c.DecodeSecs = pre.Seconds(), dec.Seconds()
				c.PrefillTokS, c.DecodeTokS = float64(preTok)/c.PrefillSecs, float64(decTok)/c.DecodeSecs
				a.cells = append(a.cells, c)
				a.prefill = append(a.prefill, c.PrefillTokS)
				a.decode = append(a.decode, c.DecodeTokS)
				a.gens += c.Generations
				a.ok = a.ok && c.BitIdentical
				return nil
			},
			After: func(context.Context) error {
				err := a.r.Close()
				a.r, a.s = nil, nil
				done++
				if opt.Progress != nil {
					opt.Progress(done, total)
				}
				return err
			},
		})
	}
	if _, err := (benchrun.Runner{Rounds: opt.Repeat}).Interleave(ctx, runs); err != nil {
		return nil, err
	}
	res.LoadAfter = benchrun.LoadAverage()
	for round := range opt.Repeat {
		for _, a := range arms {
			res.Cells = append(res.Cells, a.cells[round])
		}
	}
	for _, a := range arms {
		f := Figure{Threads: a.threads, PrefillTokS: benchrun.Summarize(a.prefill), DecodeTokS: benchrun.Summarize(a.decode),
			Generations: a.gens, LogitsDigest: a.cells[0].LogitsDigest, BitIdentical: a.ok}
		if len(res.Figures) > 0 {
			first := res.Figures[0]
			f.PrefillRatio = benchrun.Ratio(f.PrefillTokS, first.PrefillTokS)
			f.DecodeRatio = benchrun.Ratio(f.DecodeTokS, first.DecodeTokS)
		} else {
			f.PrefillRatio, f.DecodeRatio = 1, 1
		}
		if a.tokens > 0 && a.moe > 0 {
			f.ExpertsPerTok = float64(a.evals) / float64(a.tokens) / float64(a.moe)
		}
		res.Figures = append(res.Figures, f)
	}
	return res, nil
}

// The logits digest folds the bits of every logit of every step, in order,
// into an FNV-style 64-bit hash, one float32 at a time ("fnv64:…", the
// digest BENCHMARKS.md has quoted since the first engine measurements).
const (
	digestOffset uint64 = 1469598103934665603
	digestPrime  uint64 = 1099511628211
)

type generation struct {
	res       engine.GenResult
	digest    string
	identical bool // to ref (true when ref is nil)
}

// generate runs one greedy generation on the arm's session, digesting every
// step's logits and comparing them bit for bit with ref (if not nil).
func (a *arm) generate(ctx context.Context, prompt []int, n int, ref [][]float32, also func(int, []float32) error) (generation, error) {
	h := digestOffset
	g := generation{identical: true}
	step := 0
	a.s.Reset()
	res, err := engine.Generate(ctx, a.s, prompt, engine.GenOptions{MaxTokens: n}, func(tok int, lg []float32) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, v := range lg {
			h = (h ^ uint64(math.Float32bits(v))) * digestPrime
		}
		if ref != nil && (step >= len(ref) || !bitsEqual(ref[step], lg)) {
			g.identical = false
		}
		step++
		if also != nil {
			return also(tok, lg)
		}
		return nil
	})
	if err != nil {
		return g, err
	}
	if ref != nil && step != len(ref) {
		g.identical = false
	}
	g.res, g.digest = res, fmt.Sprintf("fnv64:%016x", h)
	return g, nil
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
