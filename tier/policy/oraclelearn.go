package policy

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
)

// oracleMode is what the generator-aware policy is told of the popularity
// order.
type oracleMode int

const (
	knowRanks  oracleMode = iota // oracle: each epoch's order from its first token on
	learnRanks                   // oracle-learn: no order; it is estimated from the routing since the last shift
	learnTruth                   // oracle-learn's machinery given the true order (tests)
)

func (m oracleMode) name() string {
	if m == knowRanks {
		return "oracle"
	}
	return "oracle-learn"
}

// Parameters of oracle-learn's estimate (see learner).
const (
	// learnBurn and learnSamples are the steps of the simulated layer whose
	// sets the fresh-draw probability of each rank is averaged over.
	learnBurn, learnSamples = 16, 64
	// learnGrid is the largest ratio between neighbouring weights of the
	// grid the kernels are interpolated on.
	learnGrid = 1.05
	// learnMinP keeps the fresh-draw probabilities off 0 and 1.
	learnMinP = 1e-9
)

// learner is what makes the oracle oracle-learn: it is told the
// generator's structure (Routing without Ranks: top-k, reuse, the weights
// by rank, the shift period) but not which expert has which rank, and
// estimates each expert's weight from the routing its layer has shown
// since the last shift. The eviction rule is the oracle's, with the
// weights estimated.
//
// # The estimate
//
// Within an epoch a layer's order is a uniformly random permutation π
// (rank of each expert), drawn afresh at every shift and independent of
// everything before it: the routing before the last shift says nothing
// about it, and is forgotten. The data of expert e in the epoch: T_e, the
// layer's runs at which e was not in the layer's previous set, and n_e,
// how many of them used e. At such a run e can only be a fresh draw, so if
// its rank were r it would be used with probability f_r, the generator's
// probability that a rank-r expert outside the previous set is drawn
// (averaged over the sets the chain visits: below). The runs at which e
// was in the previous set are left out (whether it was kept or drawn again
// is not seen; they say little of its weight).
//
// The likelihood of e's data given its rank is then Binomial(T_e, f_r)
// (the runs taken as independent given the rank), and the prior of the
// rank is uniform. The exact posterior couples the experts (the ranks are a
// permutation); the estimate treats each expert's rank as an independent
// uniform draw, as it is marginally, which with hundreds of experts
// changes little. The estimate of e's weight is the posterior mean
//
//	ŵ_e = Σ_r w_r·f_r^n(1 − f_r)^(T − n) / Σ_r f_r^n(1 − f_r)^(T − n),
//
// the mean weight with no data, and the weight of the rank whose f_r
// matches n/T as data accrue: a frequency estimate shrunk toward the mean
// by exactly as much as the known weights warrant. The oracle's
// probabilities are then computed with weight ŵ_e for each expert (the
// plug-in of the posterior mean; P is close to linear in an expert's own
// weight, so this is close to the posterior mean of P). With no data in
// the epoch of the layer's next run (before its first run after a shift)
// every order is equally likely and P is the oracle's exchangeable
// probability, the exact posterior predictive.
//
// f_r: the oracle's probability of a fresh draw of rank r, averaged over
// learnSamples sets of a simulated layer (after learnBurn steps; a fixed
// seed), at the sets that leave r out. Without reuse it is the oracle's P
// with no previous set.
//
// # Cost
//
// The kernels of the oracle's quadrature (one row per weight) are computed
// once on a grid of weights (the generator's, and between neighbours
// geometric steps of at most learnGrid) and interpolated linearly in log
// weight; at a weight of the grid, the rank weights among them, the row is
// the grid's exactly, so given the true order (learnTruth) oracle-learn
// computes exactly what the oracle does. The posterior means are cached by
// (n, T) in a table of fixed size.
type learner struct {
	p      *oracle
	truth  bool
	ranks  [][]int32 // learnTruth: the true order by epoch
	w      []float64 // weights by rank
	f      []float64 // per rank: P(drawn | not in the previous set)
	lf, lg []float64 // log f, log(1 − f)
	n, t   []int32   // per expert: uses and runs outside the previous set, in epoch ep of its layer
	ep     []int     // per layer: the epoch n and t count in (−1: none)
	prev   []bool    // per expert: in its layer's previous set
	// the grid, by descending weight: weights, their logs, kernel rows
	gw, glw []float64
	gpz, gc []float64
	mkey    []uint64  // memo of the posterior mean: (n, T) + 1, 0 empty
	mval    []float64 // the posterior mean of mkey
	mshift  uint
	ll      []float64 // scratch: log-likelihood by rank
	ord     byWeight  // scratch: a layer's experts by estimated weight
	rpz, rc []float64 // scratch: kernel rows by position
}

func newLearner(p *oracle, r *Routing, truth bool) *learner {
	d, E, n := p.d, p.d.Experts, p.n
	lr := &learner{p: p, truth: truth, w: r.Weights, n: make([]int32, d.N()), t: make([]int32, d.N()),
		ep: make([]int, d.Layers), prev: make([]bool, d.N()), ll: make([]float64, E),
		ord: byWeight{pos: make([]int32, E), w: make([]float64, E)}, rpz: make([]float64, E*n), rc: make([]float64, E*n)}
	if truth {
		lr.ranks = r.Ranks
	}
	for l := range lr.ep {
		lr.ep[l] = -1
	}
	lr.f = lr.fresh()
	lr.lf, lr.lg = make([]float64, E), make([]float64, E)
	for x, f := range lr.f {
		f = min(max(f, learnMinP), 1-learnMinP)
		lr.lf[x], lr.lg[x] = math.Log(f), math.Log1p(-f)
	}
	// The grid.
	ws := slices.Clone(r.Weights)
	slices.SortFunc(ws, func(a, b float64) int { return cmp.Compare(b, a) })
	ws = slices.Compact(ws)
	for i, a := range ws {
		lr.gw = append(lr.gw, a)
		if i+1 < len(ws) {
			b := ws[i+1]
			m := int(math.Ceil(math.Log(a/b) / math.Log(learnGrid)))
			for j := 1; j < m; j++ {
				lr.gw = append(lr.gw, a*math.Pow(b/a, float64(j)/float64(m)))
			}
		}
	}
	lr.gpz, lr.gc = make([]float64, len(lr.gw)*n), make([]float64, len(lr.gw)*n)
	for g, x := range lr.gw {
		lr.glw = append(lr.glw, math.Log(x))
		p.kernel(x/p.wsum, lr.gpz[g*n:(g+1)*n], lr.gc[g*n:(g+1)*n])
	}
	size := max(1024, 1<<bits.Len(uint(16*d.N())))
	lr.mkey, lr.mval = make([]uint64, size), make([]float64, size)
	lr.mshift = uint(64 - bits.Len(uint(size-1)))
	return lr
}

// fresh is f_r, the probability that the expert of rank r is drawn at a
// run at which it was not in the previous set (see learner).
func (lr *learner) fresh() []float64 {
	p := lr.p
	E := p.d.Experts
	f := slices.Clone(p.prior)
	if p.rho == 0 {
		return f
	}
	sum, cnt := make([]float64, E), make([]float64, E)
	in, out := make([]bool, E), make([]float64, E)
	rng := rand.New(rand.NewPCG(0x6c6561726e, 0x72616e6b)) // "learn", "rank"
	set := make([]int, 0, p.k)
	for step := range learnBurn + learnSamples {
		// The next set: keep each member with probability ρ, draw the
		// rest by weight among the experts not kept.
		kept := set[:0]
		for _, x := range set {
			if rng.Float64() < p.rho {
				kept = append(kept, x)
			}
		}
		set = kept
		clear(in)
		for _, x := range set {
			in[x] = true
		}
		for len(set) < p.k {
			var total float64
			for x, w := range lr.w {
				if !in[x] {
					total += w
				}
			}
			u, pick := rng.Float64()*total, -1
			for x, w := range lr.w {
				if !in[x] {
					pick = x
					if u -= w; u < 0 {
						break
					}
				}
			}
			set = append(set, pick)
			in[pick] = true
		}
		if step < learnBurn {
			continue
		}
		p.probabilities(p.ident, p.ident, p.pz, p.c, in, out)
		for x := range E {
			if !in[x] {
				sum[x] += out[x]
				cnt[x]++
			}
		}
	}
	for x := range f {
		if cnt[x] > 0 {
			f[x] = sum[x] / cnt[x]
		}
	}
	return f
}

// run records that layer l starts a run at token, after a run that used
// prev (dense indices; empty at its first run).
func (lr *learner) run(l int, prev []int32, token int64) {
	E := lr.p.d.Experts
	lo, hi := l*E, (l+1)*E
	if ep := lr.p.epochOf(token); ep != lr.ep[l] {
		// A new order: the counts of the old one say nothing of it.
		clear(lr.n[lo:hi])
		clear(lr.t[lo:hi])
		lr.ep[l] = ep
	}
	clear(lr.prev[lo:hi])
	for _, i := range prev {
		lr.prev[i] = true
	}
	for i := lo; i < hi; i++ {
		if !lr.prev[i] {
			lr.t[i]++
		}
	}
}

// drawn records that the run in progress of its layer uses expert i.
func (lr *learner) drawn(i int) {
	if !lr.prev[i] {
		lr.n[i]++
	}
}

// known reports whether layer l's prediction for a run in epoch te has
// anything to go on: data of that epoch (with the true order, the oracle's
// rule: the epoch has started).
func (lr *learner) known(l, te int) bool {
	if lr.truth {
		return te <= lr.p.epoch && te < len(lr.ranks)
	}
	return lr.p.e[l] != math.MinInt64 && lr.ep[l] == te
}

// next sets out[x], for each expert x of layer l, to the probability of
// its use at the layer's next run (in epoch te), given the experts in the
// last set (in, by expert; nil: none or no reuse), with the estimated
// weights.
func (lr *learner) next(l, te int, in []bool, out []float64) {
	p, E, n := lr.p, lr.p.d.Experts, lr.p.n
	lo := l * E
	for x := range E {
		lr.ord.pos[x] = int32(x)
		if lr.truth {
			lr.ord.w[x] = lr.w[lr.ranks[te][lo+x]]
		} else {
			lr.ord.w[x] = lr.posterior(lr.n[lo+x], lr.t[lo+x])
		}
	}
	// By weight, as the oracle goes by rank: with the true weights the
	// arithmetic is the oracle's.
	sort.Sort(&lr.ord)
	for r, x := range lr.ord.pos {
		lr.interpolate(lr.ord.w[x], lr.rpz[r*n:(r+1)*n], lr.rc[r*n:(r+1)*n])
	}
	p.probabilities(lr.ord.pos, p.ident, lr.rpz, lr.rc, in, out)
}

// posterior is the posterior mean weight of an expert used n times in t
// runs outside its layer's previous set.
func (lr *learner) posterior(n, t int32) float64 {
	key := uint64(n)<<32 | uint64(t) + 1
	h := (key * 0x9e3779b97f4a7c15) >> lr.mshift
	if lr.mkey[h] == key {
		return lr.mval[h]
	}
	m := math.Inf(-1)
	for r := range lr.ll {
		lr.ll[r] = float64(n)*lr.lf[r] + float64(t-n)*lr.lg[r]
		m = max(m, lr.ll[r])
	}
	var s, sw float64
	for r, x := range lr.ll {
		e := math.Exp(x - m)
		s += e
		sw += e * lr.w[r]
	}
	v := sw / s
	lr.mkey[h], lr.mval[h] = key, v
	return v
}

// interpolate sets the kernel rows pz and c of weight x from the grid.
func (lr *learner) interpolate(x float64, pz, c []float64) {
	n, g := lr.p.n, lr.gw
	// j: the last grid weight ≥ x (the grid descends).
	j := sort.Search(len(g), func(i int) bool { return g[i] < x }) - 1
	if j < 0 || j == len(g)-1 || g[j] == x {
		j = max(j, 0)
		copy(pz, lr.gpz[j*n:(j+1)*n])
		copy(c, lr.gc[j*n:(j+1)*n])
		return
	}
	a := (lr.glw[j] - math.Log(x)) / (lr.glw[j] - lr.glw[j+1])
	for i := range n {
		pz[i] = lr.gpz[j*n+i] + a*(lr.gpz[(j+1)*n+i]-lr.gpz[j*n+i])
		c[i] = lr.gc[j*n+i] + a*(lr.gc[(j+1)*n+i]-lr.gc[j*n+i])
	}
}

// byWeight sorts a layer's experts by descending weight, then index.
type byWeight struct {
	pos []int32
	w   []float64 // by expert
}

func (b *byWeight) Len() int      { return len(b.pos) }
func (b *byWeight) Swap(i, j int) { b.pos[i], b.pos[j] = b.pos[j], b.pos[i] }
func (b *byWeight) Less(i, j int) bool {
	x, y := b.pos[i], b.pos[j]
	if b.w[x] != b.w[y] {
		return b.w[x] > b.w[y]
	}
	return x < y
}
