package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Generator is the parameter set of a synthetic trace, recorded in its
// header.
//
// # The zipf generator
//
// Each layer has its own popularity order of its experts: a random
// permutation drawn from Seed (the "model"), so the hot experts differ from
// layer to layer. The expert of popularity rank r (1-based) has weight
// r^−S. At every token, each layer picks TopK distinct experts:
//
//  1. temporal reuse: each expert the layer used at the previous token is
//     kept with probability Reuse (independently);
//  2. the remaining slots are drawn by weight without replacement
//     (successive draws among the experts not yet chosen, as a top-k of
//     noisy router scores would).
//
// With Shift > 0 every layer draws a new popularity permutation every Shift
// tokens (a change of topic; what a persistent heat ledger cannot know).
// Token draws come from Stream, so two traces with the same Seed and
// different Streams are two runs of one model (a heat ledger of one helps
// the other); the same Seed and Stream give the same trace.
//
// Reuse is on top of the chance reuse that popularity alone gives (with
// Reuse = 0 a uniform layer repeats TopK/Experts of its experts on average);
// Trace.Stats measures the total.
//
// # Parameters from published routing studies
//
// Random-weight models route with no locality, so these parameters stand
// in for a real model's routing; BENCHMARKS.md lists the settings used and
// labels every result synthetic. What the studies report:
//
//   - Qwen3-30B-A3B (128 experts, top-8) routes close to uniform: 90% of
//     the routing mass takes 51% of a layer's experts on diverse text and 45%
//     on one domain (Python), the hottest expert has 4.3% / 6.3% of it
//     (llama-imatrix counts, "Routing De-risk", gpu-container handbook,
//     mcp-tool-shop-org.github.io/gpu-container/handbook/derisk/). No single
//     Zipf exponent fits both figures: S ≈ 0.5 matches the hottest expert's
//     share, S ≈ 1.1 the 90% coverage.
//   - Local routing consistency varies widely between models; models with
//     shared experts (Qwen3.5-122B-A10B has one) show less of it, and caches
//     of about twice the active experts balance hit rate and size (Liang et
//     al., "Not All Models Suit Expert Offloading", arXiv:2505.16056, ICLR
//     2026).
//   - Consecutive tokens often share experts in Mixtral 8x7B, more than
//     random at deeper layers (Jiang et al., "Mixtral of Experts",
//     arXiv:2401.04088, §5); MoE-Infinity (Xue et al., arXiv:2401.14361)
//     finds a few experts reused heavily during decoding at batch size one;
//     plain LRU caching gets roughly 40–60% hits on Mixtral with half the
//     experts of a layer cached (Eliseev and Mazur, arXiv:2312.17238).
//   - SpecMD (Hoang et al., arXiv:2602.03921) finds that expert accesses do
//     not follow the temporal locality LRU and LFU assume, and proposes a
//     layer-aware eviction (Least-Stale).
//
// None of these gives a reuse probability directly, so Reuse spans a range
// (0 to 0.6) and one setting is fitted to the reference point,
// per-layer LRU at 90% hits with 40% of the experts resident.
type Generator struct {
	Name   string  `json:"name"`
	S      float64 `json:"s"`
	Reuse  float64 `json:"reuse"`
	Shift  int     `json:"shift"`
	Seed   uint64  `json:"seed"`
	Stream uint64  `json:"stream"`
}

// MaxZipfS bounds the Zipf exponent.
const MaxZipfS = 4

// Check validates the parameters.
func (g *Generator) Check() error {
	if g.Name != "zipf" {
		return fmt.Errorf("name %q: the generator is \"zipf\"", g.Name)
	}
	if !finite(g.S) || g.S < 0 || g.S > MaxZipfS {
		return fmt.Errorf("s %v: want 0 to %d", g.S, MaxZipfS)
	}
	if !finite(g.Reuse) || g.Reuse < 0 || g.Reuse > 1 {
		return fmt.Errorf("reuse %v: want a probability, 0 to 1", g.Reuse)
	}
	if g.Shift < 0 {
		return fmt.Errorf("shift %d is negative", g.Shift)
	}
	return nil
}

func (g *Generator) String() string {
	return fmt.Sprintf("zipf(s=%g, reuse=%g, shift=%d, seed=%d, stream=%d)", g.S, g.Reuse, g.Shift, g.Seed, g.Stream)
}

// UnmarshalJSON is not defined: jnf.DecodeJSON checks Generator's keys.

func marshalHeader(h Header) ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("trace: header: %w", err)
	}
	return b, nil
}

// ParseSynthetic parses a generator spec, e.g.
// "zipf:s=0.8,reuse=0.5,shift=0,seed=1,stream=1". s and reuse are required;
// shift defaults to 0, seed and stream to 1.
func ParseSynthetic(spec string) (Generator, error) {
	name, args, ok := strings.Cut(spec, ":")
	if !ok || name != "zipf" {
		return Generator{}, fmt.Errorf("synthetic trace %q: want zipf:s=S,reuse=P[,shift=N,seed=N,stream=N]", spec)
	}
	g := Generator{Name: name, Seed: 1, Stream: 1}
	seen := map[string]bool{}
	for _, kv := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Generator{}, fmt.Errorf("synthetic trace %q: %q is not key=value", spec, kv)
		}
		if seen[k] {
			return Generator{}, fmt.Errorf("synthetic trace %q: %s given twice", spec, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "s":
			g.S, err = strconv.ParseFloat(v, 64)
		case "reuse":
			g.Reuse, err = strconv.ParseFloat(v, 64)
		case "shift":
			g.Shift, err = strconv.Atoi(v)
		case "seed":
			g.Seed, err = strconv.ParseUint(v, 10, 64)
		case "stream":
			g.Stream, err = strconv.ParseUint(v, 10, 64)
		default:
			return Generator{}, fmt.Errorf("synthetic trace %q: unknown parameter %q (s, reuse, shift, seed, stream)", spec, k)
		}
		if err != nil {
			return Generator{}, fmt.Errorf("synthetic trace %q: %s: %w", spec, k, err)
		}
	}
	for _, k := range []string{"s", "reuse"} {
		if !seen[k] {
			return Generator{}, fmt.Errorf("synthetic trace %q: %s is required", spec, k)
		}
	}
	if err := g.Check(); err != nil {
		return Generator{}, fmt.Errorf("synthetic trace %q: %w", spec, err)
	}
	return g, nil
}

// MaxSynthesize bounds the size of a synthesized trace: tokens × layers ×
// top_k experts.
const MaxSynthesize = 1 << 28

// Synthesize draws a trace of tokens tokens for a model of the given shape.
// The header says source "synthetic" and carries g.
func Synthesize(g Generator, layers, experts, topK, tokens int) (*Trace, error) {
	t, err := New(Header{Format: Format, Version: Version, Layers: layers, Experts: experts, TopK: topK,
		Source: Synthetic, Generator: &g,
		Note: "synthetic routing (per-layer Zipf popularity, temporal reuse), not a measured model's"})
	if err != nil {
		return nil, err
	}
	if err := checkSize(layers, topK, tokens); err != nil {
		return nil, err
	}
	t.experts = make([]int32, 0, tokens*layers*topK)
	g.draw(layers, experts, topK, tokens, func(e int) { t.experts = append(t.experts, int32(e)) }, nil)
	t.tokens = tokens
	return t, nil
}

func checkSize(layers, topK, tokens int) error {
	if tokens < 1 || int64(tokens)*int64(layers)*int64(topK) > MaxSynthesize {
		return fmt.Errorf("trace: %d tokens × %d layers × top-%d: want 1 to %d experts in all", tokens, layers, topK, MaxSynthesize)
	}
	return nil
}

// Popularity is the zipf generator's popularity order behind a synthetic
// trace: what the routing is drawn from, which a trace only shows through
// its samples.
type Popularity struct {
	// Weights[r] is the draw weight of the expert of rank r (0: the
	// heaviest), the same in every layer: round(2^40 · (r+1)^−S), at least 1.
	Weights []float64
	// Ranks[i][l·experts + e] is the rank of expert e of layer l in epoch
	// i: the tokens i·Shift to (i+1)·Shift − 1, or all tokens if Shift is 0.
	Ranks [][]int32
}

// MaxPopularity bounds a Popularity: epochs × layers × experts ranks.
const MaxPopularity = 1 << 24

// PopularityOf returns the popularity order of the trace
// Synthesize(g, layers, experts, topK, tokens) draws. It replays the whole
// draw: the orders after a shift come from the same random stream as the
// routing before it.
func PopularityOf(g Generator, layers, experts, topK, tokens int) (*Popularity, error) {
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("trace: generator: %w", err)
	}
	if layers < 1 || layers > MaxLayers || experts < 1 || experts > MaxExperts || topK < 1 || topK > min(MaxTopK, experts) {
		return nil, fmt.Errorf("trace: %d layers × %d experts, top-%d: want 1 to %d layers, 1 to %d experts, top-k 1 to min(%d, experts)", layers, experts, topK, MaxLayers, MaxExperts, MaxTopK)
	}
	if err := checkSize(layers, topK, tokens); err != nil {
		return nil, err
	}
	epochs := 1
	if g.Shift > 0 {
		epochs = (tokens + g.Shift - 1) / g.Shift
	}
	if int64(epochs)*int64(layers)*int64(experts) > MaxPopularity {
		return nil, fmt.Errorf("trace: popularity of %d epochs (%d tokens, shift %d) × %d layers × %d experts: over %d ranks", epochs, tokens, g.Shift, layers, experts, MaxPopularity)
	}
	p := &Popularity{Ranks: make([][]int32, 0, epochs)}
	for _, w := range zipfWeights(g.S, experts) {
		p.Weights = append(p.Weights, float64(w))
	}
	g.draw(layers, experts, topK, tokens, func(int) {}, func(rank [][]int32) {
		r := make([]int32, 0, layers*experts)
		for _, lr := range rank {
			r = append(r, lr...)
		}
		p.Ranks = append(p.Ranks, r)
	})
	return p, nil
}

// zipfWeights are the draw weights by rank, fixed point: rank r weighs
// round(2^40 · (r+1)^−s) ≥ 1.
func zipfWeights(s float64, experts int) []uint64 {
	w := make([]uint64, experts)
	for r := range w {
		w[r] = max(1, uint64(math.Round(math.Ldexp(math.Pow(float64(r+1), -s), 40))))
	}
	return w
}

// draw runs the zipf generator (see Generator): emit gets every expert
// drawn, in trace order; epoch, if not nil, the rank of every expert by
// layer (rank[l][e]) at the start of each epoch.
func (g *Generator) draw(layers, experts, topK, tokens int, emit func(e int), epoch func(rank [][]int32)) {
	model := pcg{rand.NewPCG(g.Seed, 0x6d6f64656c)}  // "model"
	stream := pcg{rand.NewPCG(g.Stream, 0x73747265)} // "stre"
	w := zipfWeights(g.S, experts)
	type layerState struct {
		perm []int32 // rank → expert
		tree fenwick
		prev []int
	}
	ls := make([]layerState, layers)
	rank := make([][]int32, layers) // expert → rank
	for l := range ls {
		ls[l].perm, rank[l] = make([]int32, experts), make([]int32, experts)
		model.perm(ls[l].perm)
		for r, e := range ls[l].perm {
			rank[l][e] = int32(r)
		}
		ls[l].tree = newFenwick(w)
	}
	if epoch != nil {
		epoch(rank)
	}
	set := make([]int, 0, topK)
	for tok := range tokens {
		if g.Shift > 0 && tok > 0 && tok%g.Shift == 0 {
			for l := range ls {
				stream.perm(ls[l].perm)
				for r, e := range ls[l].perm {
					rank[l][e] = int32(r)
				}
			}
			if epoch != nil {
				epoch(rank)
			}
		}
		for l := range ls {
			s, rk := &ls[l], rank[l]
			set = set[:0]
			for _, e := range s.prev {
				if stream.float() < g.Reuse {
					set = append(set, e)
				}
			}
			for _, e := range set {
				s.tree.add(int(rk[e]), -int64(w[rk[e]]))
			}
			for len(set) < topK {
				r := s.tree.find(stream.uint64n(s.tree.total))
				e := int(s.perm[r])
				set = append(set, e)
				s.tree.add(r, -int64(w[r]))
			}
			for _, e := range set {
				s.tree.add(int(rk[e]), int64(w[rk[e]]))
				emit(e)
			}
			s.prev = append(s.prev[:0], set...)
		}
	}
}

// pcg draws with fully specified arithmetic on a PCG source, so a trace
// depends only on its parameters.
type pcg struct{ *rand.PCG }

// uint64n is uniform in [0, n), n > 0, by rejection.
func (p pcg) uint64n(n uint64) uint64 {
	lim := -n % n // 2^64 mod n
	for {
		if x := p.Uint64(); x >= lim {
			return x % n
		}
	}
}

// float is uniform in [0, 1).
func (p pcg) float() float64 { return float64(p.Uint64()>>11) / (1 << 53) }

// perm fills a with a uniform random permutation of 0..len(a)-1.
func (p pcg) perm(a []int32) {
	for i := range a {
		a[i] = int32(i)
	}
	for i := len(a) - 1; i > 0; i-- {
		j := p.uint64n(uint64(i + 1))
		a[i], a[j] = a[j], a[i]
	}
}

// fenwick is a binary indexed tree of non-negative integer weights.
type fenwick struct {
	t     []uint64 // 1-based
	total uint64
	top   int // largest power of two ≤ n
}

func newFenwick(w []uint64) fenwick {
	f := fenwick{t: make([]uint64, len(w)+1), top: 1}
	for f.top*2 <= len(w) {
		f.top *= 2
	}
	for i, x := range w {
		f.add(i, int64(x))
	}
	return f
}

func (f *fenwick) add(i int, d int64) {
	f.total += uint64(d)
	for j := i + 1; j < len(f.t); j += j & -j {
		f.t[j] += uint64(d)
	}
}

// find returns the index i with prefix(i) ≤ u < prefix(i+1), for u < total.
func (f *fenwick) find(u uint64) int {
	pos := 0
	for step := f.top; step > 0; step /= 2 {
		if n := pos + step; n < len(f.t) && f.t[n] <= u {
			pos = n
			u -= f.t[n]
		}
	}
	return pos
}
