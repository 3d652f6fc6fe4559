package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
)

// StopSequence is the stop reason of a request that Request.StopAfter
// ended (a stop string, for instance).
const StopSequence = "stop_sequence"

// MaxTopLogprobs bounds Request.TopLogprobs.
const MaxTopLogprobs = 20

// Request is one generation: the one generation path of run, golden,
// attest run, serve and chat (Scheduler.Submit).
type Request struct {
	Prompt []int
	// Gen holds MaxTokens, the sampling settings and the stop token ids.
	Gen engine.GenOptions
	// Logprobs asks for every token's log-probability under the model (of
	// the logits, before temperature), and TopLogprobs (0 to
	// MaxTopLogprobs) for that many most likely tokens beside it.
	Logprobs    bool
	TopLogprobs int
	// KeepLogits gives every Token a copy of the logits it was chosen from.
	KeepLogits bool
	// StopAfter, if set, is called on the scheduler's goroutine after each
	// token with every token generated so far (not to be kept); true ends
	// the generation there, with StopReason StopSequence. It must be quick.
	StopAfter func(generated []int) bool
}

// Token is one generated token.
type Token struct {
	ID int
	// Logprob and Top are set with Request.Logprobs.
	Logprob float32
	Top     []TokenLogprob
	// Logits is set with Request.KeepLogits.
	Logits []float32
}

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// Result is what a finished request produced.
type Result struct {
	Tokens       []int
	StopReason   string // engine.StopToken, engine.StopLength or StopSequence
	PromptTokens int
	Gen          engine.GenOptions
	// Queued is the wait for admission; Prefill runs from admission to the
	// first token (so time to first token = Queued + Prefill); Decode from
	// there to the last.
	Queued, Prefill, Decode time.Duration
	// Ledger is the request's own ledger: its routing, logits chain and
	// the experts its rows used (bytes hashed for an expert shared within
	// a step are counted for one of the requests routed to it).
	Ledger ledger.Summary
}

// GenResult is r's engine.GenResult view.
func (r *Result) GenResult() engine.GenResult {
	reason := r.StopReason
	return engine.GenResult{Tokens: r.Tokens, StopReason: reason, PromptTokens: r.PromptTokens, Prefill: r.Prefill, Decode: r.Decode}
}

// Errors of Submit.
var (
	// ErrQueueFull: SchedOptions.MaxQueue requests are waiting already.
	ErrQueueFull = errors.New("the request queue is full")
	// ErrClosed: the scheduler is draining or closed.
	ErrClosed = errors.New("the scheduler is shutting down")
)

// BudgetError is a request whose sequence state can never fit the
// scheduler's state budget.
type BudgetError struct {
	Positions    int   // prompt + max new tokens
	Need, Budget int64 // bytes
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("a sequence of %d positions needs %d bytes of KV cache and recurrent state, more than the budget of %d bytes", e.Positions, e.Need, e.Budget)
}

// SchedOptions configures a Scheduler.
type SchedOptions struct {
	// MaxBatch is the most sequences stepped together (default 16).
	MaxBatch int
	// MaxQueue is the most requests waiting for admission (default 64;
	// beyond it Submit returns ErrQueueFull).
	MaxQueue int
	// StateBudget bounds the bytes of KV caches and recurrent state that
	// admitted sequences may hold; each reserves what its prompt and
	// MaxTokens can grow to (StateBytes) at admission. 0 = no bound.
	StateBudget int64
	// PrefillChunk is the most prompt tokens of one sequence per step
	// (default 64) and StepRows the most rows of a step (default 256, at
	// least MaxBatch). Results never depend on them.
	PrefillChunk, StepRows int
	// LogprobWorkers is the most rows' logprobs computed at once beside
	// the steps (default GOMAXPROCS/2: each row's sum is split over four
	// goroutines, and the step's own goroutine needs a core when its
	// device waits end; on the H200's 16 cores, 16 clients of the 2-layer
	// slice served 3–14% more tokens a second with 8 than with 16, in four
	// pairs of runs, BENCHMARKS.md). Results never depend on it.
	LogprobWorkers int
}

func (o *SchedOptions) fill() error {
	if o.MaxBatch == 0 {
		o.MaxBatch = 16
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = 64
	}
	if o.PrefillChunk == 0 {
		o.PrefillChunk = 64
	}
	if o.StepRows == 0 {
		o.StepRows = max(256, o.MaxBatch)
	}
	if o.LogprobWorkers == 0 {
		o.LogprobWorkers = max(1, runtime.GOMAXPROCS(0)/2)
	}
	switch {
	case o.MaxBatch < 1:
		return fmt.Errorf("runner: MaxBatch %d, want at least 1", o.MaxBatch)
	case o.MaxQueue < 0:
		return fmt.Errorf("runner: MaxQueue %d, want 0 or more", o.MaxQueue)
	case o.StateBudget < 0:
		return fmt.Errorf("runner: StateBudget %d, want 0 (none) or more", o.StateBudget)
	case o.PrefillChunk < 1:
		return fmt.Errorf("runner: PrefillChunk %d, want at least 1", o.PrefillChunk)
	case o.StepRows < o.MaxBatch:
		return fmt.Errorf("runner: StepRows %d, want at least MaxBatch (%d)", o.StepRows, o.MaxBatch)
	case o.LogprobWorkers < 1:
		return fmt.Errorf("runner: LogprobWorkers %d, want at least 1", o.LogprobWorkers)
	}
	return nil
}

// StateBytes is what a sequence of positions positions holds in the
// backend at most: the KV cache of every full-attention layer as the
// engine grows it (doubling from 256 rows, capped at the model's
// max_position_embeddings) and every DeltaNet layer's conv and recurrent
// state, float32.
func StateBytes(c *hf.Config, positions int) int64 {
	rows := 256
	for rows < positions {
		rows *= 2
	}
	if c.MaxPositions > 0 {
		rows = max(min(rows, c.MaxPositions), positions)
	}
	var n int64
	for _, t := range c.LayerTypes {
		switch t {
		case hf.FullAttention:
			n += 2 * int64(rows) * int64(c.KVHeads*c.HeadDim)
		case hf.LinearAttention:
			n += int64(c.ConvDim()*(c.ConvKernel-1)) + int64(c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	return 4 * n
}

// SchedStats is a snapshot of a scheduler.
type SchedStats struct {
	Queued, Active int
	StateReserved  int64 // bytes reserved by the active sequences
	Steps          int64 // batch steps run
	Rows           int64 // rows (tokens) through those steps
	Generated      int64 // tokens generated
	Finished       int64 // requests finished (any way)
	Cancelled      int64 // requests ended by their context
	// Where the steps' wall time went: StepTime in the engine's batch
	// steps, SyncTime the part of it the host waited for the device queue
	// (Syncs of them), EmitTime in emitting the steps' tokens (sampling,
	// the ledgers; logprobs are computed beside the next steps). The rest
	// of a level's wall time is the loop between steps and idle time.
	StepTime, SyncTime, EmitTime time.Duration
	Syncs                        int64
}

// Scheduler runs requests with continuous batching: one engine.Batch step
// serves every active sequence — a prompt chunk of those being prefilled,
// the last token of those decoding — so that a routed expert is fetched
// and verified once per step for all rows routed to it. Each sequence has
// its own session, ledger and sampler; the engine's per-row arithmetic
// makes every request's tokens, logprobs and ledger bit-identical to the
// same request run alone. A request whose context ends is dropped before
// the next step and its session's memory released.
type Scheduler struct {
	r   *Runner
	opt SchedOptions

	emitRes []emitResult // the loop's, reused each step

	mu       sync.Mutex
	waiting  []*seq
	active   []*seq
	reserved int64
	draining bool
	wake     chan struct{} // cap 1
	quit     chan struct{} // closed by Close
	exited   chan struct{} // closed when the loop returns
	idle     chan struct{} // closed and replaced when nothing is queued or active

	steps, rows, generated, finished, cancelled atomic.Int64
	emitNanos                                   atomic.Int64
	logprobSem                                  chan struct{} // cap LogprobWorkers
	batch                                       *engine.Batch // the loop's steps (and Stats' times)

	// The loop goroutine's buffers, reused step by step so that a decode
	// step allocates nothing here.
	activeBuf, inBuf []*seq
	sessBuf          []*engine.Session
	toksBuf          [][]int

	// stepMu guards the step's context and the sequences in the step:
	// checkStep, run on any request's context ending (and by Close),
	// cancels the step once every request in it has ended or the scheduler
	// closes. The context is reused until it is cancelled.
	stepMu     sync.Mutex
	stepping   []*seq // nil between steps
	stepCtx    context.Context
	stepCancel context.CancelFunc
	checkFn    func() // s.checkStep, made once
}

// seq is one request in the scheduler.
type seq struct {
	ctx    context.Context
	req    Request
	st     *Stream
	need   int64
	sess   *engine.Session
	l      *ledger.Ledger
	dec    *engine.Decoder // the generation loop's state: prompt fed, sampler, tokens
	submit time.Time
	admit  time.Time
	first  time.Time
	queued time.Duration
	// step bookkeeping
	n        int
	stopWait func() bool
	// The logprobs of a request that asks for them are computed beside
	// the steps that follow (emitTail): tail is closed when the last
	// token handed to it is pushed, and tail0 when the one before it is
	// (nil: none pending). lg are their copies of the logits, reused.
	tail, tail0 chan struct{}
	lg          [2][]float32
}

// NewScheduler starts a scheduler over r's model. With a routing trace
// (Options.Trace) it steps one sequence at a time, so that the trace's
// sessions stay consecutive. Close stops it.
func NewScheduler(r *Runner, opt SchedOptions) (*Scheduler, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	if r.trace != nil {
		opt.MaxBatch = 1
	}
	b, err := r.Engine.NewBatch()
	if err != nil {
		return nil, err
	}
	s := &Scheduler{r: r, opt: opt, wake: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{}),
		idle: make(chan struct{})}
	s.checkFn = s.checkStep
	s.batch = b
	s.logprobSem = make(chan struct{}, opt.LogprobWorkers)
	go s.loop()
	return s, nil
}

// Options returns the scheduler's options, defaults filled in.
func (s *Scheduler) Options() SchedOptions { return s.opt }

// Stats returns a snapshot of the scheduler's counters.
func (s *Scheduler) Stats() SchedStats {
	s.mu.Lock()
	st := SchedStats{Queued: len(s.waiting), Active: len(s.active), StateReserved: s.reserved}
	s.mu.Unlock()
	st.Steps, st.Rows, st.Generated = s.steps.Load(), s.rows.Load(), s.generated.Load()
	st.Finished, st.Cancelled = s.finished.Load(), s.cancelled.Load()
	bt := s.batch.Times()
	st.StepTime, st.SyncTime, st.Syncs = bt.Step, bt.Sync, bt.Syncs
	st.EmitTime = time.Duration(s.emitNanos.Load())
	return st
}

// Check validates req against the model without submitting it: the
// prompt's ids, the context limit, the sampling options, the state budget.
func (s *Scheduler) Check(req *Request) error {
	r := s.r
	switch {
	case len(req.Prompt) == 0:
		return errors.New("the prompt is empty")
	case req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("top_logprobs %d: want 0 to %d", req.TopLogprobs, MaxTopLogprobs)
	case req.Gen.MaxTokens <= 0:
		return fmt.Errorf("max_tokens %d: want at least 1", req.Gen.MaxTokens)
	}
	for i, id := range req.Prompt {
		if id < 0 || id >= r.Config.Vocab {
			return fmt.Errorf("prompt token %d is id %d, outside the vocabulary of %d", i, id, r.Config.Vocab)
		}
	}
	if n := r.MaxNewTokens(len(req.Prompt)); req.Gen.MaxTokens > n {
		return fmt.Errorf("%d prompt tokens and max_tokens %d do not fit the model's context of %d positions (at most %d new tokens do)",
			len(req.Prompt), req.Gen.MaxTokens, r.ContextLimit(), n)
	}
	if _, err := engine.NewSampler(req.Gen); err != nil {
		return err
	}
	if b := s.opt.StateBudget; b > 0 {
		pos := len(req.Prompt) + req.Gen.MaxTokens
		if need := StateBytes(r.Config, pos); need > b {
			return &BudgetError{Positions: pos, Need: need, Budget: b}
		}
	}
	return nil
}

// Submit queues req. It returns an error at once for a request that can
// never run (Check), when MaxQueue requests wait already (ErrQueueFull) or
// while the scheduler drains (ErrClosed). The request ends when ctx does:
// it is dropped before the next step and its memory released.
func (s *Scheduler) Submit(ctx context.Context, req Request) (*Stream, error) {
	if err := s.Check(&req); err != nil {
		return nil, err
	}
	req.Prompt = slices.Clone(req.Prompt)
	q := &seq{ctx: ctx, req: req, st: newStream(), submit: time.Now(),
		need: StateBytes(s.r.Config, len(req.Prompt)+req.Gen.MaxTokens)}
	s.mu.Lock()
	switch {
	case s.draining:
		s.mu.Unlock()
		return nil, ErrClosed
	case len(s.waiting) >= s.opt.MaxQueue:
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	s.waiting = append(s.waiting, q)
	s.mu.Unlock()
	s.poke()
	return q.st, nil
}

// canAdmit reports whether q fits beside the active sequences (s.mu held).
func (s *Scheduler) canAdmit(q *seq) bool {
	return len(s.active) < s.opt.MaxBatch && (s.opt.StateBudget == 0 || s.reserved+q.need <= s.opt.StateBudget)
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Drain stops admitting new requests (Submit returns ErrClosed) and waits
// until the queued and active ones have finished or ctx is done.
func (s *Scheduler) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n, idle := len(s.waiting)+len(s.active), s.idle
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			return nil
		}
	}
}

// Close ends every request still queued or active with ErrClosed, waits
// for the loop to stop and releases the batch.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	s.draining = true
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	s.mu.Unlock()
	s.checkStep() // the step in flight stops between layers
	<-s.exited
	return nil
}

func (s *Scheduler) loop() {
	b := s.batch
	defer close(s.exited)
	defer b.Close()
	var step []*seq
	for {
		select {
		case <-s.quit:
			s.mu.Lock()
			all := append(s.waiting, s.active...)
			s.waiting, s.active = nil, nil
			s.mu.Unlock()
			for _, q := range all {
				s.end(q, ErrClosed)
			}
			s.setIdle()
			return
		default:
		}
		s.mu.Lock()
		// Requests whose context ended leave the queue at once.
		s.waiting = slices.DeleteFunc(s.waiting, func(q *seq) bool {
			if err := q.ctx.Err(); err != nil {
				s.end(q, err) // no session yet: end takes no lock
				return true
			}
			return false
		})
		for len(s.waiting) > 0 && s.canAdmit(s.waiting[0]) {
			q := s.waiting[0]
			s.waiting = s.waiting[1:]
			s.reserved += q.need
			s.active = append(s.active, q)
			s.start(q)
		}
		s.activeBuf = append(s.activeBuf[:0], s.active...)
		active := s.activeBuf
		if len(active) == 0 {
			s.mu.Unlock()
			s.setIdle()
			select {
			case <-s.wake:
			case <-s.quit:
			}
			continue
		}
		s.mu.Unlock()
		step = step[:0]
		for _, q := range active {
			if err := q.ctx.Err(); err != nil {
				s.drop(q, err)
				continue
			}
			step = append(step, q)
		}
		if len(step) > 0 {
			s.run(b, step)
		}
		clear(active)
		clear(step)
	}
}

// setIdle wakes Drain when nothing is queued or active.
func (s *Scheduler) setIdle() {
	s.mu.Lock()
	if len(s.waiting)+len(s.active) == 0 {
		close(s.idle)
		s.idle = make(chan struct{})
	}
	s.mu.Unlock()
}

// start prepares an admitted sequence (s.mu held).
func (s *Scheduler) start(q *seq) {
	q.admit = time.Now()
	q.queued = q.admit.Sub(q.submit)
	q.sess, q.l = s.r.NewSession()
	q.dec, _ = engine.NewDecoder(q.sess, q.req.Prompt, q.req.Gen) // checked by Submit
	q.sess.SetSoftmaxNorm(q.req.Logprobs)
	q.stopWait = context.AfterFunc(q.ctx, s.checkFn)
}

// drop removes an active sequence and ends it with err.
func (s *Scheduler) drop(q *seq, err error) {
	s.mu.Lock()
	if i := slices.Index(s.active, q); i >= 0 {
		s.active = slices.Delete(s.active, i, i+1)
		s.reserved -= q.need
	}
	s.mu.Unlock()
	s.end(q, err)
}

// end finishes q's stream with err (nil: a normal end) and releases its
// session.
func (s *Scheduler) end(q *seq, err error) {
	if q.stopWait != nil {
		q.stopWait()
		q.stopWait = nil
	}
	q.waitTail() // every token is pushed before the stream ends
	res := Result{Tokens: q.tokens(), PromptTokens: len(q.req.Prompt), Gen: q.req.Gen, Queued: q.queued}
	if q.sess != nil {
		now := time.Now()
		if q.first.IsZero() {
			res.Prefill = now.Sub(q.admit)
		} else {
			res.Prefill, res.Decode = q.first.Sub(q.admit), now.Sub(q.first)
		}
		q.l.Time("prefill", res.Prefill)
		q.l.Time("decode", res.Decode)
		res.Ledger = q.l.Summary()
		s.r.endSession(q.sess)
		q.sess = nil
	} else {
		res.Queued = time.Since(q.submit)
	}
	if err == nil {
		res.StopReason = q.reason()
	} else if q.ctx.Err() != nil {
		s.cancelled.Add(1)
	}
	s.finished.Add(1)
	q.st.finish(res, err)
}

// tokens are q's generated ids (none before admission).
func (q *seq) tokens() []int {
	if q.dec == nil {
		return nil
	}
	return q.dec.Tokens()
}

func (q *seq) reason() string {
	if q.dec == nil {
		return StopSequence
	}
	if r := q.dec.StopReason(); r != "" {
		return r
	}
	return StopSequence
}

// run does one batch step for the sequences of step.
func (s *Scheduler) run(b *engine.Batch, step []*seq) {
	sess, toks, in := s.sessBuf[:0], s.toksBuf[:0], s.inBuf[:0]
	defer func() { // keep the buffers, not what they point to
		clear(sess)
		clear(toks)
		clear(in)
		s.sessBuf, s.toksBuf, s.inBuf = sess, toks, in
	}()
	rows := 0
	// Decoding sequences first: each needs one row; prefills share the rest.
	for _, q := range step {
		if !q.dec.Prefilling() {
			q.n = 1
			sess, toks, in = append(sess, q.sess), append(toks, q.dec.Input(1)), append(in, q)
			rows++
		}
	}
	for _, q := range step {
		if q.dec.Prefilling() {
			if s.opt.StepRows-rows <= 0 {
				continue
			}
			t := q.dec.Input(min(s.opt.PrefillChunk, s.opt.StepRows-rows))
			q.n = len(t)
			sess, toks, in = append(sess, q.sess), append(toks, t), append(in, q)
			rows += q.n
		}
	}
	// The step stops between layers once every request in it has ended
	// (checkStep, called when a request's context ends and by Close); one
	// that ended alone is dropped before the next step. The step's context
	// is reused until it is cancelled.
	s.stepMu.Lock()
	if s.stepCtx == nil || s.stepCtx.Err() != nil {
		s.stepCtx, s.stepCancel = context.WithCancel(context.Background())
	}
	ctx := s.stepCtx
	s.stepping = in
	s.stepMu.Unlock()
	s.checkStep() // a request that ended since the loop looked, or Close
	// The logits live in b until its next step: emit is done with them
	// (Ledger.Step and KeepLogits copy).
	lg, err := b.StepReuse(ctx, sess, toks)
	s.stepMu.Lock()
	s.stepping = nil
	s.stepMu.Unlock()
	if err != nil {
		for _, q := range in {
			if cerr := q.ctx.Err(); cerr != nil {
				err = cerr
			}
			s.drop(q, err)
		}
		return
	}
	s.steps.Add(1)
	s.rows.Add(int64(rows))
	t0 := time.Now()
	s.emitAll(in, lg, b.Norms(), b.Argmaxes())
	s.emitNanos.Add(int64(time.Since(t0)))
}

// emitAll emits the next token of every request in the step whose prompt
// is fed, then drops those that ended, in row order. The rows' host work
// (sampling, the ledger's logits hash) is independent per request, so it
// runs on up to GOMAXPROCS goroutines: each request's tokens, logprobs and
// ledger are the same bits as when emitted alone, only sooner. Logprobs
// (a log-softmax: 2.5 ms of CPU a row at a 248k vocabulary) are computed
// beside the next steps (emitTail).
func (s *Scheduler) emitAll(in []*seq, lg [][]float32, norms []float32, amax []int32) {
	if cap(s.emitRes) < len(in) {
		s.emitRes = make([]emitResult, len(in))
	}
	res := s.emitRes[:len(in)]
	for i, q := range in {
		res[i] = emitResult{fed: q.dec.Fed(q.n)}
	}
	var n int
	for _, r := range res {
		if r.fed {
			n++
		}
	}
	if workers := min(n, runtime.GOMAXPROCS(0)); workers <= 1 {
		for i, q := range in {
			if res[i].fed {
				res[i].done, res[i].err = s.emit(q, lg[i], norm(norms, i), amax, i)
			}
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(in) {
						return
					}
					if res[i].fed {
						res[i].done, res[i].err = s.emit(in[i], lg[i], norm(norms, i), amax, i)
					}
				}
			}()
		}
		wg.Wait()
	}
	for i, q := range in {
		if r := res[i]; r.fed && (r.err != nil || r.done) {
			s.drop(q, r.err)
		}
	}
}

// emitResult is one request's outcome of a step's emit.
type emitResult struct {
	done, fed bool
	err       error
}

// norm is row i's softmax normaliser of a step's norms (nil if none).
func norm(norms []float32, i int) []float32 {
	if norms == nil {
		return nil
	}
	return norms[2*i : 2*i+2]
}

// emit picks q's next token from logits, row i of the step (amax: the
// step's Batch.Argmaxes), and hands it to the stream; done when the
// request has ended.
func (s *Scheduler) emit(q *seq, logits, nm []float32, amax []int32, i int) (done bool, err error) {
	tok, done, err := q.dec.EmitRow(logits, amax, i) // the ledger records the step
	if err != nil {
		return true, err
	}
	if q.first.IsZero() {
		q.first = time.Now()
	}
	t := Token{ID: tok}
	if q.req.KeepLogits {
		t.Logits = slices.Clone(logits)
	}
	s.generated.Add(1)
	switch {
	case q.req.Logprobs && nm != nil && q.tailIdle():
		// The device summed the exponentials: what is left is a
		// subtraction and, for top logprobs, one pass for the largest.
		t.Logprob, t.Top = LogprobsNorm(logits, nm[0], nm[1], t.ID, q.req.TopLogprobs)
		q.st.push(t)
	case q.req.Logprobs:
		s.emitTail(q, t, logits)
	default:
		q.st.push(t)
	}
	if done {
		return true, nil
	}
	return q.req.StopAfter != nil && q.req.StopAfter(q.dec.Tokens()), nil
}

// emitTail pushes t once its logprobs under logits are computed, on a
// goroutine of its own, so that the next step does not wait for them: a
// log-softmax over the vocabulary is 2.5 ms of CPU a row at 248k tokens
// (split over four goroutines: expSum), about a one-row step of the
// 2-layer slice on the H200. Its tokens are pushed in order (each waits
// for the one before), with the same values as computed in place
// (Logprobs of a copy of the same logits), and at most two a request are
// pending: the third waits here for the first, so a request whose
// logprobs fall behind holds its steps back rather than queue without
// bound.
func (s *Scheduler) emitTail(q *seq, t Token, logits []float32) {
	if q.tail0 != nil {
		<-q.tail0
	}
	// The buffer of the token two back is free now (its tail is done).
	lg := q.lg[0]
	if cap(lg) < len(logits) {
		lg = make([]float32, len(logits))
	}
	lg = lg[:len(logits)]
	copy(lg, logits)
	q.lg[0], q.lg[1] = q.lg[1], lg
	prev, done := q.tail, make(chan struct{})
	q.tail0, q.tail = prev, done
	top := q.req.TopLogprobs
	go func() {
		defer close(done)
		s.logprobSem <- struct{}{}
		if logprobsHook != nil {
			logprobsHook(t.ID)
		}
		t.Logprob, t.Top = Logprobs(lg, t.ID, top)
		<-s.logprobSem
		if prev != nil {
			<-prev
		}
		q.st.push(t)
	}()
}

// tailIdle reports whether every token handed to emitTail for q is
// pushed, without waiting.
func (q *seq) tailIdle() bool {
	if q.tail == nil {
		return true
	}
	select {
	case <-q.tail:
		q.tail, q.tail0 = nil, nil
		return true
	default:
		return false
	}
}

// waitTail waits until every token handed to emitTail for q is pushed.
func (q *seq) waitTail() {
	if q.tail != nil {
		<-q.tail
		q.tail, q.tail0 = nil, nil
	}
}

// logprobsHook, when set (tests), is called by emitTail's goroutine within
// the LogprobWorkers bound, before it computes a token's logprobs (and so
// before the token is pushed).
var logprobsHook func(tok int)

// checkStep cancels the step in flight once every request in it has ended
// or the scheduler is closing.
func (s *Scheduler) checkStep() {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	if s.stepping == nil {
		return
	}
	select {
	case <-s.quit:
	default:
		for _, q := range s.stepping {
			if q.ctx.Err() == nil {
				return
			}
		}
	}
	s.stepCancel()
}

// Logprobs returns the log-probability of token tok under logits (a
// log-softmax of the raw logits, before any temperature) and the top most
// likely tokens, ordered by logit, descending, ties to the lower id. The
// arithmetic is canonical: m = max logit, S = canon.Sum(canon.Exp(ℓᵢ − m)),
// log p = (ℓ − m) − canon.Log(S), so the values are the same bits on every
// machine.
func Logprobs(logits []float32, tok, top int) (float32, []TokenLogprob) {
	m := canon.Max(logits)
	return LogprobsNorm(logits, m, expSum(logits, m), tok, top)
}

// LogprobsNorm is Logprobs given the row's max m and ExpSum s (a backend's
// Normaliser): the same values, with no pass over the logits when top is 0.
func LogprobsNorm(logits []float32, m, s float32, tok, top int) (float32, []TokenLogprob) {
	ls := canon.Log(s)
	lp := func(i int) float32 { return (logits[i] - m) - ls }
	if top == 0 {
		return lp(tok), nil
	}
	best := make([]int, 0, top+1)
	for i, l := range logits {
		if len(best) == top && !(l > logits[best[top-1]]) {
			continue
		}
		j := len(best)
		if j < top {
			best = append(best, i)
		} else {
			j = top - 1
		}
		for j > 0 && logits[best[j-1]] < l {
			best[j] = best[j-1]
			j--
		}
		best[j] = i
	}
	out := make([]TokenLogprob, len(best))
	for i, id := range best {
		out[i] = TokenLogprob{ID: id, Logprob: lp(id)}
	}
	return lp(tok), out
}

// expSum is canon.ExpSum, a row of at least expSplit logits split by lanes
// over expParts goroutines (a vocabulary of 248k takes 2.5 ms on one core);
// each lane is still one goroutine's, so the bits are the same.
func expSum(x []float32, m float32) float32 {
	var acc [canon.Lanes]float32
	parts := 1
	if len(x) >= expSplit {
		parts = min(expParts, runtime.GOMAXPROCS(0))
	}
	if parts <= 1 {
		canon.ExpSumLanes(x, m, acc[:], 0)
		return canon.Combine(&acc)
	}
	per := canon.Lanes / parts
	var wg sync.WaitGroup
	for p := range parts {
		l0, l1 := p*per, (p+1)*per
		if p == parts-1 {
			l1 = canon.Lanes
		}
		wg.Go(func() { canon.ExpSumLanes(x, m, acc[l0:l1], l0) })
	}
	wg.Wait()
	return canon.Combine(&acc)
}

const (
	expSplit = 1 << 15
	expParts = 4
)

// Stream is a submitted request's tokens as they are generated. Tokens
// are kept until read, so a slow reader never holds the scheduler up; they
// are bounded by the request's MaxTokens.
type Stream struct {
	mu     sync.Mutex
	toks   []Token
	spare  []Token // the slice Next returned last, reused by the one after
	done   bool
	res    Result
	err    error
	notify chan struct{} // cap 1
}

func newStream() *Stream { return &Stream{notify: make(chan struct{}, 1)} }

func (st *Stream) push(t Token) {
	st.mu.Lock()
	st.toks = append(st.toks, t)
	st.mu.Unlock()
	st.signal()
}

func (st *Stream) finish(res Result, err error) {
	st.mu.Lock()
	st.done, st.res, st.err = true, res, err
	st.mu.Unlock()
	st.signal()
}

func (st *Stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// Next returns the tokens generated since the last call, waiting until
// there is at least one or the request has ended (done true: no more
// tokens will come; see Result) or ctx is done (its error). The
// slice is valid until the next call of Next (the Tokens themselves stay
// valid).
func (st *Stream) Next(ctx context.Context) (toks []Token, done bool, err error) {
	for {
		st.mu.Lock()
		if len(st.toks) > 0 {
			// Two slices take turns, so that pushing a token allocates
			// nothing in steady state.
			toks, st.toks, st.spare = st.toks, st.spare[:0], st.toks
		}
		done = st.done
		st.mu.Unlock()
		if len(toks) > 0 || done {
			return toks, done && len(toks) == 0, nil
		}
		select {
		case <-st.notify:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Result waits for the request to end and returns what it produced and
// why it ended: nil for a normal end (Result.StopReason), the context's
// error for a cancelled request, ErrClosed, or the engine's error. The
// result holds the tokens generated before an error.
func (st *Stream) Result(ctx context.Context) (Result, error) {
	for {
		st.mu.Lock()
		done, res, err := st.done, st.res, st.err
		st.mu.Unlock()
		if done {
			return res, err
		}
		select {
		case <-st.notify:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
}
