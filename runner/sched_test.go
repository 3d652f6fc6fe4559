package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/engine"
)

// soloRun is a reference generation in a fresh session, by a loop of its
// own over Session.Forward and engine.Sampler (not engine.Decoder, which the
// scheduler and engine.Generate share): what a request must produce
// whatever else runs with it.
type soloRun struct {
	tokens        []int
	logprobs      []float32
	top           [][]TokenLogprob
	chain, routed string
}

// doAll sends reqs to s at once and returns each one's result, the tokens
// it streamed and its error.
func doAll(s *Scheduler, reqs []Request) ([]Result, [][]Token, []error) {
	res, toks, errs := make([]Result, len(reqs)), make([][]Token, len(reqs)), make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			res[i], errs[i] = Do(context.Background(), s, reqs[i], func(tk Token) error {
				toks[i] = append(toks[i], tk)
				return nil
			})
		})
	}
	wg.Wait()
	return res, toks, errs
}

func solo(t *testing.T, r *Runner, req Request) soloRun {
	t.Helper()
	sess, l := r.NewSession()
	defer sess.Close()
	smp, err := engine.NewSampler(req.Gen)
	if err != nil {
		t.Fatal(err)
	}
	var out soloRun
	l.Prompt(req.Prompt)
	lg, err := sess.Forward(req.Prompt, false)
	for err == nil {
		logits := lg[0]
		var tok int
		if tok, err = smp.Pick(logits); err != nil {
			break
		}
		out.tokens = append(out.tokens, tok)
		l.Step(logits, tok)
		lp, top := Logprobs(logits, tok, req.TopLogprobs)
		out.logprobs = append(out.logprobs, lp)
		out.top = append(out.top, top)
		if slices.Contains(req.Gen.Stop, tok) || len(out.tokens) >= req.Gen.MaxTokens {
			break
		}
		lg, err = sess.Forward([]int{tok}, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := l.Summary()
	out.chain, out.routed = s.LogitsChain, s.RoutingDigest
	return out
}

// testRequests are n requests of different prompt lengths (some longer
// than the prefill chunk), greedy and sampled.
func testRequests(n int) []Request {
	var reqs []Request
	for i := range n {
		p := make([]int, 3+7*i%23)
		for j := range p {
			p[j] = (17*i + 31*j + 5) % 200
		}
		g := engine.GenOptions{MaxTokens: 6 + i%5}
		if i%2 == 1 {
			g.Temperature, g.TopP, g.TopK, g.Seed = 0.9, 0.95, 40, uint64(100+i)
		}
		reqs = append(reqs, Request{Prompt: p, Gen: g, Logprobs: true, TopLogprobs: i % 4})
	}
	return reqs
}

// TestSchedulerBatchedMatchesSolo runs N requests at once through one
// scheduler (prefills in chunks of 4 beside other sequences' decodes) and
// checks every request's tokens, logprobs, top logprobs, logits chain and
// routing digest against the same request run alone.
func TestSchedulerBatchedMatchesSolo(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reqs := testRequests(8)
	want := make([]soloRun, len(reqs))
	for i, q := range reqs {
		want[i] = solo(t, r, q)
	}
	for _, n := range []int{2, 4, 8} {
		s, err := NewScheduler(r, SchedOptions{MaxBatch: n, PrefillChunk: 4})
		if err != nil {
			t.Fatal(err)
		}
		got, lps, errs := doAll(s, reqs[:n])
		st := s.Stats()
		s.Close()
		if st.Steps == 0 || st.Rows <= st.Steps {
			t.Errorf("N=%d: %d steps of %d rows: the requests were not batched", n, st.Steps, st.Rows)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("N=%d request %d: %v", n, i, errs[i])
			}
			w, g := want[i], got[i]
			if !slices.Equal(g.Tokens, w.tokens) {
				t.Errorf("N=%d request %d: tokens %v, alone %v", n, i, g.Tokens, w.tokens)
			}
			if g.Ledger.LogitsChain != w.chain || g.Ledger.RoutingDigest != w.routed {
				t.Errorf("N=%d request %d: logits chain %s routing %s, alone %s %s", n, i, g.Ledger.LogitsChain, g.Ledger.RoutingDigest, w.chain, w.routed)
			}
			if len(lps[i]) != len(w.tokens) {
				t.Errorf("N=%d request %d: %d tokens streamed, alone %d", n, i, len(lps[i]), len(w.tokens))
			}
			for j, tk := range lps[i] {
				if j < len(w.tokens) && tk.ID != w.tokens[j] {
					t.Errorf("N=%d request %d token %d: streamed %d, alone %d (out of order)", n, i, j, tk.ID, w.tokens[j])
				}
				if math.Float32bits(tk.Logprob) != math.Float32bits(w.logprobs[j]) || !slices.Equal(tk.Top, w.top[j]) {
					t.Errorf("N=%d request %d token %d: logprob %v top %v, alone %v %v", n, i, j, tk.Logprob, tk.Top, w.logprobs[j], w.top[j])
				}
			}
		}
	}
}

// TestSchedulerCancel ends one request of two mid-generation: it returns
// its context's error, its session and reservation are released, and the
// other request is unaffected.
func TestSchedulerCancel(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := NewScheduler(r, SchedOptions{MaxBatch: 4, StateBudget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reqs := testRequests(2)
	reqs[0].Gen.MaxTokens = 200
	want := solo(t, r, reqs[1])
	ctx, cancel := context.WithCancel(context.Background())
	var res0 Result
	var err0 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res0, err0 = Do(ctx, s, reqs[0], func(tk Token) error {
			if tk.ID >= 0 {
				cancel()
			}
			return nil
		})
	}()
	res1, err1 := Do(context.Background(), s, reqs[1], nil)
	<-done
	if !errors.Is(err0, context.Canceled) || len(res0.Tokens) >= 200 {
		t.Errorf("cancelled request: %v after %d tokens", err0, len(res0.Tokens))
	}
	if err1 != nil || !slices.Equal(res1.Tokens, want.tokens) || res1.Ledger.LogitsChain != want.chain {
		t.Errorf("the other request: %v %v, alone %v", err1, res1.Tokens, want.tokens)
	}
	st := s.Stats()
	if st.Active != 0 || st.Queued != 0 || st.StateReserved != 0 || st.Cancelled != 1 {
		t.Errorf("after both ended: %+v", st)
	}
}

// TestSchedulerLimits checks the queue limit, the state budget and
// draining.
func TestSchedulerLimits(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	one := StateBytes(r.Config, 64)
	s, err := NewScheduler(r, SchedOptions{MaxBatch: 4, MaxQueue: 1, StateBudget: one})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := Request{Prompt: make([]int, 300), Gen: engine.GenOptions{MaxTokens: 10}}
	var be *BudgetError
	if _, err := s.Submit(context.Background(), long); !errors.As(err, &be) || be.Need <= one || be.Budget != one {
		t.Fatalf("a request over the state budget: %v", err)
	}
	// The budget holds one sequence: the first is admitted, the second
	// waits, a third finds the queue full.
	block := make(chan struct{})
	first := Request{Prompt: []int{1, 2, 3}, Gen: engine.GenOptions{MaxTokens: 40}, StopAfter: func([]int) bool { <-block; return false }}
	st1, err := s.Submit(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Active == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first request was never admitted")
		}
		time.Sleep(time.Millisecond)
	}
	st2, err := s.Submit(context.Background(), Request{Prompt: []int{4, 5}, Gen: engine.GenOptions{MaxTokens: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), Request{Prompt: []int{6}, Gen: engine.GenOptions{MaxTokens: 3}}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third request with one waiting and MaxQueue 1: %v, want ErrQueueFull", err)
	}
	if st := s.Stats(); st.Active != 1 || st.Queued != 1 || st.StateReserved != StateBytes(r.Config, 43) {
		t.Errorf("one admitted, one waiting: %+v", st)
	}
	close(block)
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background()) }()
	for _, st := range []*Stream{st1, st2} {
		if res, err := st.Result(context.Background()); err != nil || len(res.Tokens) == 0 {
			t.Errorf("queued request: %v %v", res.Tokens, err)
		}
	}
	if err := <-drained; err != nil {
		t.Error(err)
	}
	if _, err := s.Submit(context.Background(), first); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after Drain: %v, want ErrClosed", err)
	}
}

// TestSchedulerBudgetAdmission: sequences are admitted only while their
// state fits the budget — with room for one, three requests submitted
// together run one at a time; with room for three, together.
func TestSchedulerBudgetAdmission(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct{ room, wantMax int }{{1, 1}, {3, 3}} {
		s, err := NewScheduler(r, SchedOptions{MaxBatch: 4, StateBudget: int64(c.room) * StateBytes(r.Config, 64)})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		most := 0
		var streams []*Stream
		// Submitted before the loop can admit any: the scheduler is busy
		// with a request that holds it until all three are queued.
		hold := make(chan struct{})
		st0, err := s.Submit(context.Background(), Request{Prompt: []int{9}, Gen: engine.GenOptions{MaxTokens: 2},
			StopAfter: func([]int) bool { <-hold; return false }})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); s.Stats().Active == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("never admitted")
			}
		}
		for i := range 3 {
			st, err := s.Submit(context.Background(), Request{Prompt: []int{1 + i, 2, 3}, Gen: engine.GenOptions{MaxTokens: 8},
				StopAfter: func([]int) bool {
					n := s.Stats().Active
					mu.Lock()
					most = max(most, n)
					mu.Unlock()
					return false
				}})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, st)
		}
		close(hold)
		for _, st := range append(streams, st0) {
			if _, err := st.Result(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		if most != c.wantMax {
			t.Errorf("room for %d sequences: up to %d active at once, want %d", c.room, most, c.wantMax)
		}
	}
}

// TestLogprobs checks the canonical log-softmax against float64 and the
// order of the top list (by logit, ties to the lower id).
func TestLogprobs(t *testing.T) {
	logits := []float32{1, 3, -2, 3, 0.5, 7, -1e30}
	lp, top := Logprobs(logits, 2, 4)
	var s float64
	for _, l := range logits {
		s += math.Exp(float64(l) - 7)
	}
	ref := func(i int) float64 { return float64(logits[i]) - 7 - math.Log(s) }
	if math.Abs(float64(lp)-ref(2)) > 1e-5 {
		t.Errorf("logprob of token 2: %v, float64 %v", lp, ref(2))
	}
	ids := []int{}
	for _, tl := range top {
		ids = append(ids, tl.ID)
		if math.Abs(float64(tl.Logprob)-ref(tl.ID)) > 1e-5 {
			t.Errorf("token %d: %v, float64 %v", tl.ID, tl.Logprob, ref(tl.ID))
		}
	}
	if fmt.Sprint(ids) != "[5 1 3 0]" {
		t.Errorf("top 4 ids %v, want [5 1 3 0]", ids)
	}
	if _, top := Logprobs(logits, 0, 0); top != nil {
		t.Errorf("top 0: %v", top)
	}
}

// A request's logprobs are computed beside the steps that follow: with the
// first token's held (logprobsHook), the scheduler makes two more steps,
// no more (at most two tokens a request pending), and streams nothing
// until the first is released; then every token comes, in order, with the
// values of the request run alone.
func TestLogprobsBesideTheNextSteps(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := Request{Prompt: []int{5, 9, 200}, Gen: engine.GenOptions{MaxTokens: 8}, Logprobs: true, TopLogprobs: 2}
	want := solo(t, r, req)
	hold := make(chan struct{})
	var first atomic.Bool
	logprobsHook = func(int) {
		if first.CompareAndSwap(false, true) {
			<-hold
		}
	}
	defer func() { logprobsHook = nil }()
	s, err := NewScheduler(r, SchedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var toks []Token
	done := make(chan error, 1)
	go func() {
		_, err := Do(context.Background(), s, req, func(tk Token) error {
			mu.Lock()
			toks = append(toks, tk)
			mu.Unlock()
			return nil
		})
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Steps < 3 {
		if time.Now().After(deadline) {
			close(hold)
			t.Fatalf("%d steps while the first token's logprobs are held, want 3: the step waits for them", s.Stats().Steps)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	streamed := len(toks)
	mu.Unlock()
	if n := s.Stats().Steps; n != 3 || streamed != 0 {
		t.Errorf("held: %d steps, %d tokens streamed; want 3 steps (two tokens pending at most) and none streamed", n, streamed)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(toks) != len(want.tokens) {
		t.Fatalf("%d tokens streamed, alone %d", len(toks), len(want.tokens))
	}
	for j, tk := range toks {
		if tk.ID != want.tokens[j] || math.Float32bits(tk.Logprob) != math.Float32bits(want.logprobs[j]) || !slices.Equal(tk.Top, want.top[j]) {
			t.Errorf("token %d: %d logprob %v top %v, alone %d %v %v", j, tk.ID, tk.Logprob, tk.Top, want.tokens[j], want.logprobs[j], want.top[j])
		}
	}
}

// TestExpSumIsCanonSum: Logprobs' fused, lane-split sum of exponentials is
// canon.Sum of the stored terms, bit for bit, at lengths around a chunk,
// a round of lanes and the split, with ±Inf, a NaN, ±0 and subnormals
// among the logits.
func TestExpSumIsCanonSum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 248320)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 8)
	}
	special := []float32{float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 80, -200}
	for i, v := range special {
		x[1000+37*i] = v
	}
	for _, n := range []int{1, 7, 8, 9, 255, 256, 257, 1000, expSplit - 1, expSplit, expSplit + 9, 100003, len(x)} {
		for _, m := range []float32{0, 3.5, x[0]} {
			e := make([]float32, n)
			for i, l := range x[:n] {
				e[i] = canon.Exp(l - m)
			}
			if got, want := expSum(x[:n], m), canon.Sum(e); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%d logits, m %v: %v (%#x), canon.Sum %v (%#x)", n, m, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
	x[5] = float32(math.NaN())
	if s := expSum(x, 0); s == s {
		t.Errorf("a NaN logit: sum %v, want NaN", s)
	}
}

// SchedOptions.LogprobWorkers bounds the rows' logprobs computed at once
// beside the steps, and the values stay those of the request alone.
func TestLogprobWorkersBound(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := NewScheduler(r, SchedOptions{LogprobWorkers: -1}); err == nil {
		t.Error("LogprobWorkers -1 accepted")
	}
	reqs := make([]Request, 4)
	want := make([]soloRun, len(reqs))
	for i := range reqs {
		reqs[i] = Request{Prompt: []int{3 + i, 40, 7}, Gen: engine.GenOptions{MaxTokens: 4}, Logprobs: true, TopLogprobs: 1}
		want[i] = solo(t, r, reqs[i])
	}
	for _, workers := range []int{1, 2} {
		var in, most atomic.Int32
		logprobsHook = func(int) {
			n := in.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(2 * time.Millisecond) // long enough for the rows of a step to meet
			in.Add(-1)
		}
		s, err := NewScheduler(r, SchedOptions{MaxBatch: len(reqs), LogprobWorkers: workers})
		if err != nil {
			t.Fatal(err)
		}
		_, toks, errs := doAll(s, reqs)
		for i, err := range errs {
			if err != nil {
				t.Errorf("workers %d, request %d: %v", workers, i, err)
			}
		}
		s.Close()
		logprobsHook = nil
		if m := int(most.Load()); m > workers || m < 1 {
			t.Errorf("LogprobWorkers %d: %d rows' logprobs computed at once", workers, m)
		}
		for i := range reqs {
			if len(toks[i]) != len(want[i].tokens) {
				t.Fatalf("workers %d, request %d: %d tokens, alone %d", workers, i, len(toks[i]), len(want[i].tokens))
			}
			for j, tk := range toks[i] {
				if tk.ID != want[i].tokens[j] || tk.Logprob != want[i].logprobs[j] {
					t.Errorf("workers %d, request %d token %d: %d %v, alone %d %v", workers, i, j, tk.ID, tk.Logprob, want[i].tokens[j], want[i].logprobs[j])
				}
			}
		}
	}
}

// On a backend that computes the softmax normaliser where the logits are
// (backend.Normaliser: the fake device here), the scheduler takes the
// rows' logprobs from it, with no sum on the host, and they are the values
// of the request run alone on the CPU, top logprobs included.
func TestLogprobsFromTheDeviceNorms(t *testing.T) {
	dir := defaultModel(t)
	ref, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	reqs := make([]Request, 4)
	want := make([]soloRun, len(reqs))
	for i := range reqs {
		reqs[i] = Request{Prompt: []int{9 + i, 4, 31}, Gen: engine.GenOptions{MaxTokens: 5}, Logprobs: true, TopLogprobs: i % 3}
		want[i] = solo(t, ref, reqs[i])
	}
	for _, dev := range []bool{false, true} {
		o := Options{Threads: 1}
		if dev {
			o.NewBackend = func() (backend.Backend, error) { return backendtest.NewDevice(1, 0), nil }
		}
		r, err := Open(context.Background(), dir, o)
		if err != nil {
			t.Fatal(err)
		}
		var onHost atomic.Int32
		logprobsHook = func(int) { onHost.Add(1) }
		s, err := NewScheduler(r, SchedOptions{MaxBatch: len(reqs)})
		if err != nil {
			t.Fatal(err)
		}
		_, toks, errs := doAll(s, reqs)
		for i, err := range errs {
			if err != nil {
				t.Errorf("device %v, request %d: %v", dev, i, err)
			}
		}
		s.Close()
		r.Close()
		logprobsHook = nil
		if n := onHost.Load(); dev != (n == 0) {
			t.Errorf("device %v: %d rows' exponentials summed on the host", dev, n)
		}
		for i := range reqs {
			if len(toks[i]) != len(want[i].tokens) {
				t.Fatalf("device %v, request %d: %d tokens, alone %d", dev, i, len(toks[i]), len(want[i].tokens))
			}
			for j, tk := range toks[i] {
				if tk.ID != want[i].tokens[j] || math.Float32bits(tk.Logprob) != math.Float32bits(want[i].logprobs[j]) ||
					!slices.Equal(tk.Top, want[i].top[j]) {
					t.Errorf("device %v, request %d token %d: %d %v %v, alone %d %v %v", dev, i, j,
						tk.ID, tk.Logprob, tk.Top, want[i].tokens[j], want[i].logprobs[j], want[i].top[j])
				}
			}
		}
	}
}
