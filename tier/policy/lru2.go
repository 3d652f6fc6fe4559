package policy

import "math"

// lru2 is LRU-K with K = 2: evict the expert whose second most recent access
// is oldest; experts accessed only once have none and go first, in LRU order.
// Access history is kept for non-resident experts too. Like the frequency
// family it measures age in runs of the expert's own layer (2e − access,
// with e its layer's last run; see freq).
type lru2 struct {
	base
	last, pen []int64
	e         []int64
	h         lheap
}

func newLRU2(d Dims) *lru2 {
	p := &lru2{base: newBase(d), last: make([]int64, d.N()), pen: make([]int64, d.N()), e: make([]int64, d.Layers)}
	for i := range p.pen {
		p.pen[i], p.last[i] = math.MinInt64, math.MinInt64
	}
	for l := range p.e {
		p.e[l] = int64(l - d.Layers)
	}
	p.h = newLHeap(d, p.within, p.cross)
	return p
}

func (p *lru2) within(a, b int32) bool {
	if x, y := p.pen[a], p.pen[b]; x != y {
		return x < y
	}
	if x, y := p.last[a], p.last[b]; x != y {
		return x < y
	}
	return a < b
}

func (p *lru2) cross(a, b int32) bool {
	ea, eb := p.e[a/int32(p.d.Experts)], p.e[b/int32(p.d.Experts)]
	na, nb := p.pen[a] == math.MinInt64, p.pen[b] == math.MinInt64
	if na != nb {
		return na // no second access: first
	}
	if !na {
		if x, y := stale2(ea, p.pen[a]), stale2(eb, p.pen[b]); x != y {
			return x > y
		}
	}
	if x, y := stale2(ea, p.last[a]), stale2(eb, p.last[b]); x != y {
		return x > y
	}
	return a < b
}

// stale2 is 2e − u, the leaststale order of a use at u in a layer that last
// ran at e; an expert never used (u = MinInt64) is the stalest.
func stale2(e, u int64) int64 {
	if u == math.MinInt64 {
		return math.MaxInt64
	}
	return 2*e - u
}

func (p *lru2) ran(l int, now int64) {
	if now > p.e[l] {
		p.e[l] = now
		p.h.refresh(int32(l))
	}
}

func (p *lru2) Name() string { return "lru2" }

func (p *lru2) Insert(id ExpertID, _ int64) { p.h.push(p.insert(id)) }

func (p *lru2) Touch(id ExpertID, now int64) {
	i := p.resident("Touch", id)
	if now > p.last[i] {
		p.pen[i], p.last[i] = p.last[i], now
	}
	if p.h.has(i) {
		p.h.fix(i)
	}
	p.ran(id.Layer, now)
}

func (p *lru2) Remove(id ExpertID) {
	if i := p.remove(id); p.h.has(i) {
		p.h.remove(i)
	}
}

func (p *lru2) Victim(incoming ExpertID, now int64) (ExpertID, bool) {
	if l := incoming.Layer; l >= 0 && l < p.d.Layers {
		p.ran(l, now)
	}
	i, ok := p.h.top()
	if !ok {
		return ExpertID{}, false
	}
	return p.d.ID(int(i)), true
}

func (p *lru2) Pin(id ExpertID)   { p.h.remove(p.pin(id)) }
func (p *lru2) Unpin(id ExpertID) { p.h.push(p.unpin(id)) }
