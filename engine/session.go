package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
)

// maxChunk is the number of tokens Forward pushes through the layers at
// once. It bounds scratch memory; results do not depend on it.
var maxChunk = 64

// Session is one sequence: its KV cache, conv and recurrent state (in the
// backend's memory), its queue and scratch buffers. A Session is not safe
// for concurrent use; several Sessions of one Model may run concurrently.
type Session struct {
	m      *Model
	pos    int
	broken error
	// ledger, if set, records this session's routing, expert use and
	// logits chain (SetLedger).
	ledger *ledger.Ledger
	st     *sessionState
	seg    [1]segment
	// resetState: the DeltaNet state must be zeroed before the next step.
	resetState bool
	// norm: its logits' softmax normaliser is wanted (SetSoftmaxNorm).
	norm bool
	// argmax: its logits' argmax is wanted (SetArgmax).
	argmax bool
}

// SetSoftmaxNorm asks that the steps computing this session's logits also
// compute each logits row's softmax normaliser (canon.Max and
// canon.ExpSum) where the logits are, when the backend can
// (backend.Normaliser: a device, whose logits then need no pass on the
// host for their logprobs); Batch.Norms returns them. It changes no logit.
func (s *Session) SetSoftmaxNorm(on bool) { s.norm = on }

// SetArgmax asks that the steps computing this session's logits also find
// each logits row's canon.Argmax where the logits are, when the backend
// can (backend.Argmaxer: a device, whose logits then need no pass on the
// host for a greedy pick); Batch.Argmaxes returns them. It changes no
// logit. A Decoder asks for its session when it samples greedily.
func (s *Session) SetArgmax(on bool) { s.argmax = on }

// sessionState is what a session holds in the backend: its layers' state
// and its own queue and scratch (solo, for Forward; a Batch brings its
// own). It is apart from the Session so that a device backend's memory is
// freed when an unclosed session is collected.
type sessionState struct {
	layers []layerState
	solo   *work
	soloB  *Batch // a Batch over solo, for Generate
}

// sessionSet is a device-backed model's session states not yet freed.
// The model owns them: Model.Close frees every one left (so the caller
// may close the backend after it), and a state freed once — by
// Session.Close, by the cleanup of a session dropped without Close, or by
// Model.Close — is never freed again. So a garbage-collected session's
// cleanup that runs after Model.Close touches no backend: on a device, the
// backend's context may be gone by then.
type sessionSet struct {
	mu     sync.Mutex
	live   map[*sessionState]struct{}
	closed atomic.Bool // Model.Close has run: no new session, no step
}

// add records st; false if the model is closed.
func (ss *sessionSet) add(st *sessionState) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed.Load() {
		return false
	}
	if ss.live == nil {
		ss.live = map[*sessionState]struct{}{}
	}
	ss.live[st] = struct{}{}
	return true
}

// free frees st if the set still holds it. The lock is held while it does,
// so Model.Close returns only after a cleanup running beside it is done.
func (ss *sessionSet) free(st *sessionState, be backend.Backend) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.live[st]; !ok {
		return nil
	}
	delete(ss.live, st)
	return st.free(be)
}

// closeAll frees every state left and refuses new sessions.
func (ss *sessionSet) closeAll(be backend.Backend) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed.Store(true)
	var err error
	for st := range ss.live {
		if ferr := st.free(be); err == nil {
			err = ferr
		}
	}
	clear(ss.live)
	return err
}

// free releases st's backend memory and queue.
func (st *sessionState) free(be backend.Backend) error {
	var err error
	if st.solo != nil {
		err = st.solo.close()
		st.solo = nil
	}
	for i := range st.layers {
		ls := &st.layers[i]
		for _, b := range []backend.Buf{ls.k, ls.v, ls.conv, ls.state} {
			if b.Mem() != nil {
				be.Free(b)
			}
		}
		*ls = layerState{}
	}
	return err
}

type layerState struct {
	// full attention: the KV cache, rows of nkv×hd (kvRows of them
	// allocated, pos in use)
	k, v   backend.Buf
	kvRows int
	// Gated DeltaNet: C×(Kc−1) previous conv inputs, nv×dk×dv recurrent
	// state (fp32)
	conv, state backend.Buf
	last        []int32 // MoE: the experts the last token used (for hints)
}

// NewSession starts an empty sequence. Its state lives in the model's
// backend; Close releases it (for a device backend; the CPU's memory is
// the garbage collector's), and so does Model.Close for every session of
// the model not closed yet.
func (m *Model) NewSession() *Session {
	s := &Session{m: m, st: &sessionState{layers: make([]layerState, len(m.layers))}}
	if m.host != nil {
		// A device backend's memory is not the garbage collector's: free it
		// if the session is dropped without Close — through the model's
		// set, so never after Model.Close.
		be, ss := m.be, &m.sessions
		if ss.add(s.st) {
			runtime.AddCleanup(s, func(st *sessionState) { ss.free(st, be) }, s.st)
		}
	}
	s.Reset()
	return s
}

// SetLedger makes the session record its routing, expert use, tokens and
// logits chain in l (nil: no ledger). Set it before the first Forward; each
// session (request) has its own.
func (s *Session) SetLedger(l *ledger.Ledger) { s.ledger = l }

// Ledger is the session's ledger (nil if none).
func (s *Session) Ledger() *ledger.Ledger { return s.ledger }

// Reset empties the sequence (keeping allocated buffers) and clears an
// earlier error.
func (s *Session) Reset() {
	s.pos, s.broken = 0, nil
	for i := range s.st.layers {
		st := &s.st.layers[i]
		st.last = st.last[:0]
	}
	s.resetState = true
}

// Close releases the session's backend memory and queue. The session must
// not be used afterwards.
func (s *Session) Close() error {
	var err error
	if s.m.host != nil {
		err = s.m.sessions.free(s.st, s.m.be)
	} else {
		err = s.st.free(s.m.be)
	}
	s.broken = errors.New("engine: session closed")
	return err
}

// Len is the number of tokens in the sequence.
func (s *Session) Len() int { return s.pos }

// Forward appends tokens to the sequence and returns float32 logits
// (length vocab) for every new position if all is true, else only for the
// last one. Prefill and decode run the same arithmetic: feeding tokens one
// at a time gives the same bits as one call. After an error the session
// must be Reset.
func (s *Session) Forward(tokens []int, all bool) ([][]float32, error) {
	return s.ForwardContext(context.Background(), tokens, all)
}

// ForwardContext is Forward that stops between layers when ctx is done,
// returning ctx's error; the session must then be Reset (its state holds a
// partial step).
func (s *Session) ForwardContext(ctx context.Context, tokens []int, all bool) ([][]float32, error) {
	return s.forward(ctx, tokens, all, false)
}

// check refuses tokens the session cannot take: an empty list, ids outside
// the vocabulary, a sequence longer than the model supports.
func (s *Session) check(tokens []int) error {
	c := s.m.cfg
	if s.m.sessions.closed.Load() {
		return errors.New("engine: the model is closed")
	}
	if s.broken != nil {
		return fmt.Errorf("engine: session unusable after an earlier error (Reset it): %w", s.broken)
	}
	if len(tokens) == 0 {
		return errors.New("engine: Forward with no tokens")
	}
	for i, t := range tokens {
		if t < 0 || t >= c.Vocab {
			return fmt.Errorf("engine: token %d at index %d is outside the vocabulary [0, %d)", t, i, c.Vocab)
		}
	}
	limit := canon.MaxRopePosition
	if c.MaxPositions > 0 {
		limit = min(limit, c.MaxPositions)
	}
	if s.pos+len(tokens) > limit {
		return fmt.Errorf("engine: sequence of %d tokens would exceed the %d positions the model supports", s.pos+len(tokens), limit)
	}
	return nil
}

// forward is ForwardContext; with reuse the returned logits live in the
// session's buffers and are valid only until its next step (Generate's
// decode loop, which allocates nothing per token).
func (s *Session) forward(ctx context.Context, tokens []int, all, reuse bool) ([][]float32, error) {
	m := s.m
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	if s.st.solo == nil {
		w, err := m.newWork()
		if err != nil {
			return nil, err
		}
		s.st.solo = w
	}
	var out [][]float32
	if all {
		out = make([][]float32, 0, len(tokens))
	}
	for off := 0; off < len(tokens); off += maxChunk {
		chunk := tokens[off:min(off+maxChunk, len(tokens))]
		want := 0
		if all {
			want = len(chunk)
		} else if off+len(chunk) == len(tokens) {
			want = 1
		}
		s.seg[0] = segment{s: s, n: len(chunk), want: want}
		ids := grow(&s.st.solo.ids, len(chunk))
		for i, t := range chunk {
			ids[i] = int32(t)
		}
		lg, err := s.st.solo.step(ctx, s.seg[:], reuse && !all)
		s.seg[0] = segment{}
		if err != nil {
			s.broken = err
			return nil, err
		}
		if out == nil {
			out = lg
		} else {
			out = append(out, lg...)
		}
	}
	m.forwards.Add(1)
	return out, nil
}

// segment is one session's part of a step: its n new tokens (rows
// row0..row0+n−1 of the step, their ids in work.ids) and how many of its
// last positions want logits.
type segment struct {
	s             *Session
	n, want, row0 int
}

// work is a queue and the scratch buffers of the steps run on it: a
// session's own (Forward) or a Batch's.
type work struct {
	m   *Model
	q   backend.Queue
	err error // the first allocation error of the current step
	// syncs and syncNanos count the queue's Syncs and the wall time the
	// host spent in them (Batch.Times).
	syncs, syncNanos atomic.Int64
	// dead are grown-out-of allocations, freed after the next Sync.
	dead []backend.Buf

	// device buffers, grown on demand (capacities rounded up to powers of
	// two) and reused
	h, x, out              backend.Buf
	q0, gate, qg, k, v, o  backend.Buf
	cos, sin               backend.Buf
	c, cc, z, b, a, qn, kn backend.Buf
	vv, beta, alpha        backend.Buf
	logits, wts            backend.Buf
	xe, ge, ue, ye, slots  backend.Buf
	sg, su, ss, gl         backend.Buf
	xf, lgB, normB         backend.Buf
	hintLogits, hintW      backend.Buf

	// host buffers
	ids                         []int32
	cosH, sinH                  []float32
	idx                         []int32
	wH                          []float32
	cnt, start, perToken        []int
	order                       []int
	pairTok, pairRow            []int32
	need                        []int
	hintIdx                     []int32
	hintList                    []int
	lg                          []float32 // logits of the last step (reused by Generate)
	norms                       []float32 // their normalisers (m, s a wanted row), when computed
	normed                      bool      // the last step computed norms
	amax                        []int32   // the wanted rows' argmaxes, when computed
	amaxed                      bool      // the last step computed argmaxes
	rows                        [][]float32
	xH, xeH, geH, ueH, yeH      []float32
	xHB, xeHB, geHB, ueHB, yeHB backend.Buf   // host Bufs viewing the slices above
	hq                          backend.Queue // the host's queue (experts placed on the CPU)
	x3                          backend.Expert
	held                        []heldExpert // experts bound for the grouped compute (moeUse)
	mmOps                       []backend.MatMulOp
	drOps                       []backend.DeltaRuleOp
	use                         moeUse
	segPairs                    []int
	placeStats                  placeState
	hostPick                    []int8 // moeUse.pick's storage
}

func (m *Model) newWork() (*work, error) {
	q, err := m.be.NewQueue()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	w := &work{m: m, q: q}
	if m.host != nil {
		hq, err := m.host.NewQueue()
		if err != nil {
			return nil, fmt.Errorf("engine: host queue: %w", err)
		}
		w.hq = hq
	}
	return w, nil
}

func (w *work) close() error {
	err := w.q.Sync()
	w.freeDead()
	for _, b := range []*backend.Buf{&w.h, &w.x, &w.out, &w.q0, &w.gate, &w.qg, &w.k, &w.v, &w.o, &w.cos, &w.sin,
		&w.c, &w.cc, &w.z, &w.b, &w.a, &w.qn, &w.kn, &w.vv, &w.beta, &w.alpha, &w.logits, &w.wts,
		&w.xe, &w.ge, &w.ue, &w.ye, &w.slots, &w.sg, &w.su, &w.ss, &w.gl, &w.xf, &w.lgB, &w.hintLogits, &w.hintW} {
		if b.Mem() != nil {
			w.m.be.Free(*b)
			*b = backend.Buf{}
		}
	}
	if cerr := w.q.Close(); err == nil {
		err = cerr
	}
	return err
}

// buf returns the first n values of *p, growing it (a new allocation, the
// old one freed after the next Sync) when it is shorter.
func (w *work) buf(p *backend.Buf, n int) backend.Buf {
	if p.Len() < n {
		if p.Mem() != nil {
			w.dead = append(w.dead, *p)
		}
		b, err := w.m.be.Alloc(1 << bits.Len(uint(n-1)))
		if err != nil {
			if w.err == nil {
				w.err = fmt.Errorf("engine: scratch of %d values: %w", n, err)
			}
			*p = backend.Buf{}
			return backend.Buf{}
		}
		*p = b
	}
	return p.Slice(0, n)
}

// sync waits for the queue and frees what buf grew out of.
func (w *work) sync() error {
	t0 := time.Now()
	err := w.q.Sync()
	w.syncNanos.Add(int64(time.Since(t0)))
	w.syncs.Add(1)
	w.freeDead()
	if w.err != nil {
		return w.err
	}
	return err
}

func (w *work) freeDead() {
	for _, b := range w.dead {
		w.m.be.Free(b)
	}
	w.dead = w.dead[:0]
}

func grow[T any](p *[]T, n int) []T {
	if cap(*p) < n {
		*p = make([]T, n)
	}
	*p = (*p)[:n]
	return *p
}

// growHost is grow for a host slice that a host-backend Buf views.
func (w *work) growHost(p *[]float32, b *backend.Buf, n int) ([]float32, backend.Buf) {
	if cap(*p) < n {
		*p = make([]float32, n)
		*b = w.m.host.Wrap((*p)[:cap(*p)])
	}
	*p = (*p)[:n]
	return *p, b.Slice(0, n)
}

// step runs the segments' tokens (w.ids, in segment order) through every
// layer as one batch of rows and returns, per segment in order, the logits
// of its last want positions.
// Every row is computed with the canonical per-row arithmetic, so a row's
// bits do not depend on the other rows of the step.
func (w *work) step(ctx context.Context, segs []segment, reuse bool) ([][]float32, error) {
	m, c, q := w.m, w.m.cfg, w.q
	H := c.Hidden
	T, want := 0, 0
	for i := range segs {
		segs[i].row0 = T
		T += segs[i].n
		want += segs[i].want
	}
	ids := w.ids[:T]
	w.err = nil
	for i := range segs {
		if err := segs[i].s.prepare(w, segs[i].n); err != nil {
			return nil, err
		}
	}
	h := w.buf(&w.h, T*H)
	x := w.buf(&w.x, T*H)
	out := w.buf(&w.out, T*H)
	q.Embed(h, m.embed, ids)
	if m.invFreq != nil {
		n := len(m.invFreq)
		cos, sin := grow(&w.cosH, T*n), grow(&w.sinH, T*n)
		for _, sg := range segs {
			for t := range sg.n {
				r := sg.row0 + t
				canon.RopeRow(m.invFreq, sg.s.pos+t, cos[r*n:(r+1)*n], sin[r*n:(r+1)*n])
			}
		}
		q.Write(w.buf(&w.cos, T*n), cos)
		q.Write(w.buf(&w.sin, T*n), sin)
	}
	for _, sg := range segs {
		sg.s.ledger.BeginChunk(sg.s.pos, sg.n)
	}
	abort := func(err error) ([][]float32, error) {
		w.sync() // leave nothing in flight
		for _, sg := range segs {
			sg.s.ledger.AbortChunk()
		}
		return nil, err
	}
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return abort(err)
		}
		if w.err != nil {
			return abort(w.err)
		}
		L := &m.layers[l]
		q.RMSNorm(x, h, L.inNorm, H, c.RMSNormEps)
		if L.attn != nil {
			w.attention(L, segs, x, out, T)
		} else {
			w.deltaNet(L, segs, x, out, T)
		}
		q.Add(h, h, out)
		q.RMSNorm(x, h, L.postNorm, H, c.RMSNormEps)
		if L.sparse {
			if err := w.moe(ctx, L, segs, x, out, T); err != nil {
				return abort(err)
			}
		} else {
			w.mlp(L.dense, x, out, T)
		}
		q.Add(h, h, out)
	}
	var res [][]float32
	w.normed, w.amaxed = false, false
	if want > 0 {
		// The wanted rows: the last want of each segment, in order, one
		// RMSNorm for each run of them that lies contiguous in h (the
		// decode rows of a batch are one run; the norm is per row).
		xf := w.buf(&w.xf, want*H)
		r, run, from := 0, 0, 0
		norm := func() {
			if run > 0 {
				q.RMSNorm(xf.Rows(r-run, r, H), h.Rows(from, from+run, H), m.finalNorm, H, c.RMSNormEps)
			}
		}
		for _, sg := range segs {
			if sg.want == 0 {
				continue
			}
			first := sg.row0 + sg.n - sg.want
			if run > 0 && first != from+run {
				norm()
				run = 0
			}
			if run == 0 {
				from = first
			}
			run += sg.want
			r += sg.want
		}
		norm()
		var lg []float32
		if reuse {
			lg, res = grow(&w.lg, want*c.Vocab), grow(&w.rows, want)
		} else {
			lg, res = make([]float32, want*c.Vocab), make([][]float32, want)
		}
		lgB := w.buf(&w.lgB, want*c.Vocab)
		q.MatMul(lgB, m.head, xf, want)
		if nq, ok := q.(backend.Normaliser); ok && wants(segs, func(s *Session) bool { return s.norm }) {
			nb := w.buf(&w.normB, 2*want)
			nq.SoftmaxNorm(nb, lgB, want, c.Vocab)
			q.Read(grow(&w.norms, 2*want), nb)
			w.normed = true
		}
		if aq, ok := q.(backend.Argmaxer); ok && wants(segs, func(s *Session) bool { return s.argmax }) {
			aq.Argmax(grow(&w.amax, want), lgB, want, c.Vocab)
			w.amaxed = true
		}
		q.Read(lg, lgB)
		for i := range res {
			res[i] = lg[i*c.Vocab : (i+1)*c.Vocab : (i+1)*c.Vocab]
		}
	}
	if err := w.sync(); err != nil {
		return abort(err)
	}
	for _, sg := range segs {
		sg.s.ledger.EndChunk()
		sg.s.pos += sg.n
	}
	m.tokens.Add(int64(T))
	return res, nil
}

// wants says whether a segment with wanted rows asks, by ask, for
// something of their logits (Session.SetSoftmaxNorm, Session.SetArgmax).
func wants(segs []segment, ask func(*Session) bool) bool {
	for _, sg := range segs {
		if sg.want > 0 && ask(sg.s) {
			return true
		}
	}
	return false
}

// prepare makes the session's state ready for n more tokens: DeltaNet
// state allocated (and zeroed after a Reset), the KV cache grown.
func (s *Session) prepare(w *work, n int) error {
	m, c := s.m, s.m.cfg
	for i := range s.st.layers {
		st := &s.st.layers[i]
		switch m.layers[i].kind {
		case hf.LinearAttention:
			if st.conv.Mem() == nil {
				var err error
				if st.conv, err = m.be.Alloc(c.ConvDim() * (c.ConvKernel - 1)); err != nil {
					return fmt.Errorf("engine: conv state: %w", err)
				}
				if st.state, err = m.be.Alloc(c.LinearValueHeads * c.LinearKeyDim * c.LinearValueDim); err != nil {
					return fmt.Errorf("engine: recurrent state: %w", err)
				}
			} else if s.resetState {
				w.q.Zero(st.conv)
				w.q.Zero(st.state)
			}
		case hf.FullAttention:
			if err := s.growKV(w, st, s.pos+n); err != nil {
				return err
			}
		}
	}
	s.resetState = false
	return nil
}

// growKV makes the KV cache of st hold at least rows positions, growing it
// by doubling (at least 256 rows) so that decode steps rarely allocate.
func (s *Session) growKV(w *work, st *layerState, rows int) error {
	if rows <= st.kvRows {
		return nil
	}
	c := s.m.cfg
	row := c.KVHeads * c.HeadDim
	nr := max(2*st.kvRows, rows, 256)
	if c.MaxPositions > 0 {
		nr = max(min(nr, c.MaxPositions), rows)
	}
	k, err := s.m.be.Alloc(nr * row)
	if err != nil {
		return fmt.Errorf("engine: KV cache of %d positions: %w", nr, err)
	}
	v, err := s.m.be.Alloc(nr * row)
	if err != nil {
		s.m.be.Free(k)
		return fmt.Errorf("engine: KV cache of %d positions: %w", nr, err)
	}
	if st.kvRows > 0 {
		if s.pos > 0 {
			w.q.Copy(k, s.pos*row, st.k, s.pos*row, 1, s.pos*row)
			w.q.Copy(v, s.pos*row, st.v, s.pos*row, 1, s.pos*row)
		}
		if err := w.q.Sync(); err != nil {
			return err
		}
		s.m.be.Free(st.k)
		s.m.be.Free(st.v)
	}
	st.k, st.v, st.kvRows = k, v, nr
	return nil
}
