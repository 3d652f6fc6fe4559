package policy

// fifo evicts the expert admitted longest ago, whatever its uses since: the
// policy the CUDA backend's own slots ran before the device level became a
// policy.Cache (kept for comparison, in the simulator and on the device).
// A pinned expert keeps its place in the order and is passed over.
type fifo struct {
	base
	l lists
}

func newFIFO(d Dims) *fifo { return &fifo{base: newBase(d), l: newLists(d.N(), 1)} }

func (p *fifo) Name() string { return "fifo" }

func (p *fifo) Insert(id ExpertID, _ int64) { p.l.pushFront(0, p.insert(id)) }

func (p *fifo) Touch(id ExpertID, _ int64) { p.resident("Touch", id) }

func (p *fifo) Remove(id ExpertID) {
	if i := p.remove(id); p.l.linked(i) {
		p.l.unlink(i)
	}
}

// Victim walks from the oldest admission, past pinned experts.
func (p *fifo) Victim(ExpertID, int64) (ExpertID, bool) {
	s := p.l.n
	for i := p.l.prev[s]; i != s; i = p.l.prev[i] {
		if !p.pinned[i] {
			return p.d.ID(int(i)), true
		}
	}
	return ExpertID{}, false
}

func (p *fifo) Pin(id ExpertID)   { p.pin(id) }
func (p *fifo) Unpin(id ExpertID) { p.unpin(id) }
