// Package ledger records what one generation (a session, a request) did
// with the model: which routed experts it used and where each came from,
// how many bytes were hashed to verify them, the model's own routing (which
// experts, with which weights, for every token and MoE layer, committed as a
// hash chain), the logits chain and the token transcript. The engine writes
// to a Ledger; run reports (package attest) read its Summary. It is pure: no
// I/O, no engine, no CUDA.
//
// # Routing trace
//
// The routing digest commits to every routing decision in a canonical
// order — by token position, then MoE layer — whatever the prefill was
// split into:
//
//	r₀ = SHA-256("tarfa-routing-v1\n" ‖ model root (32 bytes))
//	r  ← SHA-256(r ‖ u32 position ‖ u32 layer ‖ u32 k ‖ k × (u32 expert ‖ u32 weight as IEEE-754 binary32 bits))
//
// (little-endian), for every position of the sequence in increasing order
// and, within a position, every MoE layer in increasing order; the slots in
// the model's top-k order. A replay on the same model re-derives it bit for
// bit. k must be the configuration's num_experts_per_tok in every entry; the
// ledger counts each layer's k so a report can state it (KPerLayer).
//
// # Logits chain
//
// The logits chain is golden's (package golden): c₀ = SHA-256("tarfa-golden-v1\n" ‖ root ‖ prompt tokens as
// u32), cⱼ₊₁ = SHA-256(cⱼ ‖ logits of step j as binary32), so a run report
// and a golden record of the same run carry the same chain head.
package ledger

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
)

// Tier says where a routed expert's verified bytes came from for one use.
type Tier string

const (
	// TierStorage: read from the JNF file and hashed for this use.
	TierStorage Tier = "storage"
	// TierRAM: a resident copy verified when it was read (and re-checked by
	// scrubbing), kept in host memory.
	TierRAM Tier = "ram"
	// TierDevice: a resident copy in an accelerator's memory.
	TierDevice Tier = "device"
)

// ExpertKey names one routed expert.
type ExpertKey struct{ Layer, Expert int }

// ExpertUse is what one ledger saw of one routed expert.
type ExpertUse struct {
	Layer  int            `json:"layer"`
	Expert int            `json:"expert"`
	Digest jnf.Digest     `json:"digest"` // the manifest's BLAKE3 of its record
	Tokens int64          `json:"tokens"` // token slots routed to it
	Uses   map[Tier]int64 `json:"uses"`   // fetches by where the bytes came from
}

// Ledger records one generation. It is safe for concurrent use (a backend
// may report expert fetches from several goroutines, and Summary may be
// called from any goroutine at any time), but routing must be reported by
// one goroutine, chunk by chunk, and so must the transcript (Prompt, Step).
//
// Step hashes its logits into the chain on a goroutine of its own, off the
// caller's critical path; at most one such hash is in flight per ledger,
// and whatever reads or extends the chain (the next Step, Prompt, Summary)
// waits for it first.
type Ledger struct {
	// mu guards the fields below up to chainMu, but for route and chunk,
	// which only the goroutine reporting routing touches.
	mu sync.Mutex

	root   [32]byte
	topK   int
	mode   string
	start  time.Time
	layers int

	experts map[ExpertKey]*ExpertUse
	hashed  map[jnf.Alg]int64
	tensors int

	// routing
	route     hash.Hash
	routeHead [32]byte
	routed    int64 // (position, layer) entries committed
	kCount    []map[int]int64
	chunk     *pendingChunk // &pc during a chunk, else nil
	pc        pendingChunk  // reused chunk by chunk (its buffers too)
	routeBuf  []byte        // EndChunk's entry encoding, reused

	timings map[string]time.Duration

	// The transcript and the logits chain. chainMu guards them; Step locks
	// it and hands it to the goroutine that hashes the step's logits, which
	// unlocks it once chain includes them, so whoever locks it next waits
	// for that hash (and only for it: the rest of the ledger stays under
	// mu).
	chainMu   sync.Mutex
	prompt    []int
	generated []int
	chain     [32]byte
	logits    []float32 // Step's copy of its logits, for the pending hash
	hashStep  func()    // l.hashLogits, made once: a go statement on it allocates nothing
	chainer   golden.Chainer

	// onRoute, if set, sees every committed routing entry (SetRouteObserver).
	onRoute func(pos, layer int, experts []int32)
}

// SetRouteObserver makes EndChunk call f with every routing entry it
// commits, in the chain's order (position, then layer) — for routing traces.
// experts is only valid during the call.
func (l *Ledger) SetRouteObserver(f func(pos, layer int, experts []int32)) {
	if l != nil {
		l.onRoute = f
	}
}

// pendingChunk buffers one Forward chunk's routing until EndChunk, so that
// entries are committed by position, then layer.
type pendingChunk struct {
	pos0, T int
	layers  []pendingLayer
}

type pendingLayer struct {
	layer, k int
	idx      []int32
	w        []float32
}

// Mode names. A run is exact with respect to the checkpoint it ran, and
// says which precision that checkpoint is: "exact" is a BF16 (or F32)
// checkpoint, "exact, fp8 checkpoint" the publisher's own block-FP8 one
// computed by the canonical block-FP8 product — never just "exact". The
// int4 fast mode will be labelled "fast" everywhere it shows.
const (
	ModeExact    = "exact"
	ModeExactFP8 = "exact, fp8 checkpoint"
	ModeFast     = "fast"
)

// ModeOf is the mode of an exact run of a checkpoint: ModeExactFP8 for a
// block-FP8 one, else ModeExact.
func ModeOf(blockFP8 bool) string {
	if blockFP8 {
		return ModeExactFP8
	}
	return ModeExact
}

// New starts a ledger for a model with the given manifest root, number of
// layers and configured top-k, in the given mode.
func New(root jnf.Digest, layers, topK int, mode string) *Ledger {
	l := &Ledger{root: root.Sum, topK: topK, mode: mode, start: time.Now(), layers: layers,
		experts: map[ExpertKey]*ExpertUse{}, hashed: map[jnf.Alg]int64{}, route: sha256.New(),
		kCount: make([]map[int]int64, layers), timings: map[string]time.Duration{}}
	l.route.Write([]byte("tarfa-routing-v1\n"))
	l.route.Write(l.root[:])
	l.route.Sum(l.routeHead[:0])
	return l
}

// BeginChunk starts a Forward chunk of T tokens at positions pos0….
func (l *Ledger) BeginChunk(pos0, T int) {
	if l == nil {
		return
	}
	l.pc.pos0, l.pc.T, l.pc.layers = pos0, T, l.pc.layers[:0]
	l.chunk = &l.pc
}

// Route records a MoE layer's routing for the current chunk: idx and w are
// T×k (expert ids and combine weights in slot order). The slices are copied.
func (l *Ledger) Route(layer int, idx []int32, w []float32, k int) {
	if l == nil || l.chunk == nil {
		return
	}
	c := l.chunk
	// The chunk's layer entries and their buffers are reused from the last
	// chunk: decoding allocates nothing here in steady state.
	n := len(c.layers)
	if n < cap(c.layers) {
		c.layers = c.layers[:n+1]
	} else {
		c.layers = append(c.layers, pendingLayer{})
	}
	pl := &c.layers[n]
	pl.layer, pl.k = layer, k
	pl.idx = append(pl.idx[:0], idx[:c.T*k]...)
	pl.w = append(pl.w[:0], w[:c.T*k]...)
}

// EndChunk commits the current chunk's routing to the chain: every position
// in order, within it every MoE layer in order.
func (l *Ledger) EndChunk() {
	if l == nil || l.chunk == nil {
		return
	}
	c := l.chunk
	l.chunk = nil
	slices.SortStableFunc(c.layers, func(a, b pendingLayer) int { return cmp.Compare(a.layer, b.layer) })
	b := l.routeBuf
	for t := range c.T {
		for _, pl := range c.layers {
			b = b[:0]
			b = binary.LittleEndian.AppendUint32(b, uint32(c.pos0+t))
			b = binary.LittleEndian.AppendUint32(b, uint32(pl.layer))
			b = binary.LittleEndian.AppendUint32(b, uint32(pl.k))
			for s := range pl.k {
				b = binary.LittleEndian.AppendUint32(b, uint32(pl.idx[t*pl.k+s]))
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(pl.w[t*pl.k+s]))
			}
			l.mu.Lock() // Summary reads routeHead, routed and kCount
			l.route.Reset()
			l.route.Write(l.routeHead[:])
			l.route.Write(b)
			l.route.Sum(l.routeHead[:0])
			l.routed++
			if pl.layer >= 0 && pl.layer < len(l.kCount) {
				if l.kCount[pl.layer] == nil {
					l.kCount[pl.layer] = map[int]int64{}
				}
				l.kCount[pl.layer][pl.k]++
			}
			l.mu.Unlock()
			if l.onRoute != nil {
				l.onRoute(c.pos0+t, pl.layer, pl.idx[t*pl.k:(t+1)*pl.k])
			}
		}
	}
	l.routeBuf = b
}

// AbortChunk drops a chunk that did not complete (an error or an
// interrupt): a session that failed is not continued.
func (l *Ledger) AbortChunk() {
	if l != nil {
		l.chunk = nil
	}
}

// UseExpert records one fetch of a routed expert for n token slots: where
// its verified bytes came from and how many bytes were hashed for it now
// (0 for a resident copy).
func (l *Ledger) UseExpert(layer, expert int, digest jnf.Digest, tier Tier, slots int, hashedBLAKE3 int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ExpertKey{layer, expert}
	u := l.experts[k]
	if u == nil {
		u = &ExpertUse{Layer: layer, Expert: expert, Digest: digest, Uses: map[Tier]int64{}}
		l.experts[k] = u
	}
	u.Tokens += int64(slots)
	u.Uses[tier]++
	l.hashed[jnf.BLAKE3] += hashedBLAKE3
}

// Hashed adds bytes hashed with an algorithm outside expert fetches (the
// non-expert tensors verified when the model was loaded, auxiliary files).
func (l *Ledger) Hashed(alg jnf.Alg, n int64, tensors int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.hashed[alg] += n
	l.tensors += tensors
	l.mu.Unlock()
}

// Prompt records the prompt tokens and starts the logits chain (after the
// pending step's hash, if any).
func (l *Ledger) Prompt(tokens []int) {
	if l == nil {
		return
	}
	l.chainMu.Lock()
	defer l.chainMu.Unlock()
	l.prompt = append([]int(nil), tokens...)
	l.chain = golden.ChainStart(l.root, tokens)
}

// Step records one generation step: the logits the token was chosen from
// and the token. It copies logits (the caller may reuse the slice as soon
// as Step returns) and hashes the copy into the chain on a new goroutine,
// which ends with the hash; it first waits for the previous step's hash,
// so one logits-sized buffer serves every step.
func (l *Ledger) Step(logits []float32, token int) {
	if l == nil {
		return
	}
	l.chainMu.Lock() // unlocked by the hash below
	l.generated = append(l.generated, token)
	l.logits = append(l.logits[:0], logits...)
	if l.hashStep == nil {
		l.hashStep = l.hashLogits
	}
	go l.hashStep()
}

// hashLogits is Step's pending hash: it extends the chain with l.logits
// and hands chainMu back.
func (l *Ledger) hashLogits() {
	l.chain = l.chainer.Next(l.chain, l.logits)
	l.chainMu.Unlock()
}

// transcript is the prompt, the generated tokens and the head of the
// logits chain over them, once the pending step's hash is done.
func (l *Ledger) transcript() (prompt, generated []int, chain [32]byte) {
	l.chainMu.Lock()
	defer l.chainMu.Unlock()
	return append([]int{}, l.prompt...), append([]int{}, l.generated...), l.chain
}

// Time adds d to a named phase ("load", "prefill", "decode").
func (l *Ledger) Time(phase string, d time.Duration) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.timings[phase] += d
	l.mu.Unlock()
}

// Summary is a ledger's content, as a run report carries it.
type Summary struct {
	Mode           string             `json:"mode"`
	TopK           int                `json:"top_k"`
	PromptTokens   []int              `json:"prompt_tokens"`
	Generated      []int              `json:"generated"`
	LogitsChain    string             `json:"logits_chain"` // hex head of the logits chain
	Steps          int                `json:"steps"`
	RoutingDigest  string             `json:"routing_digest"` // hex r after the last entry
	RoutingEntries int64              `json:"routing_entries"`
	KPerLayer      []LayerK           `json:"k_per_layer"`
	Experts        []ExpertUse        `json:"experts"` // by layer, then expert
	BytesHashed    map[jnf.Alg]int64  `json:"bytes_hashed"`
	Tensors        int                `json:"tensors_verified"`
	Timings        map[string]float64 `json:"timings_s"`
	Wall           float64            `json:"wall_s"`
}

// LayerK is how often each k was used in one MoE layer.
type LayerK struct {
	Layer int           `json:"layer"`
	K     map[int]int64 `json:"k"` // k → (position) entries
}

// KExact reports whether every routing entry used the configured top-k.
func (s *Summary) KExact() bool {
	for _, lk := range s.KPerLayer {
		for k := range lk.K {
			if k != s.TopK {
				return false
			}
		}
	}
	return true
}

// Summary returns the ledger's content so far. It waits for the pending
// step's hash, if any (see Step).
func (l *Ledger) Summary() Summary {
	prompt, generated, chain := l.transcript()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Summary{Mode: l.mode, TopK: l.topK, PromptTokens: prompt, Generated: generated,
		LogitsChain: hex.EncodeToString(chain[:]), Steps: len(generated), RoutingDigest: hex.EncodeToString(l.routeHead[:]),
		RoutingEntries: l.routed, BytesHashed: map[jnf.Alg]int64{}, Tensors: l.tensors, Timings: map[string]float64{},
		Wall: time.Since(l.start).Seconds(), KPerLayer: []LayerK{}, Experts: []ExpertUse{}}
	for layer, m := range l.kCount {
		if m == nil {
			continue
		}
		lk := LayerK{Layer: layer, K: map[int]int64{}}
		for k, n := range m {
			lk.K[k] = n
		}
		s.KPerLayer = append(s.KPerLayer, lk)
	}
	for _, u := range l.experts {
		c := *u
		c.Uses = map[Tier]int64{}
		for t, n := range u.Uses {
			c.Uses[t] = n
		}
		s.Experts = append(s.Experts, c)
	}
	sort.Slice(s.Experts, func(i, j int) bool {
		a, b := s.Experts[i], s.Experts[j]
		return a.Layer < b.Layer || a.Layer == b.Layer && a.Expert < b.Expert
	})
	for a, n := range l.hashed {
		s.BytesHashed[a] = n
	}
	for p, d := range l.timings {
		s.Timings[p] = d.Seconds()
	}
	return s
}

// RoutingStart is r₀ for a model root (for verifiers).
func RoutingStart(root [32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("tarfa-routing-v1\n"))
	h.Write(root[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// String is a one-line digest of the summary, for logs.
func (s *Summary) String() string {
	return fmt.Sprintf("%s mode, %d prompt + %d generated tokens, routing %s… (%d entries), logits chain %s…, %d experts",
		s.Mode, len(s.PromptTokens), len(s.Generated), s.RoutingDigest[:12], s.RoutingEntries, s.LogitsChain[:12], len(s.Experts))
}
