package policy

// lru evicts the least recently used expert. Pinned experts leave the list;
// the end of a lease counts as the expert's most recent use.
type lru struct {
	base
	l lists
}

func newLRU(d Dims) *lru { return &lru{base: newBase(d), l: newLists(d.N(), 1)} }

func (p *lru) Name() string { return "lru" }

func (p *lru) Insert(id ExpertID, _ int64) { p.l.pushFront(0, p.insert(id)) }

func (p *lru) Touch(id ExpertID, _ int64) {
	if i := p.resident("Touch", id); p.l.linked(i) {
		p.l.unlink(i)
		p.l.pushFront(0, i)
	}
}

func (p *lru) Remove(id ExpertID) {
	if i := p.remove(id); p.l.linked(i) {
		p.l.unlink(i)
	}
}

func (p *lru) Victim(ExpertID, int64) (ExpertID, bool) {
	i, ok := p.l.back(0)
	if !ok {
		return ExpertID{}, false
	}
	return p.d.ID(int(i)), true
}

func (p *lru) Pin(id ExpertID)   { p.l.unlink(p.pin(id)) }
func (p *lru) Unpin(id ExpertID) { p.l.pushFront(0, p.unpin(id)) }
