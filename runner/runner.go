// Package runner puts a verified model, the engine and the tokenizer
// together for the commands that generate: run, chat, serve, golden record,
// replay and attest run. It turns prompts (text, chat messages or ids)
// into tokens, generates, and records or replays golden runs.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/backend"
	_ "github.com/tarfa-ai/tarfa/backend/cpu"  // registers the "cpu" backend (engine.OpenBackend)
	_ "github.com/tarfa-ai/tarfa/backend/cuda" // registers "cuda" (the stub says how to build it in)
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tokenizer"
	"github.com/tarfa-ai/tarfa/weights"
)

// Runner is an opened model ready to generate.
type Runner struct {
	Dir        string
	Checkpoint *weights.Checkpoint
	Config     *hf.Config // the checkpoint's configuration
	Engine     *engine.Model
	Tok        *tokenizer.Tokenizer // nil when the model directory has no tokenizer.json
	Threads    int
	// Tier is the streaming hierarchy the experts come through (nil: the
	// engine reads and verifies every expert for every use, keeping none).
	Tier *tier.Hierarchy

	schedOnce sync.Once
	sched     *Scheduler
	schedErr  error

	trace   *traceRecorder // nil unless Options.Trace
	heat    *tier.Heat     // nil unless Options.HeatDir
	heatDir string
	heatMu  sync.Mutex
}

// Options configures Open.
type Options struct {
	Threads int // engine goroutines (0 = all cores); results never depend on it
	// Backend names the engine's backend (engine.Backends; "" = cpu) and
	// VRAMBudget bounds a device backend's memory (0: the whole device).
	// Results never depend on them.
	Backend    string
	VRAMBudget int64
	// DeviceVerify makes a device backend hash every routed expert it
	// copies into device memory, there, against its digest
	// (engine.BackendOptions.VerifyCopies).
	DeviceVerify bool
	// Timing makes a device backend measure the device time of its kernels
	// and copies (engine.BackendOptions.Timing; a little slower).
	Timing bool
	// Placement chooses where routed experts that are not resident on a
	// device backend are computed. Results never depend on it.
	Placement engine.Placement
	// NewBackend, if set, makes the backend instead of engine.OpenBackend
	// (Backend and VRAMBudget are then unused; tests give a simulated
	// device).
	NewBackend func() (backend.Backend, error)
	// PinSlots chooses whether a backend that can pin host memory
	// (backend.Pinner: cuda) pins the staging buffers of the Tier and its
	// RAM tier's, so that an expert streamed into one, or resident in one,
	// is copied to the device from where it lies, with no staging copy. Nil: on for such a backend (off for cpu,
	// which cannot pin); a slot that fails to pin stays ordinary memory
	// (tier.Options.Pinner). True with a backend that cannot pin is an
	// error. A Tier.Pinner set by the caller is kept. Results never depend
	// on it.
	PinSlots *bool
	// Tier, if set, streams the experts through a hierarchy with these
	// budgets (package tier): its RAM tier is where verified experts stay
	// resident. Nil: the engine reads and verifies every expert for every
	// use, keeping none. Results never depend on it.
	Tier *tier.Options
	// Trace, if set, receives the routing of every generation (the
	// tier/trace format, source "measured").
	Trace io.Writer
	// HeatDir, if set, keeps the model's expert-heat ledger there
	// (tier.LoadHeat): it is the heat policy's prior, every generation adds
	// to it, and Close saves it.
	HeatDir string
	// Warm reads the hottest experts of the heat ledger into the RAM tier
	// in the background right after opening (a warm start).
	Warm bool
	// Progress, if set, is called while the engine loads with the bytes of
	// non-expert tensors read and verified so far and their total.
	Progress func(done, total int64)
}

// Open opens a JNF directory (root-checked by weights.Open), loads the
// engine (every non-expert tensor read and verified; interruptible within
// a tensor, a chunk at a time) and, when the manifest lists one, the tokenizer copied beside
// the weights (read through the checkpoint's verified auxiliary files).
func Open(ctx context.Context, dir string, opt Options) (_ *Runner, err error) {
	m, err := weights.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	var h *tier.Hierarchy
	defer func() {
		if err != nil {
			if h != nil {
				h.Close()
			}
			m.Close()
		}
	}()
	eopt := engine.Options{Threads: opt.Threads, Placement: opt.Placement}
	if opt.PinSlots != nil && *opt.PinSlots && opt.Tier == nil {
		return nil, fmt.Errorf("runner: pinned staging buffers need a tier (Options.Tier): without one there are no slots to pin")
	}
	var be backend.Backend
	if opt.NewBackend != nil {
		be, err = opt.NewBackend()
	} else {
		be, err = engine.OpenBackend(opt.Backend, engine.BackendOptions{Threads: opt.Threads, VRAMBudget: opt.VRAMBudget, VerifyCopies: opt.DeviceVerify, Timing: opt.Timing})
	}
	if err != nil {
		return nil, err
	}
	eopt.Backend = be
	defer func() {
		if err != nil {
			be.Close()
		}
	}()
	var heat *tier.Heat
	if opt.HeatDir != "" {
		if heat, err = tier.LoadHeat(opt.HeatDir, m); err != nil {
			return nil, err
		}
	}
	var loaded atomic.Pointer[engine.Model] // for the scrubber, once loaded
	if opt.Tier != nil {
		to := *opt.Tier
		if heat != nil && to.PolicyOptions.Heat == nil {
			to.PolicyOptions.Heat = heat.Counts
		}
		if to.ScrubExtra == nil {
			// Scrub passes also re-hash the non-expert tensors the model
			// keeps resident.
			to.ScrubExtra = func() (int64, error) {
				if em := loaded.Load(); em != nil {
					return em.Scrub()
				}
				return 0, nil
			}
		}
		if to.Pinner, err = slotPinner(be, to.Pinner, opt.PinSlots); err != nil {
			return nil, err
		}
		if pool, ok := be.(backend.SlotPool); ok && to.Slots == nil {
			// The device level: the backend's expert slots, as many as the
			// budget leaves after the weights (sized at the first step).
			to.Slots = pool
		}
		if h, err = tier.New(m, to); err != nil {
			return nil, err
		}
		eopt.Experts = h
		if opt.Warm && heat != nil {
			if _, err := h.Warm(heat.Counts); err != nil {
				return nil, err
			}
		}
	}
	if opt.Progress != nil {
		var done int64
		total := m.TensorBytes()
		opt.Progress(0, total)
		eopt.LoadProgress = func(n int64) { done += n; opt.Progress(done, max(total, done)) }
	}
	em, err := engine.LoadContext(ctx, m, eopt)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			em.Close()
		}
	}()
	loaded.Store(em)
	r := &Runner{Dir: dir, Checkpoint: m, Config: em.Config(), Engine: em, Threads: em.Backend().Threads(), Tier: h, heat: heat, heatDir: opt.HeatDir}
	// The tokenizer and chat template are read from the verified auxiliary
	// files: what is parsed is what the manifest root attests. Its ids are
	// bounded by the model's vocabulary before anything is sized from them.
	aux, err := m.AuxFS()
	if err != nil {
		return nil, err
	}
	if _, serr := fs.Stat(aux, tokenizer.TokenizerFile); serr == nil {
		if r.Tok, err = (tokenizer.LoadOptions{ModelVocab: r.Config.Vocab}).LoadFS(aux); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	if opt.Trace != nil {
		if r.trace, err = newTraceRecorder(opt.Trace, r); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// Close finishes the trace and releases the hierarchy and the model files.
func (r *Runner) Close() error {
	var err error
	if r.sched != nil {
		r.sched.Close()
	}
	if r.trace != nil {
		err = r.trace.close()
	}
	if r.heat != nil && r.heat.Runs > 0 {
		if herr := r.heat.Save(r.heatDir); err == nil && herr != nil {
			err = fmt.Errorf("saving the expert-heat ledger: %w", herr)
		}
	}
	if cerr := r.Engine.Close(); err == nil {
		err = cerr
	}
	// The tier before the backend: its staging buffers may be pinned by
	// the backend (slotPinner), and unpinning is a backend call.
	if r.Tier != nil {
		if terr := r.Tier.Close(); err == nil {
			err = terr
		}
	}
	if cerr := r.Engine.Backend().Close(); err == nil {
		err = cerr
	}
	if cerr := r.Checkpoint.Close(); err == nil {
		err = cerr
	}
	return err
}

// Mode is the label of what the runner computes: ledger.ModeExactFP8 for
// a block-FP8 checkpoint, ledger.ModeExact otherwise.
func (r *Runner) Mode() string { return ledger.ModeOf(r.Config.Quant != nil) }

// NewSession starts a session with its own ledger (recording the routing
// into the trace when the runner keeps one).
func (r *Runner) NewSession() (*engine.Session, *ledger.Ledger) {
	sess := r.Engine.NewSession()
	l := ledger.New(r.Checkpoint.Root(), r.Config.Layers, r.Config.TopK, r.Mode())
	sess.SetLedger(l)
	if r.trace != nil {
		r.trace.observe(l)
	}
	return sess, l
}

// DefaultStops are the end-of-sequence ids: the tokenizer's EOS token and the
// config's eos_token_id list.
func (r *Runner) DefaultStops() []int {
	seen := map[int]bool{}
	var out []int
	if r.Tok != nil {
		if id, ok := r.Tok.EOS(); ok {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range r.Config.EOS {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func (r *Runner) needTokenizer(what string) error {
	if r.Tok == nil {
		return fmt.Errorf("%s needs a tokenizer, but %s has no tokenizer.json (give token ids instead)", what, r.Dir)
	}
	return nil
}

// slotPinner is the Pinner of the tier's staging buffers: the caller's, else
// the backend's when it can pin and pin (Options.PinSlots) is not false.
func slotPinner(be backend.Backend, set weights.Pinner, pin *bool) (weights.Pinner, error) {
	if set != nil {
		return set, nil
	}
	p, ok := be.(backend.Pinner)
	switch {
	case pin != nil && !*pin:
		return nil, nil
	case ok:
		return p, nil
	case pin != nil:
		return nil, fmt.Errorf("runner: pinned staging buffers need a backend that can pin host memory, not %s", be.Name())
	}
	return nil, nil
}

// EncodeText encodes plain text (no chat template).
func (r *Runner) EncodeText(text string) ([]int, error) {
	if err := r.needTokenizer("a text prompt"); err != nil {
		return nil, err
	}
	return r.Tok.Encode(text), nil
}

// EncodeChat renders messages with the model's chat template (generation
// prompt added) and encodes the result.
func (r *Runner) EncodeChat(messages json.RawMessage, enableThinking *bool) ([]int, string, error) {
	in := map[string]any{"messages": messages, "add_generation_prompt": true}
	if enableThinking != nil {
		in["enable_thinking"] = *enableThinking
	}
	return r.encodeChat(in)
}

// EncodeChatTools is EncodeChat with tool schemas passed to the template
// (its "tools" variable). A template that never reads "tools" cannot
// offer them: tools for it are an error rather than silently dropped.
func (r *Runner) EncodeChatTools(messages []json.RawMessage, tools []json.RawMessage) ([]int, string, error) {
	in := map[string]any{"messages": messages, "add_generation_prompt": true}
	if len(tools) > 0 {
		in["tools"] = tools
	}
	return r.encodeChat(in)
}

// encodeChat renders the chat template's input in and encodes the text.
func (r *Runner) encodeChat(in map[string]any) ([]int, string, error) {
	if err := r.needTokenizer("a chat prompt"); err != nil {
		return nil, "", err
	}
	tpl, err := r.Tok.ChatTemplate()
	if err != nil {
		return nil, "", err
	}
	if _, ok := in["tools"]; ok && !strings.Contains(tpl.Source(), "tools") {
		return nil, "", fmt.Errorf("%s: the model's chat template does not read \"tools\": it cannot offer tools", r.Dir)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, "", err
	}
	text, err := tpl.RenderJSON(b)
	if err != nil {
		return nil, "", err
	}
	return r.Tok.Encode(text), text, nil
}

// PromptTokens turns a prompt-file line into token ids.
func (r *Runner) PromptTokens(p golden.Prompt) ([]int, error) {
	switch {
	case p.Tokens != nil:
		return p.Tokens, nil
	case p.Text != nil:
		return r.EncodeText(*p.Text)
	default:
		ids, _, err := r.EncodeChat(p.Messages, p.EnableThinking)
		return ids, err
	}
}

// GenOptions converts golden sampling settings.
func GenOptions(maxTokens int, stop []int, s golden.Sampling) engine.GenOptions {
	return engine.GenOptions{MaxTokens: maxTokens, Stop: stop, Temperature: float32(s.Temperature),
		TopP: float32(s.TopP), TopK: s.TopK, Seed: s.Seed}
}

// ContextLimit is the most positions a sequence may hold: the model's
// max_position_embeddings when it sets one, and the engine's bound.
func (r *Runner) ContextLimit() int {
	limit := canon.MaxRopePosition
	if r.Config.MaxPositions > 0 {
		limit = min(limit, r.Config.MaxPositions)
	}
	return limit
}

// MaxNewTokens is the most tokens a prompt of n tokens can be followed by
// within ContextLimit (the last generated token is not run through the
// model), or 0 when the prompt alone does not fit.
func (r *Runner) MaxNewTokens(n int) int {
	return max(0, r.ContextLimit()-n+1)
}

// Scheduler is the runner's own scheduler (default SchedOptions, no state
// budget), started on first use: the generation path of Generate and
// GenerateLedger. Close stops it.
func (r *Runner) Scheduler() (*Scheduler, error) {
	r.schedOnce.Do(func() { r.sched, r.schedErr = NewScheduler(r, SchedOptions{}) })
	return r.sched, r.schedErr
}

// Do runs req through the runner's scheduler, calling onToken (if not nil)
// with every token as it comes; an error from onToken ends the request and
// is returned. It returns ctx's error within one model layer of ctx being
// done when req is the only request in its step, else before the next.
func (r *Runner) Do(ctx context.Context, req Request, onToken func(Token) error) (Result, error) {
	s, err := r.Scheduler()
	if err != nil {
		return Result{}, err
	}
	return Do(ctx, s, req, onToken)
}

// Do submits req to s and waits for its end, calling onToken (if not nil)
// with every token as it comes.
func Do(ctx context.Context, s *Scheduler, req Request, onToken func(Token) error) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.Submit(ctx, req)
	if err != nil {
		return Result{}, err
	}
	var cbErr error
	for cbErr == nil {
		toks, done, err := st.Next(ctx)
		if err != nil || done {
			break
		}
		for _, t := range toks {
			if onToken != nil {
				if cbErr = onToken(t); cbErr != nil {
					cancel()
					break
				}
			}
		}
	}
	res, err := st.Result(context.Background())
	if cbErr != nil {
		err = cbErr
	}
	return res, err
}

// Generate runs one prompt in a fresh session and returns the run and the
// engine's account of it (stop reason, prefill and decode times); with
// keepLogits the run holds a copy of every step's logits (golden record and
// replay), otherwise none are copied (plain generation). It returns ctx's
// error within one model layer of ctx being done.
func (r *Runner) Generate(ctx context.Context, prompt []int, maxTokens int, stop []int, s golden.Sampling, keepLogits bool, onToken func(int) error) (golden.Run, engine.GenResult, error) {
	run := golden.Run{PromptTokens: prompt, MaxTokens: maxTokens, Stop: stop, Sampling: s}
	req := Request{Prompt: prompt, Gen: GenOptions(maxTokens, stop, s), KeepLogits: keepLogits}
	res, err := r.Do(ctx, req, func(t Token) error {
		if run.Generated == nil {
			run.Generated = make([]int, 0, min(maxTokens, 4096))
		}
		run.Generated = append(run.Generated, t.ID)
		if keepLogits {
			run.Logits = append(run.Logits, t.Logits)
		}
		if onToken != nil {
			return onToken(t.ID)
		}
		return nil
	})
	return run, res.GenResult(), err
}

// endSession adds a finished session to the trace and the heat ledger and
// releases its backend memory.
func (r *Runner) endSession(sess *engine.Session) {
	defer sess.Close()
	if r.trace != nil {
		r.trace.endSession()
	}
	if r.heat != nil {
		r.heatMu.Lock()
		r.heat.Add(sess.Ledger().Summary())
		r.heatMu.Unlock()
	}
}

// Record runs every prompt and returns the golden record. progress, if not
// nil, is called after each prompt.
func (r *Runner) Record(ctx context.Context, prompts []golden.Prompt, version string, progress func(done, total int)) (*golden.Golden, []golden.Run, error) {
	g := &golden.Golden{ModelRoot: r.Checkpoint.Root().Hex(), WeightsRoot: r.Checkpoint.WeightsRoot().Hex(),
		Arch: string(r.Config.Arch), Vocab: r.Config.Vocab, Backend: r.Engine.Backend().Name(),
		Threads: r.Threads, Tarfa: version}
	// Every prompt is encoded and checked against the context before any
	// is run: a bad line fails at once, not after the lines before it.
	type job struct {
		p         golden.Prompt
		ids, stop []int
	}
	jobs := make([]job, 0, len(prompts))
	for _, p := range prompts {
		ids, err := r.PromptTokens(p)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt line %d: %w", p.Line, err)
		}
		if n := r.MaxNewTokens(len(ids)); p.MaxTokens > n {
			return nil, nil, fmt.Errorf("prompt line %d: %d prompt tokens and max_tokens %d do not fit the model's context of %d positions (at most %d new tokens do)",
				p.Line, len(ids), p.MaxTokens, r.ContextLimit(), n)
		}
		stop := p.Stop
		if stop == nil {
			stop = r.DefaultStops()
		}
		jobs = append(jobs, job{p, ids, stop})
	}
	var runs []golden.Run
	for _, j := range jobs {
		run, _, err := r.Generate(ctx, j.ids, j.p.MaxTokens, j.stop, j.p.Sampling, true, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt line %d: %w", j.p.Line, err)
		}
		g.Prompts = append(g.Prompts, golden.PromptRecord{Source: j.p.Source})
		runs = append(runs, run)
		if progress != nil {
			progress(len(runs), len(prompts))
		}
	}
	return g, runs, nil
}

// Replay regenerates every golden prompt with its recorded tokens and
// settings and compares step by step. A golden record of another model (its
// model root is not this one's) is refused with an error that matches
// jnf.ErrVerification. progress, if not nil, is called after each prompt.
func (r *Runner) Replay(ctx context.Context, g *golden.Golden, runs []golden.Run, progress func(done, total int)) ([]golden.PromptDiff, error) {
	if root := r.Checkpoint.Root().Hex(); g.ModelRoot != root {
		return nil, fmt.Errorf("the golden record was made with model root %s, %s has root %s: not the same model: %w", g.ModelRoot, r.Dir, root, jnf.ErrVerification)
	}
	var out []golden.PromptDiff
	for i := range runs {
		want := &runs[i]
		got, _, err := r.Generate(ctx, want.PromptTokens, want.MaxTokens, want.Stop, want.Sampling, true, nil)
		if err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
		out = append(out, golden.Compare(i, want, &got))
		if progress != nil {
			progress(len(out), len(runs))
		}
	}
	return out, nil
}
