package policy

// stale is leaststale, the layer-aware LRU (see the package documentation).
//
// With the layer clock (step = token·L + layer), let u be the step of an
// expert's last use and e the step at which its layer last ran. Its
// staleness, the number of runs of its layer since its last use, is
// (e − u)/L; among equally stale experts the one whose layer ran most
// recently (largest e) is next needed last. Both orders together are the
// order of 2e − u, largest first: e lies within the last L steps for every
// layer, so one more unit of staleness (L) always outweighs the difference
// in e. e is the same for all experts of a layer, so within a layer the
// order is plain LRU: each layer keeps an LRU list, and a heap over the
// layers orders their least recent experts by 2e − u.
type stale struct {
	base
	l  lists
	u  []int64 // last use, per expert
	e  []int64 // last run, per layer
	lh ixheap  // layers with unpinned residents
}

func newStale(d Dims) *stale {
	p := &stale{base: newBase(d), l: newLists(d.N(), d.Layers), u: make([]int64, d.N()), e: make([]int64, d.Layers)}
	for l := range p.e {
		p.e[l] = int64(l - d.Layers) // "ran in token −1"
	}
	p.lh = newHeap(d.Layers, p.firstLayer)
	return p
}

func (p *stale) key(layer int32) int64 {
	b, _ := p.l.back(int(layer))
	return 2*p.e[layer] - p.u[b]
}

func (p *stale) firstLayer(a, b int32) bool {
	if ka, kb := p.key(a), p.key(b); ka != kb {
		return ka > kb
	}
	return a < b
}

// refresh restores the layer heap after layer l's list or clock changed.
func (p *stale) refresh(l int) {
	_, nonEmpty := p.l.back(l)
	li := int32(l)
	switch in := p.lh.has(li); {
	case nonEmpty && in:
		p.lh.fix(li)
	case nonEmpty:
		p.lh.push(li)
	case in:
		p.lh.remove(li)
	}
}

func (p *stale) ran(l int, now int64) {
	if now > p.e[l] {
		p.e[l] = now
	}
}

func (p *stale) Name() string { return "leaststale" }

// Insert is not a use, nor a run of the layer (a warm-start fill is
// neither): the new expert counts as used at its layer's last run, which
// keeps the layer's list in order of u. The Touch of an access follows.
func (p *stale) Insert(id ExpertID, _ int64) {
	i := p.insert(id)
	p.u[i] = p.e[id.Layer]
	p.l.pushFront(id.Layer, i)
	p.refresh(id.Layer)
}

func (p *stale) Touch(id ExpertID, now int64) {
	i := p.resident("Touch", id)
	p.ran(id.Layer, now)
	p.u[i] = now
	if p.l.linked(i) {
		p.l.unlink(i)
		p.l.pushFront(id.Layer, i)
	}
	p.refresh(id.Layer)
}

func (p *stale) Remove(id ExpertID) {
	if i := p.remove(id); p.l.linked(i) {
		p.l.unlink(i)
	}
	p.refresh(id.Layer)
}

func (p *stale) Victim(incoming ExpertID, now int64) (ExpertID, bool) {
	if l := incoming.Layer; l >= 0 && l < p.d.Layers {
		p.ran(l, now)
		p.refresh(l)
	}
	l, ok := p.lh.top()
	if !ok {
		return ExpertID{}, false
	}
	i, _ := p.l.back(int(l))
	return p.d.ID(int(i)), true
}

func (p *stale) Pin(id ExpertID) {
	p.l.unlink(p.pin(id))
	p.refresh(id.Layer)
}

// Unpin returns id to the front of its layer's list; the end of a lease
// counts as a use at the layer's last run, which keeps each list in order
// of u.
func (p *stale) Unpin(id ExpertID) {
	i := p.unpin(id)
	p.u[i] = max(p.u[i], p.e[id.Layer])
	p.l.pushFront(id.Layer, i)
	p.refresh(id.Layer)
}
