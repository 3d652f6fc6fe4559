package policy

import "math"

// predict is the plug-in estimate of the oracle policy: it evicts the
// resident expert least likely to be used at its layer's next run, with the
// probability the oracle computes from the generator's parameters replaced
// by estimates from the accesses seen so far. It needs nothing but the
// access stream, so it runs on measured routing too.
//
// # The estimate
//
// The oracle's model of a layer: each expert of the layer's last set S is
// kept with probability ρ, the rest of the set is drawn afresh, expert e
// with probability q(e). So P(e next) = ρ + (1−ρ)·q(e) for e in S and q(e)
// for the others. predict estimates, per layer and with exponential aging
// by the layer clock (half-life Options.HalfLifeTokens, as lfu-decay and
// heat age):
//
//   - f(e), the fraction of the layer's runs that used e: decayed uses of e
//     over decayed runs of the layer, kept in the log domain as freq keeps
//     its counts, so the ratio changes only when the layer runs. Three
//     estimates are kept: half-lives of two and four Options.HalfLifeTokens,
//     and a growing one (no aging) that restarts from the shortest when the
//     shortest has predicted the layer's recent fresh draws (uses of experts
//     not in the previous set) better by resetNats: the popularity has
//     shifted. Each is scored by the log probability it gave the layer's
//     fresh draws (aged with half-life scoreScale·HalfLifeTokens), and the
//     best one of each layer is used. Stationary routing is then estimated
//     from everything seen since the last shift, drifting routing from the
//     recent past.
//   - x(e), the fraction of the layer's runs that drew e afresh: three more
//     estimates, with the same half-lives (and restart), that count only
//     fresh draws. A use count mixes the popularity with the reuse, which
//     repeats what a run drew; x sees only the draws. In the stationary
//     state x = q(1 − f) with f = q/(1 − ρ + ρq), solved for q (qOf). Each
//     is scored on the same fresh draws by the f its q implies, and used
//     only where it leads the best use count by freshNats: where the
//     hottest experts are nearly always in the last set they give few
//     fresh draws, and their fresh-draw count is the noisier estimate.
//   - A shift of every layer at once (a change of topic) is detected by a
//     test that pools the evidence of all layers (shiftPool, shared by the
//     instances of per-layer partitions): a CUSUM over the per-token sum of
//     every layer's log-likelihood ratios of its fresh draws under a model
//     fitted since a candidate change point and one fitted since the last
//     shift. On the benchmarks' shape it raises a shift within a token of
//     it, and none on stationary routing; then every estimate of every
//     layer restarts from the runs since the change point (each layer keeps
//     its last shiftWindow runs for this), and the scores start equal.
//   - ρ, the reuse beyond chance: of the experts of a set, the decayed
//     fraction the next run used again, r, less what fresh draws alone would
//     have given, q̄ (the mean q over the set, each q estimated without the
//     set's own use): ρ = (r − q̄)/(1 − q̄), clamped to [0, 0.99]. It ages
//     with half-life HalfLifeTokens.

// In the stationary state of that model an expert is used at a run with
// probability f where f = ρf + (1 − ρf)q, so q = f(1 − ρ)/(1 − ρf); without
// reuse q = f (= x), and predict is a decayed frequency order.
//
// # Order
//
// Within one layer and one class (in the last set or not) P grows with
// the decayed count of the estimate in use (q grows with f and with x),
// whatever the layer's estimates, so each layer keeps two
// heaps by count (ties: used longest ago, then index), and a heap of those
// heaps orders them by the probability of their first expert, fixed when
// the layer runs (its estimates change) or its first expert does. Every
// operation is O(log n); a run of a layer also moves the experts of its
// previous set between classes, O(TopK log n), and a change of the estimate
// in use or a restart reorders the layer's heaps, O(Experts) (rare: at a
// shift; the pooled restart adds O(shiftWindow·TopK) per layer). The
// shift test costs a log per fresh draw and O(TopK) per run. Ties between layers go to
// the expert whose layer ran most recently, as in leaststale (2·run − last
// use, largest first), then by index.
type predict struct {
	base
	rate  float64         // the aging of the reuse estimate
	rates [nEst]float64   // the agings of the popularity estimates
	u     [nEst][]float64 // per estimate, per expert: log of the decayed uses (or fresh draws)
	last  []int64         // per expert: last use, math.MinInt64 if none
	fr    []bool          // per expert: its last use was a fresh draw
	// per layer
	e, pe   []int64         // the current (last) run and the one before
	runs    [nEst][]float64 // per estimate: log of the decayed runs
	den     [nEst][]float64 // per estimate: log(decayed runs + prior), before the current run
	score   [nEst][]float64 // per estimate: decayed log score of its predictions
	pick    []int           // the estimate in use
	kept    []float64       // experts of the current run that were in the previous one
	np, qs  []float64       // size of the previous run's set and Σq̂ over it
	a, b, c []float64       // decayed sums of kept, np and qs
	rho     []float64
	members [][]int32 // experts (dense) used at the current run
	hs      []ixheap  // class heaps by k = 2·layer + member, local indices
	top     ixheap    // the class heaps, by the probability of their first

	// the pooled shift detector (shiftPool)
	pool   *shiftPool
	spt    int64
	cl, cf []float64   // per expert: fresh draws since the last shift, since the pool's tau
	nl, nf []float64   // per layer: their sums
	fresh  [][]int32   // per layer: the fresh draws of the current run
	ring   [][]pastRun // per layer: the last shiftWindow runs, by run number mod shiftWindow
	nrun   []int64     // per layer: runs in the ring so far
	fhead  []int64     // per layer: the oldest run counted in cf
	ep     []int       // per layer: the pool's epoch its estimates start in
}

// pastRun is a run of a layer kept to restart the estimates from.
type pastRun struct {
	tok, step   int64
	uses, fresh []int32
}

// nEst is the number of popularity estimates predict keeps, and estScale
// their half-lives in units of Options.HalfLifeTokens (the last of each
// kind: no aging).
const nEst = 6

var estScale = [nEst]float64{2, 4, math.Inf(1), 2, 4, math.Inf(1)}

// nUse is the number of estimates that count uses; the others (with the
// same half-lives) count fresh draws.
const nUse = 3

// countsFresh reports whether estimate h counts fresh draws only.
func countsFresh(h int) bool { return h >= nUse }

// scoreScale is the half-life of the estimates' scores in units of
// Options.HalfLifeTokens, resetNats the lead in log score of the shortest
// estimate over the growing one that restarts the growing one, and
// freshNats the lead a fresh-draw count needs over the use counts to be
// used.
const (
	scoreScale = 0.25
	resetNats  = 3
	freshNats  = 3
)

// predictPrior is the prior weight of the popularity estimates in their
// scores, in runs of the layer: each expert starts with an equal share of a
// set.
const predictPrior = 1

func newPredict(d Dims, o Options) *predict {
	n, L := d.N(), d.Layers
	spt := float64(o.StepsPerToken)
	p := &predict{base: newBase(d), rate: math.Ln2 / (o.HalfLifeTokens * spt),
		last: make([]int64, n), fr: make([]bool, n),
		e: make([]int64, L), pe: make([]int64, L), kept: make([]float64, L), pick: make([]int, L),
		np: make([]float64, L), qs: make([]float64, L), a: make([]float64, L), b: make([]float64, L), c: make([]float64, L),
		rho: make([]float64, L), members: make([][]int32, L), hs: make([]ixheap, 2*L),
		pool: o.pool, spt: int64(o.StepsPerToken), cl: make([]float64, n), cf: make([]float64, n),
		nl: make([]float64, L), nf: make([]float64, L), fresh: make([][]int32, L), ring: make([][]pastRun, L),
		nrun: make([]int64, L), fhead: make([]int64, L), ep: make([]int, L)}
	if p.pool == nil {
		p.pool = newShiftPool()
	}
	for h := range nEst {
		p.rates[h] = math.Ln2 / (o.HalfLifeTokens * estScale[h] * spt)
		p.u[h] = make([]float64, n)
		p.runs[h], p.den[h], p.score[h] = make([]float64, L), make([]float64, L), make([]float64, L)
		for i := range p.u[h] {
			p.u[h][i] = math.Inf(-1)
		}
		for l := range L {
			p.runs[h][l] = math.Inf(-1)
		}
	}
	for i := range p.last {
		p.last[i] = math.MinInt64
	}
	for l := range L {
		p.e[l], p.pe[l] = math.MinInt64, math.MinInt64
		p.pick[l] = 1
		p.members[l] = make([]int32, 0, d.Experts)
		p.fresh[l] = make([]int32, 0, d.Experts)
		p.ring[l] = make([]pastRun, shiftWindow)
		for r := range p.ring[l] {
			// Room for a top-16 set: beyond that the first runs grow them.
			k := min(d.Experts, 16)
			p.ring[l][r].uses, p.ring[l][r].fresh = make([]int32, 0, k), make([]int32, 0, k)
		}
	}
	for k := range p.hs {
		off := int32(k/2) * int32(d.Experts)
		p.hs[k] = newHeap(d.Experts, func(a, b int32) bool { return p.within(off+a, off+b) })
	}
	p.top = newHeap(2*L, func(x, y int32) bool { return p.cross(p.first(x), p.first(y)) })
	return p
}

func (p *predict) Name() string { return "predict" }

func (p *predict) layer(i int32) int { return int(i) / p.d.Experts }

// member reports whether i was used at its layer's last run.
func (p *predict) member(i int32) bool {
	l := p.layer(i)
	return p.e[l] != math.MinInt64 && p.last[i] == p.e[l]
}

// q is the estimated probability that the layer's next run draws i afresh.
func (p *predict) q(i int32) float64 {
	l := p.layer(i)
	h := p.pick[l]
	if math.IsInf(p.u[h][i], -1) {
		return 0
	}
	return qOf(h, min(math.Exp(p.u[h][i]-p.runs[h][l]), 1), p.rho[l])
}

// qOf is q for estimate h's fraction x of the layer's runs, for reuse r.
// For a use count (x = f) q = f(1 − r)/(1 − rf). For a fresh-draw count,
// in the model's stationary state x = q(1 − f), where f = q/(1 − r + rq)
// is the fraction of runs that follow one that used it, so q is the
// smaller root of (1 − r)q² − ((1 − r) − rx)q + (1 − r)x = 0 (the vertex
// where x exceeds what any q gives).
func qOf(h int, x, r float64) float64 {
	if !countsFresh(h) {
		return x * (1 - r) / (1 - r*x)
	}
	a := 1 - r
	b := a - r*x
	d := b*b - 4*a*a*x
	return min((b-math.Sqrt(max(d, 0)))/(2*a), 1)
}

// prob is the estimated probability of i's use at its layer's next run.
func (p *predict) prob(i int32) float64 {
	q := p.q(i)
	if p.member(i) {
		r := p.rho[p.layer(i)]
		return r + (1-r)*q
	}
	return q
}

func (p *predict) within(a, b int32) bool {
	u := p.u[p.pick[p.layer(a)]]
	if x, y := u[a], u[b]; x != y {
		return x < y
	}
	if x, y := p.last[a], p.last[b]; x != y {
		return x < y
	}
	return a < b
}

func (p *predict) cross(a, b int32) bool {
	if x, y := p.prob(a), p.prob(b); x != y {
		return x < y
	}
	if x, y := p.stale(a), p.stale(b); x != y {
		return x > y
	}
	return a < b
}

// stale is 2·(its layer's last run) − (last use), saturating: larger is
// staler, and of equally stale ones the one whose layer ran last.
func (p *predict) stale(i int32) int64 {
	e, t := p.e[p.layer(i)], p.last[i]
	if e == math.MinInt64 {
		e = -1
	}
	if t == math.MinInt64 {
		return math.MaxInt64
	}
	return 2*e - t
}

func (p *predict) class(i int32) int {
	k := 2 * p.layer(i)
	if p.member(i) {
		k++
	}
	return k
}

// first is the dense index of class heap k's first expert (k non-empty).
func (p *predict) first(k int32) int32 {
	return k/2*int32(p.d.Experts) + p.hs[k].h[0]
}

func (p *predict) local(i int32) int32 { return i % int32(p.d.Experts) }

// refresh restores the order of the class heaps after class heap k changed.
func (p *predict) refresh(k int) {
	switch nonEmpty, in := len(p.hs[k].h) > 0, p.top.has(int32(k)); {
	case nonEmpty && in:
		p.top.fix(int32(k))
	case nonEmpty:
		p.top.push(int32(k))
	case in:
		p.top.remove(int32(k))
	}
}

// attach puts the resident, unpinned i in its class heap.
func (p *predict) attach(i int32) {
	k := p.class(i)
	p.hs[k].push(p.local(i))
	p.refresh(k)
}

// detach takes i out of its class heap, reporting whether it was in one.
func (p *predict) detach(i int32) bool {
	for k := 2 * p.layer(i); k < 2*p.layer(i)+2; k++ {
		if x := p.local(i); p.hs[k].has(x) {
			p.hs[k].remove(x)
			p.refresh(k)
			return true
		}
	}
	return false
}

// run records that layer l runs at now: the estimates take in the run that
// ended, and the experts of its set leave the class of the last set.
func (p *predict) run(l int, now int64) {
	if now <= p.e[l] {
		return
	}
	p.shift(l, now)
	if e := p.e[l]; e != math.MinInt64 {
		if p.pe[l] != math.MinInt64 {
			g := math.Exp(-p.rate * float64(now-e))
			p.a[l] = p.a[l]*g + p.kept[l]
			p.b[l] = p.b[l]*g + p.np[l]
			p.c[l] = p.c[l]*g + p.qs[l]
			if d := p.b[l] - p.c[l]; d > 0 {
				p.rho[l] = min(max((p.a[l]-p.c[l])/d, 0), 0.99)
			}
		}
		// The chance part of the next run's reuse: each member's q without
		// its use at e.
		h := p.pick[l]
		w := p.rates[h] * float64(e)
		var qs float64
		if runs := logSubExp(p.runs[h][l], w); !math.IsInf(runs, -1) {
			r := p.rho[l]
			for _, i := range p.members[l] {
				u := p.u[h][i]
				if !countsFresh(h) || p.fr[i] {
					u = logSubExp(u, w)
				}
				if !math.IsInf(u, -1) {
					qs += qOf(h, min(math.Exp(u-runs), 1), r)
				}
			}
		}
		p.np[l], p.qs[l] = float64(len(p.members[l])), qs
	}
	p.kept[l] = 0
	if p.e[l] != math.MinInt64 {
		g := math.Exp(-p.rate / scoreScale * float64(now-p.e[l]))
		for h := range nEst {
			p.score[h][l] *= g
		}
	}
	p.pe[l], p.e[l] = p.e[l], now
	for h := range nEst {
		t := p.rates[h] * float64(now)
		p.den[h][l] = logAddExp(p.runs[h][l], math.Log(predictPrior)+t)
		p.runs[h][l] = logAddExp(p.runs[h][l], t)
	}
	p.reset(l, now)
	// The estimate in use is the one that predicted the layer's last runs
	// best.
	if best := p.best(l); best != p.pick[l] {
		p.pick[l] = best
		p.hs[2*l].heapify()
		p.hs[2*l+1].heapify()
	}
	// The members are no longer of the last set: move those in a heap.
	for _, i := range p.members[l] {
		if x := p.local(i); p.hs[2*l+1].has(x) {
			p.hs[2*l+1].remove(x)
			p.hs[2*l].push(x)
		}
	}
	p.members[l] = p.members[l][:0]
	p.fresh[l] = p.fresh[l][:0]
	p.refresh(2*l + 1) // first: it may have emptied
	p.refresh(2 * l)
}

// use records that id is used at now.
func (p *predict) use(id ExpertID, now int64) {
	l, i := id.Layer, int32(p.d.Index(id))
	p.run(l, now)
	if p.last[i] == now {
		return
	}
	back := p.detach(i)
	if p.pe[l] != math.MinInt64 && p.last[i] == p.pe[l] {
		p.kept[l]++
	}
	// A fresh draw (not a reuse) scores each estimate's prediction of it.
	fresh := p.pe[l] == math.MinInt64 || p.last[i] != p.pe[l]
	prior := math.Log(predictPrior * max(p.np[l], 1) / float64(p.d.Experts))
	for h := range nEst {
		t := p.rates[h] * float64(now)
		if fresh {
			if !countsFresh(h) {
				p.score[h][l] += logAddExp(p.u[h][i], prior+t) - p.den[h][l]
			} else {
				// Its prior is the fresh part of a set, and it is scored by
				// the use fraction its q implies, f = q/(1 − ρ + ρq), to
				// compare with the use counts.
				r := p.rho[l]
				x := logAddExp(p.u[h][i], prior+math.Log1p(-r)+t) - p.den[h][l]
				q := qOf(h, min(math.Exp(x), 1), r)
				p.score[h][l] += math.Log(q / (1 - r + r*q))
			}
		}
		if fresh || !countsFresh(h) {
			p.u[h][i] = logAddExp(p.u[h][i], t)
		}
	}
	p.fr[i] = fresh
	if fresh {
		p.evidence(l, i, now)
	}
	p.last[i] = now
	p.members[l] = append(p.members[l], i)
	if back {
		p.attach(i)
	}
}

// reset restarts the growing estimates (the last of each kind) of layer l
// from the shortest of their kind when it has predicted the recent fresh
// draws better by resetNats: the popularity has changed.
func (p *predict) reset(l int, now int64) {
	p.resetFrom(l, now, 0, nUse-1)
	p.resetFrom(l, now, nUse, nEst-1)
}

// resetFrom restarts estimate g of layer l from s when s has predicted the
// recent fresh draws better by resetNats.
func (p *predict) resetFrom(l int, now int64, s, g int) {
	if !(p.score[s][l]-p.score[g][l] > resetNats) || p.rates[g] != 0 {
		return
	}
	t := p.rates[s] * float64(now)
	off := l * p.d.Experts
	for i := off; i < off+p.d.Experts; i++ {
		p.u[g][i] = p.u[s][i] - t
	}
	p.runs[g][l] = p.runs[s][l] - t
	p.den[g][l] = p.den[s][l] - t
	p.score[g][l] = p.score[s][l]
	if p.pick[l] == g {
		p.hs[2*l].heapify()
		p.hs[2*l+1].heapify()
	}
}

// best is the estimate with the highest score on layer l (ties: the
// earlier).
func (p *predict) best(l int) int {
	b := 0
	for h := 1; h < nEst; h++ {
		if p.lead(h, l) > p.lead(b, l) {
			b = h
		}
	}
	return b
}

// lead is estimate h's score on layer l less freshNats if it counts fresh
// draws: a fresh-draw count is used only where it predicts the layer's
// fresh draws clearly better than the use counts, which have more data.
func (p *predict) lead(h, l int) float64 {
	if countsFresh(h) {
		return p.score[h][l] - freshNats
	}
	return p.score[h][l]
}

func (p *predict) Insert(id ExpertID, _ int64) { p.attach(p.insert(id)) }

func (p *predict) Touch(id ExpertID, now int64) {
	p.resident("Touch", id)
	p.use(id, now)
}

func (p *predict) Remove(id ExpertID) { p.detach(p.remove(id)) }

func (p *predict) Victim(incoming ExpertID, now int64) (ExpertID, bool) {
	if p.d.Valid(incoming) {
		p.use(incoming, now)
	}
	k, ok := p.top.top()
	if !ok {
		return ExpertID{}, false
	}
	return p.d.ID(int(p.first(k))), true
}

func (p *predict) Pin(id ExpertID) { p.detach(p.pin(id)) }

func (p *predict) Unpin(id ExpertID) { p.attach(p.unpin(id)) }

// logSubExp is log(e^a − e^b) for b ≤ a (−Inf if they are equal).
func logSubExp(a, b float64) float64 {
	if math.IsInf(b, -1) {
		return a
	}
	if b >= a {
		return math.Inf(-1)
	}
	return a + math.Log(-math.Expm1(b-a))
}

// evidence adds the fresh draw i of layer l to the pooled shift test: the
// log-likelihood ratio of the draw under the model fitted since the pool's
// candidate change point and the one fitted since the last shift (each the
// posterior predictive of a categorical with a uniform prior of shiftPrior
// draws per expert), less shiftMargin.
func (p *predict) evidence(l int, i int32, now int64) {
	const a = shiftPrior
	ea := a * float64(p.d.Experts)
	llr := math.Log((p.cf[i]+a)*(p.nl[l]+ea)/((p.nf[l]+ea)*(p.cl[i]+a))) - shiftMargin
	p.pool.add(now/p.spt, llr)
	p.cf[i]++
	p.nf[l]++
	p.cl[i]++
	p.nl[l]++
	p.fresh[l] = append(p.fresh[l], i)
}

// shift runs before layer l's run at now: it keeps the run that ended,
// moves the pool to now's token, drops from the fresh model the runs before
// the pool's candidate change point, and restarts the layer's estimates
// from the change point of a shift the pool detected since the layer's
// last run.
func (p *predict) shift(l int, now int64) {
	ring := p.ring[l]
	if e := p.e[l]; e != math.MinInt64 {
		n := p.nrun[l]
		if n-p.fhead[l] >= shiftWindow {
			p.drop(l, n-shiftWindow+1)
		}
		r := &ring[n%shiftWindow]
		r.tok, r.step = e/p.spt, e
		r.uses = append(r.uses[:0], p.members[l]...)
		r.fresh = append(r.fresh[:0], p.fresh[l]...)
		p.nrun[l]++
	}
	p.pool.advance(now / p.spt)
	for p.fhead[l] < p.nrun[l] && ring[p.fhead[l]%shiftWindow].tok < p.pool.tau {
		p.drop(l, p.fhead[l]+1)
	}
	if p.ep[l] == p.pool.epoch {
		return
	}
	p.ep[l] = p.pool.epoch
	off := l * p.d.Experts
	for i := off; i < off+p.d.Experts; i++ {
		p.cl[i] = 0
		for h := range nEst {
			p.u[h][i] = math.Inf(-1)
		}
	}
	p.nl[l] = 0
	for h := range nEst {
		p.runs[h][l] = math.Inf(-1)
		p.score[h][l] = 0
	}
	for n := max(p.nrun[l]-shiftWindow, 0); n < p.nrun[l]; n++ {
		r := &ring[n%shiftWindow]
		if r.tok < p.pool.start {
			continue
		}
		for _, i := range r.fresh {
			p.cl[i]++
			p.nl[l]++
		}
		for h := range nEst {
			t := p.rates[h] * float64(r.step)
			p.runs[h][l] = logAddExp(p.runs[h][l], t)
			from := r.uses
			if countsFresh(h) {
				from = r.fresh
			}
			for _, i := range from {
				p.u[h][i] = logAddExp(p.u[h][i], t)
			}
		}
	}
	p.hs[2*l].heapify()
	p.hs[2*l+1].heapify()
}

// drop takes layer l's runs from the oldest counted in the fresh model up
// to (not including) run number to out of it.
func (p *predict) drop(l int, to int64) {
	for ; p.fhead[l] < to; p.fhead[l]++ {
		for _, i := range p.ring[l][p.fhead[l]%shiftWindow].fresh {
			p.cf[i]--
			p.nf[l]--
		}
	}
}
