package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// MaxOracleWork bounds the trace the oracle policy and OnlineBound take:
// tokens × layers × experts × top-k, the terms of their work (a layer's
// probabilities cost about 0.25 ms for 256 experts, top-8; the largest
// trace takes minutes a replay).
const MaxOracleWork = 1 << 31

// RoutingOf is the routing model of a synthetic trace, for the oracle
// policies, oracle and oracle-learn (policy.Options.Routing): its generator's reuse, shift, draw
// weights and popularity order of every epoch, replayed from the header's
// parameters. A measured trace has no generator: it is refused.
func RoutingOf(tr *trace.Trace) (*policy.Routing, error) {
	h := tr.Header
	if h.Source != trace.Synthetic || h.Generator == nil {
		return nil, fmt.Errorf("sim: the oracle policies (oracle, oracle-learn) need the generator of a synthetic trace; this trace's source is %s, it has none", h.Source)
	}
	if w := int64(tr.Tokens()) * int64(h.Layers) * int64(h.Experts) * int64(h.TopK); w > MaxOracleWork {
		return nil, fmt.Errorf("sim: the oracle on %d tokens × %d layers × %d experts × top-%d: over the limit of %d", tr.Tokens(), h.Layers, h.Experts, h.TopK, int64(MaxOracleWork))
	}
	g := *h.Generator
	pop, err := trace.PopularityOf(g, h.Layers, h.Experts, h.TopK, tr.Tokens())
	if err != nil {
		return nil, fmt.Errorf("sim: routing of %s: %w", h.Label(), err)
	}
	return &policy.Routing{TopK: h.TopK, Reuse: g.Reuse, Weights: pop.Weights, Shift: g.Shift, Ranks: pop.Ranks}, nil
}

// BoundRow is the online bound at one capacity and partitioning.
type BoundRow struct {
	Partition string  `json:"partition"`
	Fraction  float64 `json:"fraction"` // of all experts, as given
	Capacity  int     `json:"capacity"` // experts, as Compare rounds it
	// HitRate is the most any online policy that knows the generator can
	// expect to hit (counted as Compare counts).
	HitRate float64 `json:"hit_rate"`
}

// OnlineBound bounds the hit rate, after the first skip tokens, of every
// online policy of a tier with demand fetching on the synthetic trace tr,
// even one that knows its generator r (the oracle's information, and the
// popularity order of each epoch from its first token on).
//
// The argument. An expert of layer l is a hit at token t+1 only if it was
// resident through the window from the layer's run at t to its run at t+1
// (L steps, L layers): only the experts a layer asks for are admitted, when
// it asks. A policy chooses these resident sets R_l(t) from what it has
// seen, so its expected hits are the sum over them of the probability that
// the layer then uses each, given the past: the oracle's probabilities P
// (the generator is Markov in each layer's last set, the layers
// independent). What bounds the sets is the capacity:
//
//   - per layer, the partition of C_l experts holds, from the end of the
//     layer's run at t to its next run, the set S(t) it just used and at
//     most C_l − k others (top-k), so the hits at t+1 are at most the sum of
//     P over S(t) and the C_l − k largest P of the rest;
//   - with one global capacity C, while another layer runs its k experts
//     are resident besides every R_l of the windows that step lies in, and
//     each step lies in exactly one window of each layer, so over the n
//     tokens counted Σ |R_l(t)| ≤ min(C, (C − k)·L/(L − 1))·(n+1) (one token
//     more for the windows' overhang): the hits are at most the sum of that
//     many of the largest P of all the accesses counted.
//
// The bound lets a policy hold experts it never fetched and, globally,
// shift capacity between tokens, so it can lie above what any policy
// reaches. A policy's hits on one trace differ from their expectation by
// noise: about 0.001 in hit rate for 900 tokens of 48 layers × top-8 (one
// standard deviation, at most).
func OnlineBound(tr *trace.Trace, r *policy.Routing, fractions []float64, parts []policy.Partition, skip int) ([]BoundRow, error) {
	d := dims(tr)
	L, E, k, T := d.Layers, d.Experts, tr.Header.TopK, tr.Tokens()
	if skip < 0 || skip >= T {
		return nil, fmt.Errorf("sim: skip %d tokens of a trace of %d", skip, T)
	}
	if r.TopK != k {
		return nil, fmt.Errorf("sim: routing of top-%d for a trace of top-%d", r.TopK, k)
	}
	caps := make([]int, len(fractions))
	for i, f := range fractions {
		if !(f > 0 && f <= 1) {
			return nil, fmt.Errorf("sim: capacity fraction %v: want (0, 1]", f)
		}
		caps[i] = max(1, int(math.Round(f*float64(d.N()))))
	}
	for _, part := range parts {
		for _, c := range caps {
			switch {
			case part != policy.Global && part != policy.PerLayer:
				return nil, fmt.Errorf("sim: unknown partition %v", part)
			case part == policy.Global && c < k, part == policy.PerLayer && c/L < k:
				return nil, fmt.Errorf("sim: %d experts (%s) cannot hold a layer's top-%d experts at once", c, part, k)
			}
		}
	}
	perLayerToo := slices.Contains(parts, policy.PerLayer)
	pred, err := policy.NewPredictor(d, r)
	if err != nil {
		return nil, err
	}
	n := T - skip
	var all histogram // the probabilities of every access counted
	// perLayer[i][l]: the per-layer bound's hits of layer l at capacity i.
	perLayer := make([][]float64, len(caps))
	for i := range perLayer {
		perLayer[i] = make([]float64, L)
	}
	out, rest := make([]float64, E), make([]float64, 0, E)
	in := make([]bool, E)
	for tok := skip - 1; tok < T-1; tok++ {
		for l := range L {
			var set []int32
			if tok >= 0 {
				set = tr.Step(tok, l)
			}
			if err := pred.Next(l, tok, set, out); err != nil {
				return nil, err
			}
			for _, q := range out {
				all.add(q)
			}
			if !perLayerToo {
				continue
			}
			// Per layer: all of the last set, and the largest of the rest.
			clear(in)
			forced := 0.0
			for _, e := range set {
				in[e] = true
				forced += out[e]
			}
			rest = rest[:0]
			for x, q := range out {
				if !in[x] {
					rest = append(rest, q)
				}
			}
			slices.SortFunc(rest, func(a, b float64) int { return cmp.Compare(b, a) })
			for i, c := range caps {
				cl := c / L
				if l < c%L {
					cl++
				}
				h := forced
				for _, q := range rest[:min(len(rest), cl-len(set))] {
					h += q
				}
				perLayer[i][l] += h
			}
		}
	}
	accesses := float64(n * L * k)
	var rows []BoundRow
	for _, part := range parts {
		for i, c := range caps {
			var hits float64
			switch {
			case part == policy.PerLayer || L == 1:
				for _, h := range perLayer[i] {
					hits += h
				}
			default:
				hits = all.top(min(float64(c), float64(c-k)*float64(L)/float64(L-1)) * float64(n+1))
			}
			rows = append(rows, BoundRow{Partition: part.String(), Fraction: fractions[i], Capacity: c, HitRate: min(1, hits/accesses)})
		}
	}
	return rows, nil
}

// histogram sums probabilities by value, so that the sum of the m largest
// needs no list of them: 2^20 bins of [0, 1], the bin the sum falls in
// taken at its mean (an error below m·2^−20).
type histogram struct {
	n   []int64
	sum []float64
}

const histBins = 1 << 20

func (h *histogram) add(q float64) {
	if h.n == nil {
		h.n, h.sum = make([]int64, histBins), make([]float64, histBins)
	}
	b := min(max(int(q*histBins), 0), histBins-1)
	h.n[b]++
	h.sum[b] += q
}

// top is the sum of the m largest values added (m may be fractional).
func (h *histogram) top(m float64) float64 {
	s := 0.0
	for b := len(h.n) - 1; b >= 0 && m > 0; b-- {
		if n := float64(h.n[b]); n <= m {
			s += h.sum[b]
			m -= n
		} else {
			s += m * h.sum[b] / n
			m = 0
		}
	}
	return s
}
