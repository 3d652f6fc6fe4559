package policy

import (
	"fmt"
	"math"
)

// Routing is the routing model the oracle policy is given: the parameters
// of the generator behind a synthetic trace (package tier/trace, zipf), in
// this package's terms. Each layer l, at each token, keeps every expert of
// its previous token's set with probability Reuse (independently), then
// draws the remaining TopK − kept experts by weight without replacement
// among the experts not kept, the expert of popularity rank r weighing
// Weights[r].
type Routing struct {
	// TopK is the number of experts a layer uses per token.
	TopK int
	// Reuse is the probability that each expert of a layer's previous set
	// is kept.
	Reuse float64
	// Weights[r] is the draw weight of the expert of rank r (0: the
	// heaviest); one per expert of a layer, the same in every layer.
	Weights []float64
	// Shift is the number of tokens between redraws of the popularity order
	// (0: never).
	Shift int
	// Ranks[i][Dims.Index(id)] is id's popularity rank in epoch i: the
	// tokens i·Shift to (i+1)·Shift − 1, or every token if Shift is 0
	// (then there is exactly one epoch). Each layer's ranks are a
	// permutation of 0 … Experts−1. The oracle uses an epoch's ranks only
	// from the epoch's first token on; oracle-learn needs none and ignores
	// them (it checks them if given).
	Ranks [][]int32
}

// MaxRoutingEpochs bounds len(Routing.Ranks).
const MaxRoutingEpochs = 1 << 16

func (r *Routing) check(d Dims, ranks bool) error {
	if r == nil {
		return fmt.Errorf("needs Options.Routing, the generator of a synthetic trace (a measured trace has none)")
	}
	switch {
	case r.TopK < 1 || r.TopK > d.Experts:
		return fmt.Errorf("routing: top-k %d: want 1 to %d (the experts of a layer)", r.TopK, d.Experts)
	case !(r.Reuse >= 0 && r.Reuse <= 1):
		return fmt.Errorf("routing: reuse %v: want a probability, 0 to 1", r.Reuse)
	case len(r.Weights) != d.Experts:
		return fmt.Errorf("routing: %d weights, want one per rank (%d experts a layer)", len(r.Weights), d.Experts)
	case r.Shift < 0:
		return fmt.Errorf("routing: shift %d is negative", r.Shift)
	case (ranks || len(r.Ranks) > 0) && (len(r.Ranks) == 0 || len(r.Ranks) > MaxRoutingEpochs):
		// oracle-learn needs no ranks: they are what it learns.
		return fmt.Errorf("routing: %d epochs of ranks: want 1 to %d", len(r.Ranks), MaxRoutingEpochs)
	case r.Shift == 0 && len(r.Ranks) > 1:
		return fmt.Errorf("routing: %d epochs of ranks without a shift: want 1", len(r.Ranks))
	}
	for i, w := range r.Weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("routing: weight of rank %d is %v: want a positive finite number", i, w)
		}
	}
	seen := make([]int, d.Experts) // epoch·layers + layer + 1 where the rank was last seen
	for i, ranks := range r.Ranks {
		if len(ranks) != d.N() {
			return fmt.Errorf("routing: epoch %d has %d ranks, want one per expert (%d)", i, len(ranks), d.N())
		}
		for x, rk := range ranks {
			id := d.ID(x)
			mark := i*d.Layers + id.Layer + 1
			if rk < 0 || int(rk) >= d.Experts || seen[rk] == mark {
				return fmt.Errorf("routing: epoch %d: rank %d of %v: the ranks of a layer must be a permutation of 0 to %d", i, rk, id, d.Experts-1)
			}
			seen[rk] = mark
		}
	}
	return nil
}

// layer is the routing of layer l alone, for a PerLayer partition's policy.
func (r *Routing) layer(d Dims, l int) *Routing {
	lr := *r
	lr.Ranks = make([][]int32, len(r.Ranks))
	for i, ranks := range r.Ranks {
		lr.Ranks[i] = ranks[l*d.Experts : (l+1)*d.Experts]
	}
	return &lr
}

// oracleNodes is the number of quadrature nodes of the inclusion
// probabilities: t = 0 and 15 panels of cubics (TestOracleProbabilities
// checks the accuracy).
const oracleNodes = 3*15 + 2

// oracleLo is the first node after t = 0 (the weights normalised to sum 1).
const oracleLo = 0.01

// oracle is the generator-aware online policy (see the package
// documentation): it evicts the resident expert least likely to be used at
// its layer's next step, given the routing seen so far and the generator's
// parameters.
//
// # The probability of the next use
//
// Let S be the set layer l used at its last run and ρ = Reuse. The next set
// keeps each member of S with probability ρ and draws the remaining slots
// successively by weight among the rest. Successive weighted sampling is
// the exponential race: give every candidate j an independent key X_j =
// E_j/w_j (E_j exponential with mean 1) and take the smallest. A candidate
// e that is not kept is drawn exactly when fewer than TopK of the others
// "count" at its key t, where j counts if it was kept or its key is below
// t: Z_j(t) ~ Bernoulli(ρ + (1−ρ)(1 − e^(−w_j t))) for j in S, Bernoulli(1
// − e^(−w_j t)) for the others, all independent. So
//
//	q(e) = ∫₀^∞ w_e e^(−w_e t) · P(Σ_{j≠e} Z_j(t) ≤ TopK−1) dt
//
// and P(e next) = ρ + (1−ρ)·q(e) for e in S, q(e) for the others. This is
// exact; the only approximation is the quadrature. The CDF of the sum (a
// Poisson binomial truncated at TopK, e left out by prefix and suffix
// products over the experts) is computed at t = 0 and at oracleNodes − 1
// nodes spaced geometrically from 0.01 (the weights normalised to sum 1)
// to where it is below 10^−12 for any set; it is taken as linear on [0,
// 0.01] and as the cubic through four nodes in log t on each panel, and
// each node's weight (the kernel against its interpolation basis, by
// rank) is computed once. On 256 experts, top-8, the result is within
// 2·10^−5 of 300 panels' (relative error 10^−4 on uniform routing, where
// the exact value is 8/256), a layer's probabilities sum to TopK within
// 10^−3, and they match the generator's frequencies (both tested). It costs
// about 0.25 ms a layer run there (about 12 s for 1000 tokens of 48
// layers); without reuse the probabilities do not depend on the set and
// are computed once. With ρ = 0 they do not depend
// on S: the policy keeps the most probable experts, which is A0, the
// optimal online policy for independent references (Aho, Denning and
// Ullman, 1971).
//
// # Several layers
//
// Every layer runs once a token, so with a global capacity the next uses
// of all layers' experts lie within one token, and the policy ranks them
// all by that probability. A tie (uniform routing has nothing but ties)
// goes, as in Belady's MIN, to the expert whose next use is furthest away:
// the one whose layer ran most recently (as leaststale), then by index.
//
// # What it knows
//
// The routing so far (the sets of the layers' past runs, and the whole set
// the running layer asks for at once: Announce), and the generator's
// parameters: weights, reuse, shift, and the popularity order in force. An
// epoch's order is known from the epoch's first token on, not before:
// predictions for the first token of an epoch made before it starts use
// the probabilities averaged over a random order (each candidate not kept
// is drawn with probability (TopK − kept)/(Experts − kept)), and are made
// again when the epoch starts. A real online policy could at best estimate
// these parameters from the routing it sees (popularity after a shift from
// the counts since the shift), so the oracle measures what an online policy
// can reach with the best information it could have. It is a measuring
// device for BENCHMARKS.md, not a policy for a tier: nothing but a
// synthetic trace has a Routing.
type oracle struct {
	base
	k   int
	rho float64
	spt int64
	sh  int64
	// quadrature, by rank r and node i: pz[r·n+i] = 1 − e^(−w_r t_i) and
	// the kernel weight c[r·n+i] of the CDF at node i in q.
	n      int
	wsum   float64   // the sum of the weights, the unit of the nodes
	t      []float64 // the nodes
	pz, c  []float64
	ident  []int32   // 0 … Experts−1: the rows of pz and c by rank
	prior  []float64 // P of each rank with no previous set
	perm   [][]int32 // per epoch, rank → expert by layer: perm[i][l·Experts + r]
	p      []float64 // per expert: P(used at its layer's next step)
	mark   []int64   // per expert: the last step it was announced or used at
	e      []int64   // per layer: its last run
	sets   [][]int32 // per layer: the experts (dense) of its last run
	dirty  []bool    // per layer: p is out of date
	guess  []bool    // per layer: p made without the order of its target epoch
	now    int64
	epoch  int // the latest epoch whose order is known
	h      lheap
	suf    []float64 // scratch: suffix CDFs, (Experts+1)·k
	pre    []float64 // scratch: prefix pmf, k
	acc, z []float64 // scratch, Experts
	in     []bool    // scratch, Experts
	learn  *learner  // oracle-learn: the ranks are estimated (oraclelearn.go)
}

func newOracle(d Dims, o Options, m oracleMode) (*oracle, error) {
	r := o.Routing
	if err := r.check(d, m != learnRanks); err != nil {
		return nil, fmt.Errorf("policy %s: %w", m.name(), err)
	}
	if m == learnRanks {
		rr := *r
		rr.Ranks = nil // what oracle-learn must learn
		r = &rr
	}
	E, k := d.Experts, r.TopK
	p := &oracle{base: newBase(d), k: k, rho: r.Reuse, spt: int64(o.StepsPerToken), sh: int64(r.Shift), n: oracleNodes,
		p: make([]float64, d.N()), mark: make([]int64, d.N()), e: make([]int64, d.Layers), sets: make([][]int32, d.Layers),
		dirty: make([]bool, d.Layers), guess: make([]bool, d.Layers), now: -1,
		suf: make([]float64, (E+1)*k), pre: make([]float64, k), acc: make([]float64, E), z: make([]float64, E), in: make([]bool, E)}
	for i := range p.mark {
		p.mark[i] = math.MinInt64
	}
	for l := range p.e {
		p.e[l] = math.MinInt64
		p.sets[l] = make([]int32, 0, E)
	}
	for _, ranks := range r.Ranks {
		pm := make([]int32, d.N())
		for x, rk := range ranks {
			id := d.ID(x)
			pm[id.Layer*E+int(rk)] = int32(id.Expert)
		}
		p.perm = append(p.perm, pm)
	}
	p.quadrature(r.Weights)
	p.prior = make([]float64, E)
	p.ident = make([]int32, E)
	for i := range p.ident {
		p.ident[i] = int32(i)
	}
	p.probabilities(p.ident, p.ident, p.pz, p.c, nil, p.prior)
	if m != knowRanks {
		p.learn = newLearner(p, r, m == learnTruth)
	}
	for l := range d.Layers {
		p.predict(l)
	}
	p.h = newLHeap(d, p.within, p.cross)
	return p, nil
}

// quadrature chooses the nodes and the kernel weights for weights w.
func (p *oracle) quadrature(w []float64) {
	E, n := len(w), p.n
	var sum float64
	for _, x := range w {
		sum += x
	}
	wn := make([]float64, E)
	for r, x := range w {
		wn[r] = x / sum // the time scale: one draw per unit of t at the start
	}
	// The upper node: P(Σ Z ≤ k) < 10^−12 with no previous set, a bound on
	// the CDF left out one expert for any set (members of a set count at
	// least as often, and leaving one out lowers the sum by at most one).
	tail := func(t float64) float64 {
		f := make([]float64, p.k+1)
		f[0] = 1
		for _, x := range wn {
			z := -math.Expm1(-x * t)
			for c := p.k; c > 0; c-- {
				f[c] = (1-z)*f[c] + z*f[c-1]
			}
			f[0] *= 1 - z
		}
		s := 0.0
		for _, x := range f {
			s += x
		}
		return s
	}
	hi := 1.0
	for tail(hi) > 1e-12 && hi < 1e300 {
		hi *= 2
	}
	// Nodes: t_0 = 0, then 3·panels + 1 geometric ones from lo to hi. The
	// CDF is taken as linear on [0, lo] and, on each panel of four nodes, as
	// the cubic through them in log t; each node's weight is the integral
	// of the kernel against its interpolation basis (Simpson's rule, 64
	// steps a panel).
	t := make([]float64, n)
	for i := 1; i < n; i++ {
		t[i] = oracleLo * math.Pow(hi/oracleLo, float64(i-1)/float64(n-2))
	}
	p.wsum, p.t = sum, t
	p.pz, p.c = make([]float64, E*n), make([]float64, E*n)
	for r, x := range wn {
		p.kernel(x, p.pz[r*n:(r+1)*n], p.c[r*n:(r+1)*n])
	}
}

// kernel sets pz[i] = 1 − e^(−x t_i) and c[i], the weight of node i in q,
// for an expert of normalised weight x (its weight over the sum of all
// weights); c must be zero.
func (p *oracle) kernel(x float64, pz, c []float64) {
	const lo, steps = oracleLo, 64
	n, t := p.n, p.t
	panels := (n - 2) / 3
	for i := range t {
		pz[i] = -math.Expm1(-x * t[i])
	}
	// [0, lo], linear: the right end weighs phi, the left the rest.
	whole, right := -math.Expm1(-x*lo), phi(x*lo)
	c[0] += whole - right
	c[1] += right
	for j := range panels {
		nd := t[1+3*j : 5+3*j]
		var u [4]float64
		for m := range u {
			u[m] = math.Log(nd[m])
		}
		h := (u[3] - u[0]) / steps
		for s := 0; s <= steps; s++ {
			v := u[0] + float64(s)*h
			f := 2.0 // Simpson's weights 1, 4, 2, 4, …, 4, 1 (× h/3)
			switch {
			case s == 0 || s == steps:
				f = 1
			case s%2 == 1:
				f = 4
			}
			tv := math.Exp(v)
			k := f * h / 3 * x * math.Exp(-x*tv) * tv // w e^(−wt) dt, dt = t dv
			for m := range u {
				l := 1.0
				for q := range u {
					if q != m {
						l *= (v - u[q]) / (u[m] - u[q])
					}
				}
				c[1+3*j+m] += k * l
			}
		}
	}
	c[n-1] += math.Exp(-x * t[n-1]) // beyond the last node, the CDF taken as flat
}

// phi is (1 − e^(−x)(1 + x))/x, the weight of an interval's right end.
func phi(x float64) float64 {
	if x < 1e-3 {
		return x/2 - x*x/3 + x*x*x/8
	}
	return (-math.Expm1(-x) - x*math.Exp(-x)) / x
}

// probabilities sets out[perm[r]] to P(used at the next step) for the
// expert at position r, whose kernel is row rows[r] of pz and c (the oracle:
// position = rank = row), given which of them were in the last set (in, by
// expert; nil: none).
func (p *oracle) probabilities(perm, rows []int32, pz, c []float64, in []bool, out []float64) {
	E, n, k := len(perm), p.n, p.k
	acc, z, suf, pre := p.acc, p.z, p.suf, p.pre
	clear(acc)
	for i := range n {
		for r, x := range perm {
			z[r] = pz[int(rows[r])*n+i]
			if in != nil && in[x] {
				z[r] = p.rho + (1-p.rho)*z[r]
			}
		}
		// suf[r·k + c] = P(Σ_{r' ≥ r} Z_r' ≤ c)
		for c := range k {
			suf[E*k+c] = 1
		}
		for r := E - 1; r >= 0; r-- {
			s, up, zr := suf[r*k:(r+1)*k], suf[(r+1)*k:(r+2)*k], z[r]
			s[0] = (1 - zr) * up[0]
			for c := 1; c < k; c++ {
				s[c] = (1-zr)*up[c] + zr*up[c-1]
			}
		}
		clear(pre)
		pre[0] = 1
		for r := range E {
			up := suf[(r+1)*k : (r+2)*k]
			g := 0.0
			for a, x := range pre {
				g += x * up[k-1-a]
			}
			acc[r] += c[int(rows[r])*n+i] * g
			zr := z[r]
			for c := k - 1; c > 0; c-- {
				pre[c] = (1-zr)*pre[c] + zr*pre[c-1]
			}
			pre[0] *= 1 - zr
		}
	}
	for r, x := range perm {
		q := acc[r]
		if in != nil && in[x] {
			q = p.rho + (1-p.rho)*q
		}
		out[x] = q
	}
}

func (p *oracle) token(step int64) int64 { return step / p.spt }

func (p *oracle) epochOf(token int64) int {
	if p.sh == 0 {
		return 0
	}
	return int(min(token/p.sh, math.MaxInt32))
}

// predict sets p for layer l's experts: the probability of their use at
// the layer's next run, given its last set.
func (p *oracle) predict(l int) {
	E := p.d.Experts
	target := max(p.token(p.now), 0) // the layer has not run yet
	if p.e[l] != math.MinInt64 {
		target = p.token(p.e[l]) + 1
	}
	te := p.epochOf(target)
	known := te <= p.epoch && te < len(p.perm)
	if p.learn != nil {
		known = p.learn.known(l, te)
	}
	p.dirty[l] = false
	p.guess[l] = !known || p.e[l] == math.MinInt64
	p.next(l, p.sets[l], te, known, p.p[l*E:(l+1)*E])
}

// next sets out[x], for each expert x of layer l, to the probability of
// its use at the layer's next run, given its last set (dense indices) and
// the epoch te of that run, whose order is known or not.
func (p *oracle) next(l int, set []int32, te int, known bool, out []float64) {
	E := p.d.Experts
	in := p.in
	clear(in)
	for _, i := range set {
		in[int(i)-l*E] = true
	}
	if !known {
		// By symmetry every candidate not kept is equally likely to be
		// drawn.
		notIn, inP := p.exchangeable(len(set)), p.rho
		if len(set) > 0 {
			inP += (1 - p.rho) * p.exchangeable(len(set)-1)
		}
		for x := range out {
			out[x] = notIn
			if in[x] {
				out[x] = inP
			}
		}
		return
	}
	if p.learn != nil {
		if p.rho == 0 || len(set) == 0 {
			in = nil
		}
		p.learn.next(l, te, in, out)
		return
	}
	perm := p.perm[te][l*E : (l+1)*E]
	if p.rho == 0 || len(set) == 0 {
		for r, x := range perm {
			out[x] = p.prior[r]
		}
		return
	}
	p.probabilities(perm, p.ident, p.pz, p.c, in, out)
}

// Predictor computes the oracle policy's probabilities outside a tier (for
// the bound of sim.OnlineBound).
type Predictor struct {
	o   *oracle
	set []int32
}

// NewPredictor returns the oracle's probabilities for a model of shape d
// routed by r.
func NewPredictor(d Dims, r *Routing) (*Predictor, error) {
	o, err := newOracle(d, Options{StepsPerToken: d.Layers, Routing: r}, knowRanks)
	if err != nil {
		return nil, err
	}
	return &Predictor{o: o, set: make([]int32, 0, d.Experts)}, nil
}

// Next sets out[e], for each expert e of layer, to the probability that the
// layer uses e at token+1 given that it used the experts of set at token
// (token −1 and no set: the first token), the popularity order of token+1's
// epoch known: a little more than the oracle policy knows just before an
// epoch starts.
func (p *Predictor) Next(layer, token int, set []int32, out []float64) error {
	o, d := p.o, p.o.d
	if layer < 0 || layer >= d.Layers || token < -1 || len(out) != d.Experts {
		return fmt.Errorf("policy: prediction for layer %d after token %d into %d values: want a layer below %d, a token from −1, %d values", layer, token, len(out), d.Layers, d.Experts)
	}
	p.set = p.set[:0]
	seen := o.in
	clear(seen)
	for _, e := range set {
		if e < 0 || int(e) >= d.Experts || seen[e] {
			return fmt.Errorf("policy: prediction for layer %d: expert %d of the set is out of range (%d experts) or repeated", layer, e, d.Experts)
		}
		seen[e] = true
		p.set = append(p.set, int32(d.Index(ExpertID{Layer: layer, Expert: int(e)})))
	}
	te := o.epochOf(int64(token + 1))
	o.next(layer, p.set, te, te < len(o.perm), out)
	return nil
}

// exchangeable is the probability that a given candidate not kept is drawn
// when the s experts of the last set other than it are kept with
// probability ρ each and the order is uniformly random:
// E[(k − K)/(Experts − K)], K ~ Binomial(s, ρ).
func (p *oracle) exchangeable(s int) float64 {
	E, k := float64(p.d.Experts), p.k
	var sum float64
	for j := 0; j <= s; j++ {
		if j >= k {
			break
		}
		b := math.Exp(lchoose(s, j) + float64(j)*math.Log(p.rho) + float64(s-j)*math.Log1p(-p.rho))
		if p.rho == 0 {
			b = 0
			if j == 0 {
				b = 1
			}
		} else if p.rho == 1 {
			b = 0
			if j == s {
				b = 1
			}
		}
		sum += b * float64(k-j) / (E - float64(j))
	}
	return sum
}

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

func (p *oracle) layer(i int32) int32 { return i / int32(p.d.Experts) }

func (p *oracle) within(a, b int32) bool {
	if x, y := p.p[a], p.p[b]; x != y {
		return x < y
	}
	return a < b
}

func (p *oracle) cross(a, b int32) bool {
	if x, y := p.p[a], p.p[b]; x != y {
		return x < y
	}
	if x, y := p.e[p.layer(a)], p.e[p.layer(b)]; x != y {
		return x > y
	}
	return a < b
}

func (p *oracle) Name() string {
	if p.learn != nil && !p.learn.truth {
		return "oracle-learn"
	}
	return "oracle"
}

// use records that id is used at now: a new run of its layer starts a new
// set.
func (p *oracle) use(id ExpertID, now int64) {
	l, i := id.Layer, p.d.Index(id)
	p.now = max(p.now, now)
	if now != p.e[l] {
		if p.learn != nil {
			p.learn.run(l, p.sets[l], p.token(now))
		}
		p.e[l] = now
		p.sets[l] = p.sets[l][:0]
		p.dirty[l] = true
		p.h.refresh(int32(l))
	}
	if p.mark[i] != now {
		p.mark[i] = now
		p.sets[l] = append(p.sets[l], int32(i))
		p.dirty[l] = true
		if p.learn != nil {
			p.learn.drawn(i)
		}
	}
}

// Announce records that the layer running at now uses id, resident or not
// (Cache.RequestSet announces a layer's whole set before leasing any).
func (p *oracle) Announce(id ExpertID, now int64) { p.use(id, now) }

func (p *oracle) Insert(id ExpertID, _ int64) { p.h.push(p.insert(id)) }

func (p *oracle) Touch(id ExpertID, now int64) {
	p.resident("Touch", id)
	p.use(id, now)
}

func (p *oracle) Remove(id ExpertID) {
	if i := p.remove(id); p.h.has(i) {
		p.h.remove(i)
	}
}

func (p *oracle) Victim(incoming ExpertID, now int64) (ExpertID, bool) {
	if p.d.Valid(incoming) {
		p.use(incoming, now)
	}
	if ep := p.epochOf(p.token(p.now)); ep > p.epoch {
		p.epoch = ep
		for l, g := range p.guess {
			p.dirty[l] = p.dirty[l] || g
		}
	}
	for l, dirty := range p.dirty {
		if dirty {
			p.predict(l)
			p.h.hs[l].heapify()
			p.h.refresh(int32(l))
		}
	}
	i, ok := p.h.top()
	if !ok {
		return ExpertID{}, false
	}
	return p.d.ID(int(i)), true
}

func (p *oracle) Pin(id ExpertID)   { p.h.remove(p.pin(id)) }
func (p *oracle) Unpin(id ExpertID) { p.h.push(p.unpin(id)) }
