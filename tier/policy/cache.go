package policy

import (
	"errors"
	"fmt"
)

// Partition says how a tier's capacity is shared between layers.
type Partition int

const (
	// Global: one capacity for the experts of all layers.
	Global Partition = iota
	// PerLayer: the capacity split evenly between the layers (the first
	// capacity mod layers layers get one slot more), each layer with its own
	// policy instance.
	PerLayer
)

func (p Partition) String() string {
	switch p {
	case Global:
		return "global"
	case PerLayer:
		return "per-layer"
	}
	return fmt.Sprintf("Partition(%d)", int(p))
}

// ParsePartition parses "global" or "per-layer".
func ParsePartition(s string) (Partition, error) {
	switch s {
	case "global":
		return Global, nil
	case "per-layer":
		return PerLayer, nil
	}
	return 0, fmt.Errorf("partition %q: want global or per-layer", s)
}

// ErrAllPinned is returned by Request when an expert must be admitted but
// every resident expert of its partition is pinned: the capacity is smaller
// than the leases held at once.
var ErrAllPinned = errors.New("every resident expert is pinned")

// Announcer is implemented by policies that use the whole set of experts a
// layer asks for at once (oracle): RequestSet announces every expert of the
// set, resident or not, before it leases any. An announcement tells what
// the running layer uses; the Touch of each use still follows.
type Announcer interface {
	Announce(id ExpertID, now int64)
}

// Outcome is what one Request did.
type Outcome struct {
	Hit     bool     // the expert was resident
	Evict   bool     // Evicted was evicted to admit it
	Evicted ExpertID // valid if Evict
}

// Cache is one tier of resident experts: a capacity, a partitioning and a
// policy per partition, with leases. Request pins the expert (resident from
// then until the matching Release); only unpinned experts are evicted, and
// the tier never holds more than its capacity. A Cache is not safe for
// concurrent use.
type Cache struct {
	dims  Dims
	part  Partition
	name  string
	pols  []Policy
	orcl  []Oracle    // nil entries for online policies
	ann   []Announcer // nil entries for policies that take no announcements
	caps  []int
	pins  []int32 // per expert, model-wide dense index
	total int
}

// NewCache returns an empty tier of capacity experts of shape d, managed by
// the named policy. With PerLayer each layer gets capacity/d.Layers slots
// (the first capacity mod d.Layers layers one more) and must get at least
// one.
func NewCache(d Dims, capacity int, part Partition, name string, o Options) (*Cache, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	if capacity <= 0 || capacity > d.N() {
		return nil, fmt.Errorf("policy: capacity %d experts: want 1 to %d (%d layers × %d experts)", capacity, d.N(), d.Layers, d.Experts)
	}
	if NeedsHeat(name) || o.Heat != nil {
		if err := checkHeat(d, o.Heat); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
	}
	if NeedsRouting(name) {
		if err := o.Routing.check(d, name == "oracle"); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
	}
	c := &Cache{dims: d, part: part, name: name, pins: make([]int32, d.N()), total: capacity}
	switch part {
	case Global:
		p, err := New(name, d, o)
		if err != nil {
			return nil, err
		}
		c.add(p, capacity)
	case PerLayer:
		if capacity < d.Layers {
			return nil, fmt.Errorf("policy: capacity %d experts split per layer over %d layers leaves layers with no slot", capacity, d.Layers)
		}
		ld := Dims{Layers: 1, Experts: d.Experts}
		lo := o
		if lo.StepsPerToken == 0 {
			lo.StepsPerToken = d.Layers
		}
		lo.pool = newShiftPool()
		for l := range d.Layers {
			if o.Heat != nil {
				lo.Heat = o.Heat[l*d.Experts : (l+1)*d.Experts]
			}
			if NeedsRouting(name) {
				lo.Routing = o.Routing.layer(d, l)
			}
			p, err := New(name, ld, lo)
			if err != nil {
				return nil, err
			}
			n := capacity / d.Layers
			if l < capacity%d.Layers {
				n++
			}
			c.add(p, n)
		}
	default:
		return nil, fmt.Errorf("policy: unknown partition %v", part)
	}
	return c, nil
}

func (c *Cache) add(p Policy, capacity int) {
	c.pols = append(c.pols, p)
	o, _ := p.(Oracle)
	c.orcl = append(c.orcl, o)
	a, _ := p.(Announcer)
	c.ann = append(c.ann, a)
	c.caps = append(c.caps, capacity)
}

// Dims is the shape of the experts the cache holds.
func (c *Cache) Dims() Dims { return c.dims }

// Policy is the name of the cache's policy.
func (c *Cache) Policy() string { return c.name }

// Partition is how the capacity is split.
func (c *Cache) Partition() Partition { return c.part }

// Capacity is the number of experts the cache may hold.
func (c *Cache) Capacity() int { return c.total }

// PartitionCapacity is the capacity of the partition that holds layer's
// experts.
func (c *Cache) PartitionCapacity(layer int) int { return c.caps[c.slot(layer)] }

// Len is the number of resident experts.
func (c *Cache) Len() int {
	n := 0
	for _, p := range c.pols {
		n += p.Len()
	}
	return n
}

// slot and local map an expert to its partition and to the ID its
// partition's policy knows it by.
func (c *Cache) slot(layer int) int {
	if c.part == PerLayer {
		return layer
	}
	return 0
}

func (c *Cache) local(id ExpertID) ExpertID {
	if c.part == PerLayer {
		return ExpertID{Expert: id.Expert}
	}
	return id
}

func (c *Cache) global(layer int, id ExpertID) ExpertID {
	if c.part == PerLayer {
		return ExpertID{Layer: layer, Expert: id.Expert}
	}
	return id
}

func (c *Cache) check(id ExpertID) error {
	if !c.dims.Valid(id) {
		return fmt.Errorf("policy: %v is not an expert of a model of %d layers × %d experts", id, c.dims.Layers, c.dims.Experts)
	}
	return nil
}

// Contains reports whether id is resident.
func (c *Cache) Contains(id ExpertID) bool {
	return c.dims.Valid(id) && c.pols[c.slot(id.Layer)].Contains(c.local(id))
}

// Pinned reports how many leases hold id.
func (c *Cache) Pinned(id ExpertID) int {
	if !c.dims.Valid(id) {
		return 0
	}
	return int(c.pins[c.dims.Index(id)])
}

// Request uses id at step now (Dims.Step) and takes a lease on it: a hit
// touches it; a miss evicts the policy's victim if the partition is full and
// admits id. Either way id is pinned until Release.
func (c *Cache) Request(id ExpertID, now int64) (Outcome, error) {
	return c.request(id, now, NoNext, false)
}

// RequestNext is Request for offline evaluation: next is the step of id's
// next use after now (NoNext if none), passed to oracle policies (belady)
// and ignored by the others.
func (c *Cache) RequestNext(id ExpertID, now, next int64) (Outcome, error) {
	return c.request(id, now, next, true)
}

func (c *Cache) request(id ExpertID, now, next int64, oracle bool) (Outcome, error) {
	if err := c.check(id); err != nil {
		return Outcome{}, err
	}
	s := c.slot(id.Layer)
	p, lid := c.pols[s], c.local(id)
	if o := c.orcl[s]; o != nil {
		if !oracle {
			return Outcome{}, fmt.Errorf("policy %s needs the next use of every access (RequestNext)", c.name)
		}
		o.SetNext(lid, next)
	}
	var out Outcome
	if p.Contains(lid) {
		out.Hit = true
		p.Touch(lid, now)
	} else {
		if p.Len() >= c.caps[s] {
			v, ok := p.Victim(lid, now)
			if !ok {
				return Outcome{}, fmt.Errorf("policy: admit %v: %w (%d of %d slots of %s)", id, ErrAllPinned, p.Len(), c.caps[s], c.partName(s))
			}
			p.Remove(v)
			out.Evict, out.Evicted = true, c.global(id.Layer, v)
		}
		p.Insert(lid, now)
		p.Touch(lid, now)
	}
	i := c.dims.Index(id)
	if c.pins[i] == 0 {
		p.Pin(lid)
	}
	c.pins[i]++
	return out, nil
}

// RequestSet leases every expert of ids, the experts one layer needs at
// step now, as Request does for each, but the resident ones first: the
// router names a layer's experts together, and admitting a missing one must
// not evict another the same layer is about to use. out[i] is the outcome
// for ids[i]. next, if not nil, holds each expert's next use (RequestNext).
// On error the leases already taken are kept; Release them.
func (c *Cache) RequestSet(ids []ExpertID, now int64, next []int64, out []Outcome) error {
	if len(out) != len(ids) || (next != nil && len(next) != len(ids)) {
		return fmt.Errorf("policy: RequestSet of %d experts with %d outcomes and %d next uses", len(ids), len(out), len(next))
	}
	for _, id := range ids {
		if err := c.check(id); err != nil {
			return err
		}
		if a := c.ann[c.slot(id.Layer)]; a != nil {
			a.Announce(c.local(id), now)
		}
	}
	for pass := range 2 {
		for i, id := range ids {
			if c.Contains(id) != (pass == 0) {
				continue
			}
			var err error
			if next != nil {
				out[i], err = c.request(id, now, next[i], true)
			} else {
				out[i], err = c.request(id, now, NoNext, false)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cache) partName(s int) string {
	if c.part == PerLayer {
		return fmt.Sprintf("layer %d's partition", s)
	}
	return "the tier"
}

// Release ends one lease on id taken by Request.
func (c *Cache) Release(id ExpertID) error {
	if err := c.check(id); err != nil {
		return err
	}
	i := c.dims.Index(id)
	if c.pins[i] == 0 {
		return fmt.Errorf("policy: release of %v, which holds no lease", id)
	}
	c.pins[i]--
	if c.pins[i] == 0 {
		c.pols[c.slot(id.Layer)].Unpin(c.local(id))
	}
	return nil
}

// Warm admits ids in order, without leases, while their partition has a free
// slot (it never evicts): the start-up fill of an empty tier, e.g. in
// WarmOrder from a heat ledger. Admission is not a use. It returns how many
// it admitted; an invalid ID is an error.
func (c *Cache) Warm(ids []ExpertID, now int64) (int, error) {
	n := 0
	for _, id := range ids {
		if err := c.check(id); err != nil {
			return n, err
		}
		s := c.slot(id.Layer)
		p, lid := c.pols[s], c.local(id)
		if p.Contains(lid) || p.Len() >= c.caps[s] {
			continue
		}
		p.Insert(lid, now)
		n++
	}
	return n, nil
}

// Remove drops id from the cache if it is resident and holds no lease
// (an exclusive level above took the expert), reporting whether it did. It
// is not an eviction: the policy did not choose it.
func (c *Cache) Remove(id ExpertID) (bool, error) {
	if err := c.check(id); err != nil {
		return false, err
	}
	s := c.slot(id.Layer)
	p, lid := c.pols[s], c.local(id)
	if !p.Contains(lid) || c.pins[c.dims.Index(id)] > 0 {
		return false, nil
	}
	p.Remove(lid)
	return true, nil
}
