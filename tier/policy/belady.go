package policy

// belady is Belady's MIN: evict the resident expert whose next use is
// furthest in the future (never used again first; ties by lower index). With
// demand fetching and the experts of one layer pinned together it is
// optimal (TestBeladyIsOptimal checks it against exhaustive search). It
// needs SetNext before every access: for evaluation only.
type belady struct {
	base
	next []int64
	h    ixheap
}

func newBelady(d Dims) *belady {
	p := &belady{base: newBase(d), next: make([]int64, d.N())}
	for i := range p.next {
		p.next[i] = NoNext
	}
	p.h = newHeap(d.N(), p.first)
	return p
}

func (p *belady) first(a, b int32) bool {
	if x, y := p.next[a], p.next[b]; x != y {
		return x > y
	}
	return a < b
}

func (p *belady) Name() string { return "belady" }

func (p *belady) SetNext(id ExpertID, next int64) {
	i := int32(p.d.Index(id))
	p.next[i] = next
	if p.h.has(i) {
		p.h.fix(i)
	}
}

func (p *belady) Insert(id ExpertID, _ int64) { p.h.push(p.insert(id)) }
func (p *belady) Touch(id ExpertID, _ int64)  { p.resident("Touch", id) }

func (p *belady) Remove(id ExpertID) {
	if i := p.remove(id); p.h.has(i) {
		p.h.remove(i)
	}
}

func (p *belady) Victim(ExpertID, int64) (ExpertID, bool) {
	i, ok := p.h.top()
	if !ok {
		return ExpertID{}, false
	}
	return p.d.ID(int(i)), true
}

func (p *belady) Pin(id ExpertID)   { p.h.remove(p.pin(id)) }
func (p *belady) Unpin(id ExpertID) { p.h.push(p.unpin(id)) }
