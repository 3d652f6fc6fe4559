package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/weights"
)

// source is where the engine gets weight bytes: a *weights.Checkpoint
// (tests substitute wrappers to check that the engine refuses values that
// are not what it asked for).
type source interface {
	// Tensor returns a non-expert tensor by canonical name: text-only layout with the "model." prefix
	// (e.g. "model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight",
	// "model.layers.0.linear_attn.A_log", "model.layers.2.mlp.shared_expert_gate.weight",
	// "model.layers.1.mlp.gate.weight" (router), "model.norm.weight", "lm_head.weight").
	// When cfg.Tied, "lm_head.weight" does not exist: use the embedding.
	Tensor(name string) (weights.VerifiedTensor, error)
	// Expert returns routed expert e of layer l: Gate() [I,H], Up() [I,H], Down() [H,I].
	Expert(layer, expert int) (weights.VerifiedExpert, error)
}

// Options configures Load.
type Options struct {
	// Threads is the number of goroutines per operation of the default CPU
	// backend (0 = GOMAXPROCS). Results do not depend on it.
	Threads int
	// Backend overrides the default CPU backend (then Threads is ignored for
	// the model's operations; it still sizes the host backend that computes
	// routed experts placed on the CPU beside a device backend).
	Backend backend.Backend
	// Placement chooses where routed experts that are not resident on a
	// device backend are computed (PlaceAuto when empty). Results never
	// depend on it.
	Placement Placement
	// CheckExperts makes Load fetch every routed expert once and check its
	// shapes and dtypes. Otherwise experts are checked each time they are
	// fetched for use (always).
	CheckExperts bool
	// Experts supplies routed experts (the streaming hierarchy, package
	// tier, whose RAM tier keeps verified experts resident). Nil: read each
	// from the checkpoint, verified, for every use, keeping nothing.
	Experts ExpertSource
	// LoadProgress, if set, is called by LoadContext with the bytes of
	// each piece of a non-expert tensor read and verified (a source that
	// reads tensors in pieces, a *weights.Checkpoint, also stops within a
	// piece when the context is done).
	LoadProgress func(n int64)

	ctx context.Context // LoadContext's
}

// Model is a loaded model: configuration, non-expert weights (viewing the
// verified bytes) and the backend. Experts are fetched from Weights when a
// token is routed to them. A Model is safe for concurrent use by several
// Sessions.
type Model struct {
	cfg  *hf.Config
	root jnf.Digest // of the checkpoint every weight came from
	w    source
	be   backend.Backend
	// host computes routed experts placed on the CPU when be is a device
	// backend (nil when be is the CPU backend itself).
	host      backend.Host
	placement Placement
	place     placer
	// digests[l][e] is the manifest digest of routed expert e of layer l,
	// when the source can tell without reading it (what a device slot the
	// expert source binds must hold).
	digests [][]jnf.Digest

	embed, head *backend.Weight
	finalNorm   backend.Buf
	layers      []layer
	invFreq     []float32 // RoPE inverse frequencies (nil without full-attention layers)
	attnScale   float32
	qkScale     float32 // Gated DeltaNet query scale 1/sqrt(dk)
	offsetNorm  bool    // Qwen3.5: RMSNorm scale is 1+w

	tokens, forwards atomic.Int64
	evals, fetches   []atomic.Int64 // per layer
	onHost, onDevice atomic.Int64
	bufs             []backend.Buf // allocated at load (Close frees them)
	weights          []*backend.Weight
	closeOnce        sync.Once
	sessions         sessionSet // a device backend's open sessions (Close frees them)
	experts          ExpertSource
	firstMoE         int // the first MoE layer (−1: none)
	// resident are the verified tensors the model views in place, for Scrub.
	resident []weights.VerifiedTensor
}

type layer struct {
	index    int
	kind     hf.LayerType
	inNorm   backend.Buf // effective RMSNorm scales
	postNorm backend.Buf
	attn     *attnWeights
	gdn      *gdnWeights
	// MoE (sparse) or dense MLP
	sparse     bool
	nextMoE    int // the next MoE layer of the same token (−1: none)
	router     *backend.Weight
	dense      *mlpWeights
	shared     *mlpWeights
	sharedGate *backend.Weight
}

type attnWeights struct {
	q, k, v, o   *backend.Weight
	qNorm, kNorm backend.Buf
	gated        bool // Qwen3.5: q_proj rows are per head [query | gate]
}

type gdnWeights struct {
	qkv, z, b, a, out *backend.Weight
	conv              backend.Buf // C×Kc
	aLog, dtBias      backend.Buf // nv
	norm              backend.Buf // dv, plain scale
}

type mlpWeights struct{ gate, up, down *backend.Weight }

// Stats are cumulative counters over all sessions of a Model.
type Stats struct {
	Tokens   int64 // tokens run through the model
	Forwards int64 // Forward calls that completed
	TopK     int   // routed experts per token and MoE layer (config)
	// ExpertEvals[l] counts routed-expert evaluations (token × expert) in
	// layer l: always TopK × tokens for a MoE layer, 0 for a dense one.
	ExpertEvals []int64
	// ExpertFetches[l] counts Weights.Expert calls for layer l (at most one
	// per distinct expert per Forward chunk; fewer with the expert cache).
	ExpertFetches []int64
	// ExpertsOnHost and ExpertsOnDevice count expert uses (one expert for
	// the tokens of one step routed to it) computed by the host beside a
	// device backend and by the model's backend.
	ExpertsOnHost, ExpertsOnDevice int64
}

// Loaded reports what Load verified: the non-expert tensors it fetched and
// the bytes hashed for them (BLAKE3).
func (m *Model) Loaded() (tensors int, bytes int64) {
	for _, t := range m.resident {
		bytes += int64(len(t.View().Data()))
	}
	return len(m.resident), bytes
}

// Root is the manifest root of the checkpoint every weight came from.
func (m *Model) Root() jnf.Digest { return m.root }

// Scrub re-hashes every verified copy the model keeps resident — the
// non-expert tensors it views in place and the routed
// experts a device backend keeps in device memory (backend.DeviceScrubber,
// hashed there) — against
// their manifest digests, and returns the first mismatch: a bit flipped in
// memory since the copy was verified is found here. It returns the number
// of bytes re-hashed. (Norm scales are widened copies, made at load from
// verified bytes; they are not re-checkable against a digest.)
func (m *Model) Scrub() (int64, error) {
	var n int64
	for _, t := range m.resident {
		if err := t.Recheck(); err != nil {
			return n, fmt.Errorf("engine: scrub: %w", err)
		}
		n += int64(len(t.View().Data()))
	}
	if ds, ok := m.be.(backend.DeviceScrubber); ok {
		k, err := ds.ScrubDevice()
		n += k
		if err != nil {
			return n, fmt.Errorf("engine: scrub: %w", err)
		}
	}
	return n, nil
}

// Config returns the model's configuration.
func (m *Model) Config() *hf.Config { return m.cfg }

// Backend returns the backend the model runs on.
func (m *Model) Backend() backend.Backend { return m.be }

// Stats returns a snapshot of the counters.
func (m *Model) Stats() Stats {
	s := Stats{Tokens: m.tokens.Load(), Forwards: m.forwards.Load(), TopK: m.cfg.TopK,
		ExpertsOnHost: m.onHost.Load(), ExpertsOnDevice: m.onDevice.Load()}
	s.ExpertEvals = make([]int64, len(m.evals))
	s.ExpertFetches = make([]int64, len(m.fetches))
	for i := range m.evals {
		s.ExpertEvals[i] = m.evals[i].Load()
		s.ExpertFetches[i] = m.fetches[i].Load()
	}
	return s
}

// Load takes the configuration of ck, fetches every non-expert tensor
// from it and checks its shape and dtype (BF16 or F32), and prepares the
// backend. Errors name the tensor, the got and the wanted value. Every
// weight the model computes with is a verified value of ck.
func Load(ck *weights.Checkpoint, opt Options) (*Model, error) {
	return LoadContext(context.Background(), ck, opt)
}

// LoadContext is Load that stops between tensors when ctx is done,
// returning ctx's error.
func LoadContext(ctx context.Context, ck *weights.Checkpoint, opt Options) (*Model, error) {
	opt.ctx = ctx
	return loadFrom(ck.Config(), ck.Root(), ck, opt)
}

// loadFrom is Load from any source of verified values of the checkpoint with
// the given root. Every value is checked to be the one asked for (name or
// expert ID) and to come from that checkpoint.
func loadFrom(cfg *hf.Config, root jnf.Digest, w source, opt Options) (*Model, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	place, err := opt.Placement.placer()
	if err != nil {
		return nil, err
	}
	be := opt.Backend
	if be == nil {
		if be, err = OpenBackend("cpu", BackendOptions{Threads: opt.Threads}); err != nil {
			return nil, err
		}
	}
	m := &Model{cfg: cfg, root: root, w: w, be: be, offsetNorm: cfg.Arch == hf.Qwen35MoE, placement: opt.Placement, place: place}
	if _, isHost := be.(backend.Host); !isHost {
		// The host side of the split: the CPU reference, opened by name.
		hb, err := OpenBackend("cpu", BackendOptions{Threads: opt.Threads})
		if err != nil {
			return nil, err
		}
		h, ok := hb.(backend.Host)
		if !ok {
			return nil, fmt.Errorf("engine: the registered cpu backend (%T) does not compute on host memory", hb)
		}
		m.host = h
	}
	m.experts = opt.Experts
	if m.experts == nil {
		m.experts = storageSource{w: w}
	}
	m.evals = make([]atomic.Int64, cfg.Layers)
	m.fetches = make([]atomic.Int64, cfg.Layers)
	ld := &loader{ctx: opt.ctx, w: w, root: root, offset: m.offsetNorm, progress: opt.LoadProgress}
	if ld.ctx == nil {
		ld.ctx = context.Background()
	}
	H, V := cfg.Hidden, cfg.Vocab

	m.embed = ld.mat("model.embed_tokens.weight", V, H, backend.UseGather)
	ld.norm(&m.finalNorm, "model.norm.weight", H)
	if cfg.Tied {
		m.head = m.embed
		ld.use(m.embed, backend.UseHead) // multiplied as well as gathered
	} else {
		m.head = ld.mat("lm_head.weight", V, H, backend.UseHead)
	}
	hasFull := false
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		L := &m.layers[i]
		L.index, L.kind, L.sparse = i, cfg.LayerTypes[i], cfg.Sparse[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		ld.norm(&L.inNorm, p+"input_layernorm.weight", H)
		ld.norm(&L.postNorm, p+"post_attention_layernorm.weight", H)
		switch L.kind {
		case hf.FullAttention:
			hasFull = true
			L.attn = ld.attention(cfg, p+"self_attn.")
		case hf.LinearAttention:
			L.gdn = ld.deltaNet(cfg, p+"linear_attn.")
		}
		if L.sparse {
			L.router = ld.mat(p+"mlp.gate.weight", cfg.Experts, H, backend.UseMatMul)
			if cfg.SharedIntermediate > 0 {
				L.shared = ld.mlp(p+"mlp.shared_expert.", cfg.SharedIntermediate, H)
				L.sharedGate = ld.mat(p+"mlp.shared_expert_gate.weight", 1, H, backend.UseMatMul)
			}
		} else {
			L.dense = ld.mlp(p+"mlp.", cfg.DenseIntermediate, H)
		}
		if ld.err != nil {
			return nil, ld.err
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	m.resident = ld.kept
	if err := m.upload(ld); err != nil {
		m.Close()
		return nil, err
	}
	next := -1
	for i := len(m.layers) - 1; i >= 0; i-- {
		m.layers[i].nextMoE = next
		if m.layers[i].sparse {
			next = i
		}
	}
	m.firstMoE = next
	if hasFull {
		inv, err := canon.RopeInvFreq(cfg.RopeTheta, cfg.RotaryDim)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.invFreq = inv
		m.attnScale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	}
	if cfg.LinearKeyDim > 0 {
		m.qkScale = float32(1 / math.Sqrt(float64(cfg.LinearKeyDim)))
	}
	if refs, ok := w.(expertRefs); ok && m.firstMoE >= 0 && m.host != nil {
		m.digests = make([][]jnf.Digest, cfg.Layers)
		for l := range m.layers {
			if !m.layers[l].sparse {
				continue
			}
			m.digests[l] = make([]jnf.Digest, cfg.Experts)
			for e := range m.digests[l] {
				r, err := refs.ExpertRef(l, e)
				if err != nil {
					m.Close()
					return nil, fmt.Errorf("engine: layer %d expert %d: %w", l, e, err)
				}
				m.digests[l][e] = r.Digest()
			}
		}
	}
	if opt.CheckExperts {
		var x backend.Expert
		for l := range m.layers {
			if !m.layers[l].sparse {
				continue
			}
			for e := 0; e < cfg.Experts; e++ {
				if err := ld.ctx.Err(); err != nil {
					m.Close()
					return nil, err
				}
				ve, err := w.Expert(l, e)
				if err != nil {
					m.Close()
					return nil, fmt.Errorf("engine: layer %d expert %d: %w", l, e, err)
				}
				if err := m.bind(l, e, ve, &x); err != nil {
					m.Close()
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// expertRefs is a source that can name an expert's digest without reading
// it (a *weights.Checkpoint).
type expertRefs interface {
	ExpertRef(layer, expert int) (weights.ExpertRef, error)
}

// upload hands the fetched weights to the backend, the per-layer matrices
// first, then the LM head, then the embedding (so that a backend short of
// device memory keeps the last ones on the host), and copies the vectors
// (norm scales, conv taps, gate parameters) into backend buffers.
func (m *Model) upload(ld *loader) error {
	for _, use := range []backend.Use{backend.UseMatMul, backend.UseHead, backend.UseGather} {
		for _, p := range ld.mats {
			if p.use != use {
				continue
			}
			if err := ld.ctx.Err(); err != nil {
				return err
			}
			if err := m.be.Upload(p.w, p.key, p.lin, p.rows, p.cols, p.use); err != nil {
				return fmt.Errorf("engine: tensor %s: %w", p.lin.Name(), err)
			}
			m.weights = append(m.weights, p.w)
		}
	}
	q, err := m.be.NewQueue()
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	defer q.Close()
	for _, p := range ld.vecs {
		b, err := m.be.Alloc(len(p.f))
		if err != nil {
			return fmt.Errorf("engine: tensor %s: %w", p.name, err)
		}
		m.bufs = append(m.bufs, b)
		q.Write(b, p.f)
		*p.dst = b
	}
	if err := q.Sync(); err != nil {
		return fmt.Errorf("engine: copying the vectors to the %s backend: %w", m.be.Name(), err)
	}
	return nil
}

// Close releases what the model holds on its backend (device memory), the
// state of every session not closed yet included; none may be running. The
// model and its sessions must not be used afterwards (a step returns an
// error); the backend itself stays open (its owner closes it, after this).
func (m *Model) Close() error {
	var err error
	m.closeOnce.Do(func() {
		err = m.sessions.closeAll(m.be)
		for _, b := range m.bufs {
			m.be.Free(b)
		}
		for _, w := range m.weights {
			m.be.Drop(w)
		}
		m.bufs, m.weights = nil, nil
	})
	return err
}

func checkConfig(c *hf.Config) error {
	if c == nil {
		return fmt.Errorf("engine: nil config")
	}
	switch c.Arch {
	case hf.Qwen3MoE, hf.Qwen35MoE:
	default:
		return fmt.Errorf("engine: unsupported architecture %q", c.Arch)
	}
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab},
		{"num_experts", c.Experts}, {"num_experts_per_tok", c.TopK}, {"moe_intermediate_size", c.MoEIntermediate},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("engine: config %s = %d, want > 0", p.name, p.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("engine: num_attention_heads %d not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.TopK > c.Experts {
		return fmt.Errorf("engine: num_experts_per_tok %d > num_experts %d", c.TopK, c.Experts)
	}
	if len(c.LayerTypes) != c.Layers || len(c.Sparse) != c.Layers {
		return fmt.Errorf("engine: config has %d layer types and %d sparse flags for %d layers", len(c.LayerTypes), len(c.Sparse), c.Layers)
	}
	for i, t := range c.LayerTypes {
		switch t {
		case hf.FullAttention:
			if c.RotaryDim <= 0 || c.RotaryDim%2 != 0 || c.RotaryDim > c.HeadDim {
				return fmt.Errorf("engine: rotary dim %d, want even and in (0, head_dim %d]", c.RotaryDim, c.HeadDim)
			}
		case hf.LinearAttention:
			if c.Arch != hf.Qwen35MoE {
				return fmt.Errorf("engine: layer %d is linear_attention, which %s does not have", i, c.Arch)
			}
			if c.LinearKeyHeads <= 0 || c.LinearValueHeads <= 0 || c.LinearKeyDim <= 0 || c.LinearValueDim <= 0 || c.ConvKernel <= 0 {
				return fmt.Errorf("engine: layer %d is linear_attention but the linear_* dimensions are not all positive", i)
			}
			if c.LinearValueHeads%c.LinearKeyHeads != 0 {
				return fmt.Errorf("engine: linear_num_value_heads %d not a multiple of linear_num_key_heads %d", c.LinearValueHeads, c.LinearKeyHeads)
			}
		default:
			return fmt.Errorf("engine: layer %d has unknown type %q", i, t)
		}
		if !c.Sparse[i] && c.DenseIntermediate <= 0 {
			return fmt.Errorf("engine: layer %d is dense but intermediate_size = %d", i, c.DenseIntermediate)
		}
	}
	return nil
}

// loader fetches tensors and keeps the first error. Matrices and vectors
// are collected and handed to the backend once every tensor is checked
// (Model.upload).
type loader struct {
	ctx      context.Context
	progress func(int64)
	w        source
	root     jnf.Digest
	offset   bool
	err      error
	kept     []weights.VerifiedTensor
	mats     []pendingMat
	vecs     []pendingVec
}

// contextSource is a source that reads a tensor in pieces, stopping when a
// context is done and reporting each piece (a *weights.Checkpoint).
type contextSource interface {
	TensorContext(ctx context.Context, name string, progress func(int64)) (weights.VerifiedTensor, error)
}

type pendingMat struct {
	w          *backend.Weight
	key        backend.Key
	lin        weights.Linear
	rows, cols int
	use        backend.Use
}

type pendingVec struct {
	dst  *backend.Buf
	name string
	f    []float32
}

func (l *loader) fetch(name string, shape ...int) (weights.View, jnf.Digest, bool) {
	vt, ok := l.tensor(name, shape, false)
	if !ok {
		return weights.View{}, jnf.Digest{}, false
	}
	return vt.View(), vt.Digest(), true
}

// tensor fetches a verified tensor of this model and checks its shape
// (shape nil: not checked here) and dtype (BF16 or F32, or F8_E4M3 where
// f8 allows it).
func (l *loader) tensor(name string, shape []int, f8 bool) (weights.VerifiedTensor, bool) {
	if l.err != nil {
		return weights.VerifiedTensor{}, false
	}
	if err := l.ctx.Err(); err != nil {
		l.err = err
		return weights.VerifiedTensor{}, false
	}
	var vt weights.VerifiedTensor
	var err error
	if cs, ok := l.w.(contextSource); ok {
		vt, err = cs.TensorContext(l.ctx, name, l.progress)
	} else if vt, err = l.w.Tensor(name); err == nil && l.progress != nil {
		l.progress(int64(len(vt.View().Data())))
	}
	if err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return weights.VerifiedTensor{}, false
	}
	if got := vt.Name(); got != name {
		l.err = fmt.Errorf("engine: asked for tensor %s, got %s", name, got)
		return weights.VerifiedTensor{}, false
	}
	if r := vt.Root(); !r.Equal(l.root) {
		l.err = fmt.Errorf("engine: tensor %s comes from the checkpoint with root %s, the model is %s", name, r.Hex(), l.root.Hex())
		return weights.VerifiedTensor{}, false
	}
	if shape != nil {
		if err := checkShape(vt.View(), shape, f8); err != nil {
			l.err = fmt.Errorf("engine: %w", err)
			return weights.VerifiedTensor{}, false
		}
	}
	l.kept = append(l.kept, vt)
	return vt, true
}

func checkShape(v weights.View, want []int, f8 bool) error {
	ok := v.Dims() == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = v.Dim(i) == int64(want[i])
	}
	if !ok {
		return fmt.Errorf("tensor %s: shape %v, want %v", v.Name(), v.Shape(), slices.Clone(want))
	}
	switch d := v.DType(); {
	case d == jnf.BF16 || d == jnf.F32:
	case d == jnf.F8E4 && f8:
	case d == jnf.F8E4:
		return fmt.Errorf("tensor %s: dtype %s, want BF16 or F32 (only matrices the model multiplies may be block-FP8)", v.Name(), d)
	default:
		return fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", v.Name(), d)
	}
	return nil
}

// mat fetches a matrix — with its weight_scale_inv when it is block-FP8 —
// for the backend to receive in Model.upload.
func (l *loader) mat(name string, rows, cols int, use backend.Use) *backend.Weight {
	vt, ok := l.tensor(name, []int{rows, cols}, use != backend.UseGather)
	if !ok {
		return nil
	}
	key := backend.Key{Digest: vt.Digest()}
	var lin weights.Linear
	var err error
	if vt.View().DType() == jnf.F8E4 {
		st, ok := l.tensor(weights.ScaleName(name), nil, false)
		if !ok {
			return nil
		}
		lin, err = weights.BlockLinear(vt, st)
		key.Scale = st.Digest()
	} else {
		lin, err = weights.PlainLinear(vt.View())
	}
	if err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return nil
	}
	w := new(backend.Weight)
	// The shape and element count are checked now, so that a bad tensor is
	// reported in load order whatever the upload order.
	if err := w.Host.InitLinear(lin, rows, cols); err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return nil
	}
	l.mats = append(l.mats, pendingMat{w: w, key: key, lin: lin, rows: rows, cols: cols, use: use})
	return w
}

// use changes the Use of an already fetched matrix.
func (l *loader) use(w *backend.Weight, use backend.Use) {
	for i := range l.mats {
		if l.mats[i].w == w {
			l.mats[i].use = use
		}
	}
}

// vec fetches a vector (any shape) widened to float32, to be copied into
// *dst.
func (l *loader) vec(dst *backend.Buf, name string, shape ...int) []float32 {
	v, _, ok := l.fetch(name, shape...)
	if !ok {
		return nil
	}
	f, err := backend.Vector(v)
	if err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return nil
	}
	l.vecs = append(l.vecs, pendingVec{dst: dst, name: name, f: f})
	return f
}

// norm fetches the effective RMSNorm scale: w, or float32(1+w) for the
// zero-centred norms of Qwen3.5.
func (l *loader) norm(dst *backend.Buf, name string, n int) {
	f := l.vec(dst, name, n)
	if l.offset {
		for i, w := range f {
			f[i] = 1 + w
		}
	}
}

func (l *loader) attention(c *hf.Config, p string) *attnWeights {
	H, hd := c.Hidden, c.HeadDim
	a := &attnWeights{gated: c.Arch == hf.Qwen35MoE}
	qRows := c.Heads * hd
	if a.gated {
		qRows *= 2
	}
	a.q = l.mat(p+"q_proj.weight", qRows, H, backend.UseMatMul)
	a.k = l.mat(p+"k_proj.weight", c.KVHeads*hd, H, backend.UseMatMul)
	a.v = l.mat(p+"v_proj.weight", c.KVHeads*hd, H, backend.UseMatMul)
	a.o = l.mat(p+"o_proj.weight", H, c.Heads*hd, backend.UseMatMul)
	l.norm(&a.qNorm, p+"q_norm.weight", hd)
	l.norm(&a.kNorm, p+"k_norm.weight", hd)
	return a
}

func (l *loader) deltaNet(c *hf.Config, p string) *gdnWeights {
	H := c.Hidden
	nv, dv := c.LinearValueHeads, c.LinearValueDim
	C := c.ConvDim()
	g := &gdnWeights{}
	g.qkv = l.mat(p+"in_proj_qkv.weight", C, H, backend.UseMatMul)
	g.z = l.mat(p+"in_proj_z.weight", nv*dv, H, backend.UseMatMul)
	g.b = l.mat(p+"in_proj_b.weight", nv, H, backend.UseMatMul)
	g.a = l.mat(p+"in_proj_a.weight", nv, H, backend.UseMatMul)
	l.vec(&g.conv, p+"conv1d.weight", C, 1, c.ConvKernel)
	l.vec(&g.dtBias, p+"dt_bias", nv)
	l.vec(&g.aLog, p+"A_log", nv)
	l.vec(&g.norm, p+"norm.weight", dv)
	g.out = l.mat(p+"out_proj.weight", H, nv*dv, backend.UseMatMul)
	return g
}

func (l *loader) mlp(p string, I, H int) *mlpWeights {
	return &mlpWeights{
		gate: l.mat(p+"gate_proj.weight", I, H, backend.UseMatMul),
		up:   l.mat(p+"up_proj.weight", I, H, backend.UseMatMul),
		down: l.mat(p+"down_proj.weight", H, I, backend.UseMatMul),
	}
}

// bind checks a routed expert the source returned for layer l, index e —
// that it is the one asked for, of this model, with the configured shapes —
// and makes x view its gate, up and down projections in place.
func (m *Model) bind(l, e int, ve weights.VerifiedExpert, x *backend.Expert) error {
	if err := m.checkExpert(l, e, ve); err != nil {
		return err
	}
	I, H := m.cfg.MoEIntermediate, m.cfg.Hidden
	if err := backend.ViewExpert(x, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), I, H); err != nil {
		return fmt.Errorf("engine: layer %d expert %d: %w", l, e, err)
	}
	return nil
}

// checkExpert checks that ve is expert e of layer l of this model, with the
// configured shapes and dtypes.
func (m *Model) checkExpert(l, e int, ve weights.VerifiedExpert) error {
	if id := ve.ID(); id.Layer != l || id.Expert != e {
		return fmt.Errorf("engine: asked for layer %d expert %d, got %s", l, e, id)
	}
	if r := ve.Root(); !r.Equal(m.root) {
		return fmt.Errorf("engine: layer %d expert %d comes from the checkpoint with root %s, the model is %s", l, e, r.Hex(), m.root.Hex())
	}
	I, H := m.cfg.MoEIntermediate, m.cfg.Hidden
	parts := [3]struct {
		l          weights.Linear
		what       string
		rows, cols int
	}{{ve.Gate(), "gate", I, H}, {ve.Up(), "up", I, H}, {ve.Down(), "down", H, I}}
	for _, p := range parts {
		if err := checkShape(p.l.Values(), []int{p.rows, p.cols}, p.l.Quantized()); err != nil {
			return fmt.Errorf("engine: layer %d expert %d %s: %w", l, e, p.what, err)
		}
	}
	return nil
}
