package policy

import "math"

// freq is the frequency family: lfu (plain counts), lfu-decay (exponentially
// aged counts), heat (aged counts that start from a heat ledger) and static
// (the ledger alone). Counts are kept for every expert, resident or not.
//
// Aged counts are kept in the log domain: an access at step t adds weight
// e^(rate·t) with rate = ln 2 / half-life, so every count halves each
// half-life relative to a new access, and the order of experts never has to
// be recomputed as time passes.
//
// Layers run in turn, so with a global capacity an expert of the layer about
// to run was last used almost a token before one of the layer that just ran,
// though both are equally fresh. The family therefore measures age in runs
// of the expert's own layer: a count is compared as of its layer's last run
// e (log count − rate·e), and ties go as in leaststale (2e − last use,
// largest first). Within one layer this is the plain order.
//
// heat also protects recency: an expert used at its layer's last run is
// fresh, and fresh experts are evicted only when no stale one is left (each
// class in the order above). Without it a frequency order evicts the
// experts the previous token just brought in, which are the likeliest to be
// reused, whenever the capacity is shared by all layers.
type freq struct {
	base
	name    string
	score   []float64
	last    []int64 // last use
	e       []int64 // last run, per layer
	rate    float64 // 0: plain counts
	static  bool
	protect bool
	fresh   [][]int32 // per layer: experts used at its last run (protect)
	h       lheap
}

func newFreq(d Dims, name string, o Options, decay, static bool) (*freq, error) {
	n := d.N()
	f := &freq{base: newBase(d), name: name, score: make([]float64, n), last: make([]int64, n), e: make([]int64, d.Layers), static: static}
	if name == "heat" {
		f.protect = true
		f.fresh = make([][]int32, d.Layers)
	}
	if decay {
		f.rate = math.Ln2 / (o.HalfLifeTokens * float64(o.StepsPerToken))
		for i := range f.score {
			f.score[i] = math.Inf(-1)
		}
	}
	for l := range f.e {
		f.e[l] = int64(l - d.Layers)
	}
	if o.Heat != nil && (name == "heat" || name == "static") {
		var sum float64
		for _, h := range o.Heat {
			sum += h
		}
		if mean := sum / float64(n); mean > 0 {
			for i, h := range o.Heat {
				c := o.PriorWeight * h / mean
				if decay {
					f.score[i] = math.Log(c) // weight e^0 at step 0
				} else {
					f.score[i] = c
				}
			}
		}
	}
	f.h = newLHeap(d, f.within, f.cross)
	return f, nil
}

func (f *freq) layer(i int32) int32 { return i / int32(f.d.Experts) }

// isFresh reports whether a (protected) expert was used at its layer's last
// run.
func (f *freq) isFresh(a int32) bool { return f.protect && f.last[a] >= f.e[f.layer(a)] }

func (f *freq) within(a, b int32) bool {
	if fa, fb := f.isFresh(a), f.isFresh(b); fa != fb {
		return fb
	}
	if sa, sb := f.score[a], f.score[b]; sa != sb {
		return sa < sb
	}
	if la, lb := f.last[a], f.last[b]; la != lb {
		return la < lb
	}
	return a < b
}

func (f *freq) cross(a, b int32) bool {
	if fa, fb := f.isFresh(a), f.isFresh(b); fa != fb {
		return fb
	}
	ea, eb := f.e[f.layer(a)], f.e[f.layer(b)]
	sa, sb := f.score[a], f.score[b]
	if f.rate > 0 && !math.IsInf(sa, -1) && !math.IsInf(sb, -1) {
		sa, sb = sa-f.rate*float64(ea), sb-f.rate*float64(eb)
	}
	if sa != sb {
		return sa < sb
	}
	if ka, kb := 2*ea-f.last[a], 2*eb-f.last[b]; ka != kb {
		return ka > kb
	}
	return a < b
}

// ran records that layer l runs at now: the experts fresh from its previous
// run turn stale unless used again.
func (f *freq) ran(l int, now int64) {
	if now <= f.e[l] {
		return
	}
	f.e[l] = now
	if f.protect {
		for _, i := range f.fresh[l] {
			if f.h.has(i) {
				f.h.fix(i)
			}
		}
		f.fresh[l] = f.fresh[l][:0]
	}
	f.h.refresh(int32(l))
}

func (f *freq) Name() string { return f.name }

// Insert is not a use: the expert counts as last used at its layer's last
// run until the Touch of the access.
func (f *freq) Insert(id ExpertID, _ int64) {
	i := f.insert(id)
	f.last[i] = f.e[id.Layer]
	if f.protect {
		f.fresh[id.Layer] = append(f.fresh[id.Layer], i)
	}
	f.h.push(i)
}

func (f *freq) Touch(id ExpertID, now int64) {
	i := f.resident("Touch", id)
	switch {
	case f.static:
	case f.rate > 0:
		f.score[i] = logAddExp(f.score[i], f.rate*float64(now))
	default:
		f.score[i]++
	}
	f.ran(id.Layer, now)
	f.last[i] = now
	if f.protect {
		f.fresh[id.Layer] = append(f.fresh[id.Layer], i)
	}
	if f.h.has(i) {
		f.h.fix(i)
	}
}

func (f *freq) Remove(id ExpertID) {
	if i := f.remove(id); f.h.has(i) {
		f.h.remove(i)
	}
}

func (f *freq) Victim(incoming ExpertID, now int64) (ExpertID, bool) {
	if l := incoming.Layer; l >= 0 && l < f.d.Layers {
		f.ran(l, now)
	}
	i, ok := f.h.top()
	if !ok {
		return ExpertID{}, false
	}
	return f.d.ID(int(i)), true
}

func (f *freq) Pin(id ExpertID) { f.h.remove(f.pin(id)) }

// Unpin: the end of a lease counts as a use at the layer's last run.
func (f *freq) Unpin(id ExpertID) {
	i := f.unpin(id)
	if f.last[i] < f.e[id.Layer] {
		f.last[i] = f.e[id.Layer]
		if f.protect {
			f.fresh[id.Layer] = append(f.fresh[id.Layer], i)
		}
	}
	f.h.push(i)
}

// logAddExp is log(e^a + e^b).
func logAddExp(a, b float64) float64 {
	if math.IsInf(a, -1) {
		return b
	}
	if math.IsInf(b, -1) {
		return a
	}
	if a < b {
		a, b = b, a
	}
	return a + math.Log1p(math.Exp(b-a))
}
