package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/tarfa-ai/tarfa/engine/backend"
	"github.com/tarfa-ai/tarfa/engine/canon"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// maxChunk is the number of tokens Forward pushes through the layers at
// once. It bounds scratch memory; results do not depend on it.
var maxChunk = 64

// Session is one sequence: its KV cache, conv and recurrent state, and
// scratch buffers. A Session is not safe for concurrent use; several
// Sessions of one Model may run concurrently.
type Session struct {
	m      *Model
	pos    int
	broken error
	// ledger, if set, records this session's routing, expert use and
	// logits chain (SetLedger).
	ledger *ledger.Ledger
	layers []layerState
	sc     scratch
	mats   [3]backend.Mat
	use    moeUse
}

type layerState struct {
	k, v  []float32 // full attention: pos rows of nkv×hd each
	conv  []float32 // Gated DeltaNet: C×(Kc−1) previous conv inputs
	state []float32 // Gated DeltaNet: nv×dk×dv recurrent state (fp32)
	last  []int32   // MoE: the experts the last token used (for hints)
}

// scratch holds per-chunk buffers, grown on demand and reused.
type scratch struct {
	h, x, out, y                []float32
	q, gate, qg, k, v, o        []float32
	cos, sin                    []float32
	c, cc, z, b, a, qn, kn, vv  []float32
	beta, alpha                 []float32
	logits                      []float32
	idx                         []int32
	wts                         []float32
	cnt, start, order, perToken []int
	need                        []int
	lg                          []float32 // logits of the last step (reused by Generate)
	rows                        [][]float32
	hintLogits, hintW           []float32
	hintIdx                     []int32
	hint                        []int
	xe, ge, ue, ye, yslots      []float32
	sg, su, ss, gl              []float32
}

func grow[T any](p *[]T, n int) []T {
	if cap(*p) < n {
		*p = make([]T, n)
	}
	*p = (*p)[:n]
	return *p
}

// NewSession starts an empty sequence.
func (m *Model) NewSession() *Session {
	s := &Session{m: m}
	s.layers = make([]layerState, len(m.layers))
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
	c := s.m.cfg
	s.pos, s.broken = 0, nil
	for i := range s.layers {
		st := &s.layers[i]
		st.k, st.v, st.last = st.k[:0], st.v[:0], st.last[:0]
		if s.m.layers[i].kind == hf.LinearAttention {
			st.conv = grow(&st.conv, c.ConvDim()*(c.ConvKernel-1))
			st.state = grow(&st.state, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
			clear(st.conv)
			clear(st.state)
		}
	}
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

// forward is ForwardContext; with reuse the returned logits live in the
// session's buffers and are valid only until its next step (Generate's
// decode loop, which allocates nothing per token).
func (s *Session) forward(ctx context.Context, tokens []int, all, reuse bool) ([][]float32, error) {
	m := s.m
	c := m.cfg
	if s.broken != nil {
		return nil, fmt.Errorf("engine: session unusable after an earlier error (Reset it): %w", s.broken)
	}
	if len(tokens) == 0 {
		return nil, errors.New("engine: Forward with no tokens")
	}
	for i, t := range tokens {
		if t < 0 || t >= c.Vocab {
			return nil, fmt.Errorf("engine: token %d at index %d is outside the vocabulary [0, %d)", t, i, c.Vocab)
		}
	}
	limit := canon.MaxRopePosition
	if c.MaxPositions > 0 {
		limit = min(limit, c.MaxPositions)
	}
	if s.pos+len(tokens) > limit {
		return nil, fmt.Errorf("engine: sequence of %d tokens would exceed the %d positions the model supports", s.pos+len(tokens), limit)
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
		lg, err := s.chunk(ctx, chunk, want, reuse && !all)
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

// chunk runs T tokens through every layer and returns the logits of the
// last want positions.
func (s *Session) chunk(ctx context.Context, tokens []int, want int, reuse bool) ([][]float32, error) {
	m, be, c := s.m, s.m.be, s.m.cfg
	T, H := len(tokens), c.Hidden
	sc := &s.sc
	h := grow(&sc.h, T*H)
	x := grow(&sc.x, T*H)
	out := grow(&sc.out, T*H)
	for t, id := range tokens {
		m.embed.Row(id, h[t*H:(t+1)*H])
	}
	if m.invFreq != nil {
		n := len(m.invFreq)
		cos, sin := grow(&sc.cos, T*n), grow(&sc.sin, T*n)
		for t := range T {
			canon.RopeRow(m.invFreq, s.pos+t, cos[t*n:(t+1)*n], sin[t*n:(t+1)*n])
		}
	}
	s.ledger.BeginChunk(s.pos, T)
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			s.ledger.AbortChunk()
			return nil, err
		}
		L := &m.layers[l]
		be.RMSNorm(x, h, L.inNorm, H, c.RMSNormEps)
		if L.attn != nil {
			s.attention(L, &s.layers[l], x, out, T)
		} else {
			s.deltaNet(L, &s.layers[l], x, out, T)
		}
		be.Add(h, h, out)
		be.RMSNorm(x, h, L.postNorm, H, c.RMSNormEps)
		if L.sparse {
			if err := s.moe(ctx, L, x, out, T); err != nil {
				s.ledger.AbortChunk()
				return nil, err
			}
		} else {
			s.mlp(L.dense, x, out, T)
		}
		be.Add(h, h, out)
	}
	s.ledger.EndChunk()
	s.pos += T
	m.tokens.Add(int64(T))
	if want == 0 {
		return nil, nil
	}
	rows := h[(T-want)*H:]
	be.RMSNorm(x[:want*H], rows, m.finalNorm, H, c.RMSNormEps)
	var lg []float32
	var res [][]float32
	if reuse {
		lg, res = grow(&sc.lg, want*c.Vocab), grow(&sc.rows, want)
	} else {
		lg, res = make([]float32, want*c.Vocab), make([][]float32, want)
	}
	be.MatMul(lg, m.head, x[:want*H], want)
	for i := range res {
		res[i] = lg[i*c.Vocab : (i+1)*c.Vocab : (i+1)*c.Vocab]
	}
	return res, nil
}

// attention is full (GQA, causal) attention; Qwen3.5's variant has the
// per-head interleaved query|gate projection and a sigmoid output gate.
func (s *Session) attention(L *layer, st *layerState, x, out []float32, T int) {
	m, be, c := s.m, s.m.be, s.m.cfg
	a := L.attn
	nq, nkv, hd := c.Heads, c.KVHeads, c.HeadDim
	sc := &s.sc
	q := grow(&sc.q, T*nq*hd)
	var gate []float32
	if a.gated {
		qg := grow(&sc.qg, T*2*nq*hd)
		be.MatMul(qg, a.q, x, T)
		gate = grow(&sc.gate, T*nq*hd)
		for i := 0; i < T*nq; i++ { // row i = (token, head): [query hd | gate hd]
			copy(q[i*hd:(i+1)*hd], qg[2*i*hd:(2*i+1)*hd])
			copy(gate[i*hd:(i+1)*hd], qg[(2*i+1)*hd:(2*i+2)*hd])
		}
	} else {
		be.MatMul(q, a.q, x, T)
	}
	kvRow := nkv * hd
	k := grow(&sc.k, T*kvRow)
	v := grow(&sc.v, T*kvRow)
	be.MatMul(k, a.k, x, T)
	be.MatMul(v, a.v, x, T)
	be.RMSNorm(q, q, a.qNorm, hd, c.RMSNormEps)
	be.RMSNorm(k, k, a.kNorm, hd, c.RMSNormEps)
	n := len(m.invFreq)
	cos, sin := sc.cos[:T*n], sc.sin[:T*n]
	be.RoPE(q, T, nq, hd, cos, sin)
	be.RoPE(k, T, nkv, hd, cos, sin)
	st.k = appendRows(st.k, k, kvRow)
	st.v = appendRows(st.v, v, kvRow)
	o := grow(&sc.o, T*nq*hd)
	be.Attention(o, q, st.k, st.v, T, s.pos, nq, nkv, hd, m.attnScale)
	if a.gated {
		be.SigmoidMul(o, o, gate)
	}
	be.MatMul(out, a.o, o, T)
}

// appendRows appends rows to a cache slice, growing its capacity by
// doubling (at least 256 rows of rowLen) so that decode steps rarely
// allocate.
func appendRows(dst, rows []float32, rowLen int) []float32 {
	if len(dst)+len(rows) > cap(dst) {
		nc := max(2*cap(dst), len(dst)+len(rows), 256*rowLen)
		nd := make([]float32, len(dst), nc)
		copy(nd, dst)
		dst = nd
	}
	return append(dst, rows...)
}

// deltaNet is the Qwen3.5 Gated DeltaNet (linear attention) layer.
func (s *Session) deltaNet(L *layer, st *layerState, x, out []float32, T int) {
	m, be, c := s.m, s.m.be, s.m.cfg
	g := L.gdn
	nk, nv, dk, dv, Kc := c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim, c.ConvKernel
	C := c.ConvDim()
	sc := &s.sc
	raw := grow(&sc.c, T*C)
	conv := grow(&sc.cc, T*C)
	z := grow(&sc.z, T*nv*dv)
	b := grow(&sc.b, T*nv)
	a := grow(&sc.a, T*nv)
	be.MatMul(raw, g.qkv, x, T)
	be.MatMul(z, g.z, x, T)
	be.MatMul(b, g.b, x, T)
	be.MatMul(a, g.a, x, T)
	be.CausalConv(conv, raw, st.conv, g.conv, T, C, Kc)
	// Split the conv output per token into q | k | v (head-major each).
	kd, vd := nk*dk, nv*dv
	q := grow(&sc.qn, T*kd)
	k := grow(&sc.kn, T*kd)
	v := grow(&sc.vv, T*vd)
	for t := range T {
		row := conv[t*C : (t+1)*C]
		copy(q[t*kd:(t+1)*kd], row[:kd])
		copy(k[t*kd:(t+1)*kd], row[kd:2*kd])
		copy(v[t*vd:(t+1)*vd], row[2*kd:])
	}
	be.L2Norm(q, q, dk, l2Eps, m.qkScale)
	be.L2Norm(k, k, dk, l2Eps, 1)
	beta := grow(&sc.beta, T*nv)
	alpha := grow(&sc.alpha, T*nv)
	be.GDNGates(beta, alpha, b, a, g.aLog, g.dtBias)
	o := grow(&sc.o, T*vd)
	be.DeltaRule(o, q, k, v, beta, alpha, st.state, T, nk, nv, dk, dv)
	be.GatedRMSNorm(o, o, z, g.norm, dv, c.RMSNormEps)
	be.MatMul(out, g.out, o, T)
}

// l2Eps is the fixed epsilon of the Gated DeltaNet L2 norm (added to the
// sum of squares).
const l2Eps = float32(1e-6)

// mlp is a dense SwiGLU MLP: down(silu(gate(x))·up(x)).
func (s *Session) mlp(w *mlpWeights, x, out []float32, T int) {
	be := s.m.be
	I := w.gate.Rows
	g := grow(&s.sc.sg, T*I)
	u := grow(&s.sc.su, T*I)
	be.MatMul(g, w.gate, x, T)
	be.MatMul(u, w.up, x, T)
	be.SiLUMul(g, g, u)
	be.MatMul(out, w.down, g, T)
}

// moe is the routed-expert block (plus the shared expert when the model has
// one). Experts are fetched from the attestation layer once per chunk and
// evaluated for all tokens routed to them; each token's k slot outputs are
// then combined in slot order.
func (s *Session) moe(ctx context.Context, L *layer, x, out []float32, T int) error {
	m, be, c := s.m, s.m.be, s.m.cfg
	E, k, H, I := c.Experts, c.TopK, c.Hidden, c.MoEIntermediate
	sc := &s.sc
	logits := grow(&sc.logits, T*E)
	idx := grow(&sc.idx, T*k)
	wts := grow(&sc.wts, T*k)
	be.MatMul(logits, L.router, x, T)
	be.Route(idx, wts, logits, T, E, k, c.NormTopKProb)
	s.ledger.Route(L.index, idx, wts, k)
	if h, ok := m.experts.(Hinter); ok {
		s.hint(h, L, x, T)
	}
	st := &s.layers[L.index]
	st.last = append(st.last[:0], idx[(T-1)*k:T*k]...)

	// Group the T·k (token, slot) pairs by expert (counting sort).
	cnt := grow(&sc.cnt, E)
	start := grow(&sc.start, E+1)
	order := grow(&sc.order, T*k)
	clear(cnt)
	for _, e := range idx {
		if e < 0 || int(e) >= E {
			return fmt.Errorf("engine: layer %d: router chose expert %d of %d", L.index, e, E)
		}
		cnt[e]++
	}
	start[0] = 0
	for e := range E {
		start[e+1] = start[e] + cnt[e]
	}
	copy(cnt, start[:E])
	for i, e := range idx {
		order[cnt[e]] = i
		cnt[e]++
	}

	perTok := grow(&sc.perToken, T)
	clear(perTok)
	need := sc.need[:0]
	for e := range E {
		if start[e+1] > start[e] {
			need = append(need, e)
		}
	}
	sc.need = need
	u := &s.use
	*u = moeUse{s: s, L: L, x: x, order: order, start: start, perTok: perTok, slots: grow(&sc.yslots, T*k*H), k: k, H: H, I: I}
	if err := m.experts.Stream(ctx, L.index, need, u); err != nil {
		return err
	}
	slots := u.slots
	for t, n := range perTok {
		if n != k {
			return fmt.Errorf("engine: layer %d token %d: %d experts evaluated, want top-k = %d", L.index, t, n, k)
		}
	}
	be.Combine(out, slots, wts, T, k, H)

	if L.shared != nil {
		ys := grow(&sc.ss, T*H)
		s.mlp(L.shared, x, ys, T)
		gl := grow(&sc.gl, T)
		be.MatMul(gl, L.sharedGate, x, T)
		be.GateAdd(out, ys, gl, T, H)
	}
	return nil
}

// moeUse computes one MoE step's experts as the source delivers them: for
// expert e, the rows of the (token, slot) pairs routed to it, into their
// slots. It holds the step's scratch; Consume runs on the session's
// goroutine.
type moeUse struct {
	s            *Session
	L            *layer
	x            []float32
	order, start []int
	perTok       []int
	slots        []float32
	k, H, I      int
}

func (u *moeUse) Consume(e int, ve weights.VerifiedExpert, tier ledger.Tier) error {
	s, m, be := u.s, u.s.m, u.s.m.be
	sc := &s.sc
	k, H, I := u.k, u.H, u.I
	pairs := u.order[u.start[e]:u.start[e+1]]
	n := len(pairs)
	if n == 0 {
		return fmt.Errorf("engine: layer %d: the expert source delivered expert %d, which no token was routed to", u.L.index, e)
	}
	if err := m.bind(u.L.index, e, ve, &s.mats); err != nil {
		return err
	}
	if tier == ledger.TierStorage {
		m.fetches[u.L.index].Add(1)
	} else {
		m.cacheHits.Add(1)
	}
	if s.ledger != nil {
		hashed := int64(0)
		if tier == ledger.TierStorage {
			hashed = ve.Bytes()
		}
		s.ledger.UseExpert(u.L.index, e, ve.Digest(), tier, n, hashed)
	}
	xe := grow(&sc.xe, n*H)
	for j, p := range pairs {
		t := p / k
		copy(xe[j*H:(j+1)*H], u.x[t*H:(t+1)*H])
	}
	ge := grow(&sc.ge, n*I)
	ue := grow(&sc.ue, n*I)
	ye := grow(&sc.ye, n*H)
	be.MatMul(ge, &s.mats[0], xe, n)
	be.MatMul(ue, &s.mats[1], xe, n)
	be.SiLUMul(ge, ge, ue)
	be.MatMul(ye, &s.mats[2], ge, n)
	for j, p := range pairs {
		copy(u.slots[p*H:(p+1)*H], ye[j*H:(j+1)*H])
		u.perTok[p/k]++
	}
	m.evals[u.L.index].Add(int64(n))
	// The views end here: the source may recycle the copy.
	s.mats = [3]backend.Mat{}
	return nil
}

// hint tells a source which experts to expect next: for the next MoE layer
// of this token, those its router picks on this layer's input (a cheap and
// well-known predictor) and those the previous token used; after the last
// MoE layer, the first MoE layer's experts of this token. Only the last
// token of the chunk is predicted. The prediction uses its own buffers and
// changes nothing the model computes.
func (s *Session) hint(h Hinter, L *layer, x []float32, T int) {
	m, be, c := s.m, s.m.be, s.m.cfg
	E, k, H := c.Experts, c.TopK, c.Hidden
	sc := &s.sc
	hint := sc.hint[:0]
	add := func(e int32) {
		for _, x := range hint {
			if x == int(e) {
				return
			}
		}
		hint = append(hint, int(e))
	}
	next := L.nextMoE
	if next >= 0 {
		lg := grow(&sc.hintLogits, E)
		idx := grow(&sc.hintIdx, k)
		w := grow(&sc.hintW, k)
		be.MatMul(lg, m.layers[next].router, x[(T-1)*H:T*H], 1)
		be.Route(idx, w, lg, 1, E, k, c.NormTopKProb)
		for _, e := range idx {
			add(e)
		}
	} else {
		next = m.firstMoE
	}
	for _, e := range s.layers[next].last {
		add(e)
	}
	sc.hint = hint
	if len(hint) > 0 {
		h.Hint(next, hint)
	}
}
