package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/engine/backend"
	"github.com/tarfa-ai/tarfa/engine/canon"
	"github.com/tarfa-ai/tarfa/engine/cpu"
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
	// Backend overrides the default CPU backend (then Threads is ignored).
	Backend backend.Backend
	// CheckExperts makes Load fetch every routed expert once and check its
	// shapes and dtypes. Otherwise experts are checked each time they are
	// fetched for use (always).
	CheckExperts bool
	// Experts supplies routed experts (the streaming hierarchy, package
	// tier). Nil: read them from the checkpoint as they are needed, keeping
	// up to ExpertCacheBytes of them.
	Experts ExpertSource
	// ExpertCacheBytes keeps up to this many bytes of verified experts in
	// memory (least recently used first out), so that a hot expert is not
	// re-read and re-hashed by the attestation layer for every token.
	// 0 fetches from Weights on every use; < 0 caches without limit.
	ExpertCacheBytes int64

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

	embed, head *backend.Mat
	finalNorm   []float32
	layers      []layer
	invFreq     []float32 // RoPE inverse frequencies (nil without full-attention layers)
	attnScale   float32
	qkScale     float32 // Gated DeltaNet query scale 1/sqrt(dk)
	offsetNorm  bool    // Qwen3.5: RMSNorm scale is 1+w

	tokens, forwards atomic.Int64
	evals, fetches   []atomic.Int64 // per layer
	cacheHits        atomic.Int64
	experts          ExpertSource
	firstMoE         int          // the first MoE layer (−1: none)
	cache            *expertCache // of the default source; nil: no cache
	// resident are the verified tensors the model views in place, for Scrub.
	resident []weights.VerifiedTensor
}

type layer struct {
	index    int
	kind     hf.LayerType
	inNorm   []float32 // effective RMSNorm scales
	postNorm []float32
	attn     *attnWeights
	gdn      *gdnWeights
	// MoE (sparse) or dense MLP
	sparse     bool
	nextMoE    int // the next MoE layer of the same token (−1: none)
	router     *backend.Mat
	dense      *mlpWeights
	shared     *mlpWeights
	sharedGate *backend.Mat
}

type attnWeights struct {
	q, k, v, o   *backend.Mat
	qNorm, kNorm []float32
	gated        bool // Qwen3.5: q_proj rows are per head [query | gate]
}

type gdnWeights struct {
	qkv, z, b, a, out *backend.Mat
	conv              []float32 // C×Kc
	aLog, dtBias      []float32 // nv
	norm              []float32 // dv, plain scale
}

type mlpWeights struct{ gate, up, down *backend.Mat }

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
	// ExpertCacheHits counts expert uses served by the expert cache.
	ExpertCacheHits int64
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
// non-expert tensors it views in place and the cached experts — against
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
	for _, e := range m.cache.snapshot() {
		if err := e.Recheck(); err != nil {
			return n, fmt.Errorf("engine: scrub: %w", err)
		}
		n += e.Bytes()
	}
	return n, nil
}

// Config returns the model's configuration.
func (m *Model) Config() *hf.Config { return m.cfg }

// Backend returns the backend the model runs on.
func (m *Model) Backend() backend.Backend { return m.be }

// Stats returns a snapshot of the counters.
func (m *Model) Stats() Stats {
	s := Stats{Tokens: m.tokens.Load(), Forwards: m.forwards.Load(), TopK: m.cfg.TopK, ExpertCacheHits: m.cacheHits.Load()}
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
	be := opt.Backend
	if be == nil {
		be = cpu.New(opt.Threads)
	}
	m := &Model{cfg: cfg, root: root, w: w, be: be, offsetNorm: cfg.Arch == hf.Qwen35MoE}
	m.experts = opt.Experts
	if m.experts == nil {
		var cache *expertCache
		if opt.ExpertCacheBytes != 0 {
			cache = newExpertCache(opt.ExpertCacheBytes)
		}
		m.cache = cache
		m.experts = &directSource{w: w, cache: cache}
	}
	m.evals = make([]atomic.Int64, cfg.Layers)
	m.fetches = make([]atomic.Int64, cfg.Layers)
	ld := &loader{ctx: opt.ctx, w: w, root: root, offset: m.offsetNorm}
	if ld.ctx == nil {
		ld.ctx = context.Background()
	}
	H, V := cfg.Hidden, cfg.Vocab

	m.embed = ld.mat("model.embed_tokens.weight", V, H)
	m.finalNorm = ld.norm("model.norm.weight", H)
	if cfg.Tied {
		m.head = m.embed
	} else {
		m.head = ld.mat("lm_head.weight", V, H)
	}
	hasFull := false
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		L := &m.layers[i]
		L.index, L.kind, L.sparse = i, cfg.LayerTypes[i], cfg.Sparse[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		L.inNorm = ld.norm(p+"input_layernorm.weight", H)
		L.postNorm = ld.norm(p+"post_attention_layernorm.weight", H)
		switch L.kind {
		case hf.FullAttention:
			hasFull = true
			L.attn = ld.attention(cfg, p+"self_attn.")
		case hf.LinearAttention:
			L.gdn = ld.deltaNet(cfg, p+"linear_attn.")
		}
		if L.sparse {
			L.router = ld.mat(p+"mlp.gate.weight", cfg.Experts, H)
			if cfg.SharedIntermediate > 0 {
				L.shared = ld.mlp(p+"mlp.shared_expert.", cfg.SharedIntermediate, H)
				L.sharedGate = ld.mat(p+"mlp.shared_expert_gate.weight", 1, H)
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
			return nil, err
		}
		m.invFreq = inv
		m.attnScale = float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	}
	if cfg.LinearKeyDim > 0 {
		m.qkScale = float32(1 / math.Sqrt(float64(cfg.LinearKeyDim)))
	}
	if opt.CheckExperts {
		var mats [3]backend.Mat
		for l := range m.layers {
			if !m.layers[l].sparse {
				continue
			}
			for e := 0; e < cfg.Experts; e++ {
				if err := ld.ctx.Err(); err != nil {
					return nil, err
				}
				ve, err := w.Expert(l, e)
				if err != nil {
					return nil, fmt.Errorf("engine: layer %d expert %d: %w", l, e, err)
				}
				if err := m.bind(l, e, ve, &mats); err != nil {
					return nil, err
				}
			}
		}
	}
	return m, nil
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

// loader fetches tensors and keeps the first error.
type loader struct {
	ctx    context.Context
	w      source
	root   jnf.Digest
	offset bool
	err    error
	kept   []weights.VerifiedTensor
}

func (l *loader) fetch(name string, shape ...int) (weights.View, bool) {
	if l.err != nil {
		return weights.View{}, false
	}
	if err := l.ctx.Err(); err != nil {
		l.err = err
		return weights.View{}, false
	}
	vt, err := l.w.Tensor(name)
	if err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return weights.View{}, false
	}
	if got := vt.Name(); got != name {
		l.err = fmt.Errorf("engine: asked for tensor %s, got %s", name, got)
		return weights.View{}, false
	}
	if r := vt.Root(); !r.Equal(l.root) {
		l.err = fmt.Errorf("engine: tensor %s comes from the checkpoint with root %s, the model is %s", name, r.Hex(), l.root.Hex())
		return weights.View{}, false
	}
	v := vt.View()
	if err := checkShape(v, shape); err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return weights.View{}, false
	}
	l.kept = append(l.kept, vt)
	return v, true
}

func checkShape(v weights.View, want []int) error {
	ok := v.Dims() == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = v.Dim(i) == int64(want[i])
	}
	if !ok {
		return fmt.Errorf("tensor %s: shape %v, want %v", v.Name(), v.Shape(), slices.Clone(want))
	}
	if v.DType() != jnf.BF16 && v.DType() != jnf.F32 {
		return fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", v.Name(), v.DType())
	}
	return nil
}

func (l *loader) mat(name string, rows, cols int) *backend.Mat {
	v, ok := l.fetch(name, rows, cols)
	if !ok {
		return nil
	}
	m := new(backend.Mat)
	if err := m.Init(v, rows, cols); err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return nil
	}
	return m
}

func (l *loader) vec(name string, shape ...int) []float32 {
	v, ok := l.fetch(name, shape...)
	if !ok {
		return nil
	}
	f, err := backend.Vector(v)
	if err != nil {
		l.err = fmt.Errorf("engine: %w", err)
		return nil
	}
	return f
}

// norm returns the effective RMSNorm scale: w, or float32(1+w) for the
// zero-centred norms of Qwen3.5.
func (l *loader) norm(name string, n int) []float32 {
	f := l.vec(name, n)
	if l.offset {
		for i, w := range f {
			f[i] = 1 + w
		}
	}
	return f
}

func (l *loader) attention(c *hf.Config, p string) *attnWeights {
	H, hd := c.Hidden, c.HeadDim
	a := &attnWeights{gated: c.Arch == hf.Qwen35MoE}
	qRows := c.Heads * hd
	if a.gated {
		qRows *= 2
	}
	a.q = l.mat(p+"q_proj.weight", qRows, H)
	a.k = l.mat(p+"k_proj.weight", c.KVHeads*hd, H)
	a.v = l.mat(p+"v_proj.weight", c.KVHeads*hd, H)
	a.o = l.mat(p+"o_proj.weight", H, c.Heads*hd)
	a.qNorm = l.norm(p+"q_norm.weight", hd)
	a.kNorm = l.norm(p+"k_norm.weight", hd)
	return a
}

func (l *loader) deltaNet(c *hf.Config, p string) *gdnWeights {
	H := c.Hidden
	nv, dv := c.LinearValueHeads, c.LinearValueDim
	C := c.ConvDim()
	g := &gdnWeights{}
	g.qkv = l.mat(p+"in_proj_qkv.weight", C, H)
	g.z = l.mat(p+"in_proj_z.weight", nv*dv, H)
	g.b = l.mat(p+"in_proj_b.weight", nv, H)
	g.a = l.mat(p+"in_proj_a.weight", nv, H)
	g.conv = l.vec(p+"conv1d.weight", C, 1, c.ConvKernel)
	g.dtBias = l.vec(p+"dt_bias", nv)
	g.aLog = l.vec(p+"A_log", nv)
	g.norm = l.vec(p+"norm.weight", dv)
	g.out = l.mat(p+"out_proj.weight", H, nv*dv)
	return g
}

func (l *loader) mlp(p string, I, H int) *mlpWeights {
	return &mlpWeights{
		gate: l.mat(p+"gate_proj.weight", I, H),
		up:   l.mat(p+"up_proj.weight", I, H),
		down: l.mat(p+"down_proj.weight", H, I),
	}
}

// bind checks a routed expert the source returned for layer l, index e —
// that it is the one asked for, of this model, with the configured shapes —
// and makes mats[0..2] view its gate, up and down projections.
func (m *Model) bind(l, e int, ve weights.VerifiedExpert, mats *[3]backend.Mat) error {
	if id := ve.ID(); id.Layer != l || id.Expert != e {
		return fmt.Errorf("engine: asked for layer %d expert %d, got %s", l, e, id)
	}
	if r := ve.Root(); !r.Equal(m.root) {
		return fmt.Errorf("engine: layer %d expert %d comes from the checkpoint with root %s, the model is %s", l, e, r.Hex(), m.root.Hex())
	}
	I, H := m.cfg.MoEIntermediate, m.cfg.Hidden
	parts := [3]struct {
		v          weights.View
		what       string
		rows, cols int
	}{{ve.Gate(), "gate", I, H}, {ve.Up(), "up", I, H}, {ve.Down(), "down", H, I}}
	for i, p := range parts {
		if err := checkShape(p.v, []int{p.rows, p.cols}); err != nil {
			return fmt.Errorf("engine: layer %d expert %d %s: %w", l, e, p.what, err)
		}
		if err := mats[i].Init(p.v, p.rows, p.cols); err != nil {
			return fmt.Errorf("engine: layer %d expert %d %s: %w", l, e, p.what, err)
		}
	}
	return nil
}
