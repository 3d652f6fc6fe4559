package tier

import (
	"errors"
	"fmt"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/weights"
)

// The device level is the top of the hierarchy: a policy.Cache over a
// backend's expert slots (backend.SlotPool), with the same policies as the
// RAM tier (policy.Names), and the model tier/sim simulates. With device
// slots a use is looked up on the device first: a hit is delivered as a
// filled slot (the consumer binds it: no bytes move); a miss is admitted
// (evicting the policy's victim, whose slot it takes) and looked up in the
// RAM tier, a RAM miss read and hashed from storage, and the verified bytes
// are delivered with the slot for the consumer to fill on its own queue
// (the backend then hashes the copy on the device: Options.VerifyCopies).
// The RAM tier sees only device misses.
//
// Inclusive (the default) or exclusive: inclusive, the RAM tier keeps its
// copy of an expert the device took; exclusive, a device miss that hits the
// RAM tier takes the copy from it (dropped once the slot is filled), and a
// RAM miss is read through a staging buffer without being admitted to the
// RAM tier, so the two levels hold different experts. Without demotion
// (an expert the device evicts goes nowhere: its bytes are only on the
// device, where they were hashed, and coming back to the host they would
// have to be hashed again), exclusive leaves the RAM tier only prefetched
// and staged experts; the simulator (tarfa sim --exclusive) measures the
// difference on a trace, and inclusive wins on the 16 GiB card case, hence
// the default: 256 slots of the 122B's experts (16 GiB less 11.5 reserved),
// zipf:s=1.1,reuse=0.4 over 600 tokens, policy predict: 0.303 s/token and
// 28 032 storage reads inclusive, 0.765 s/token and 121 081 reads
// exclusive (the device's hit rate is the same, 36.9%; the RAM tier's falls
// from 76.8% to 0).
//
// A slot is refilled only when no Stream holds a lease on its expert, and
// the backend's FillSlot waits for every queue's last use of the slot, so a
// slot is never overwritten while a queue still reads it. A slot whose copy
// a check found changed (the device check of a fill, a scrub) holds
// nothing (SlotHolds is false; BindSlot refuses it): the next use fills it
// again, and a Stream that finds it emptied under a lease another Stream
// holds goes through the host path instead.

// devLevel is the device level's state, under Hierarchy.mu.
type devLevel struct {
	pool      backend.SlotPool
	cache     *policy.Cache
	entries   map[int]*devEntry // by dense index: the experts resident
	spare     []backend.Slot    // allocated slots holding no resident
	all       []backend.Slot
	slotBytes int64
	exclusive bool
	policy    string
}

// devEntry is one expert resident in a slot. state is loading while a
// Stream fills it, ready once the fill was delivered and consumed, failed
// when that Consume failed.
type devEntry struct {
	k     int
	slot  backend.Slot
	state int
	// ahead: filled by the device prefetch (devprefetch.go) at place
	// among its hint's copies, its outcome not measured yet
	ahead bool
	place int
}

// deviceLocked sets the device level up at the first Stream (the model's
// weights are resident by then, so the pool knows what the budget leaves):
// as many slots as the pool has room for, at most one per expert and
// Options.DeviceSlots. It returns the level, or nil when there is none.
func (h *Hierarchy) deviceLocked() (*devLevel, error) {
	if h.devDone {
		return h.devl, h.devErr
	}
	h.devDone = true
	pool := h.opt.Slots
	if pool == nil {
		return nil, nil
	}
	n := min(pool.SlotCapacity(h.recMax), h.dims.N())
	if h.opt.DeviceSlots > 0 {
		n = min(n, h.opt.DeviceSlots)
	}
	d := &devLevel{pool: pool, entries: map[int]*devEntry{}, slotBytes: h.recMax, exclusive: h.opt.Exclusive}
	for range n {
		s, err := pool.AllocSlot(h.recMax)
		if err != nil {
			break // the budget is reached: keep what there is
		}
		d.all = append(d.all, s)
	}
	if len(d.all) == 0 {
		return nil, nil
	}
	d.spare = append(d.spare, d.all...)
	d.policy = h.opt.DevicePolicy
	if d.policy == "" {
		d.policy = h.opt.Policy
	}
	if d.policy == "" {
		d.policy = policy.Default
	}
	part := h.opt.Partition
	if part == policy.PerLayer && len(d.all) < h.dims.Layers {
		part = policy.Global // too few slots to split between the layers
	}
	var err error
	if d.cache, err = policy.NewCache(h.dims, len(d.all), part, d.policy, h.opt.PolicyOptions); err != nil {
		for _, s := range d.all {
			pool.FreeSlot(s)
		}
		h.devErr = fmt.Errorf("tier: device level: %w", err)
		return nil, h.devErr
	}
	h.devl = d
	h.count(func(s *Stats) { s.Device.Capacity = len(d.all) })
	return d, nil
}

// leaseLocked takes a device lease on id for u: a resident slot that holds
// it (u.dhit), one another Stream is filling (u.dwait), or a slot to fill
// (u.dfill: admitted now, or emptied by a failed check). Every slot leased
// (ErrAllPinned), or a slot emptied under another Stream's lease: no lease,
// the host path.
func (d *devLevel) leaseLocked(h *Hierarchy, u *use, id weights.ExpertID, now int64) error {
	out, err := d.cache.Request(id, now)
	if errors.Is(err, policy.ErrAllPinned) {
		return nil
	}
	if err != nil {
		return err
	}
	if out.Evict {
		d.evictLocked(h, out.Evicted)
	}
	k := h.dims.Index(id)
	e := d.entries[k]
	if e == nil {
		s := d.spare[len(d.spare)-1]
		d.spare = d.spare[:len(d.spare)-1]
		e = &devEntry{k: k, slot: s, state: loading}
		d.entries[k] = e
		u.d, u.dfill = e, true
		return nil
	}
	switch {
	case e.state == loading:
		u.d, u.dwait = e, true
		return nil
	case e.state == ready && d.pool.SlotHolds(e.slot, h.refs[k].Digest()):
		u.d, u.dhit = e, true
		return nil
	}
	// A failed fill, or a copy a check emptied: fill it again, unless
	// another Stream holds a lease on it (it may be binding it).
	if d.cache.Pinned(id) > 1 {
		d.cache.Release(id)
		return nil
	}
	e.state = loading
	u.d, u.dfill = e, true
	return nil
}

// evictLocked returns an evicted expert's slot to the spares (it is
// unleased; the next fill of the slot waits for the queues that read it).
func (d *devLevel) evictLocked(h *Hierarchy, id weights.ExpertID) {
	k := h.dims.Index(id)
	if e := d.entries[k]; e != nil {
		d.spare = append(d.spare, e.slot)
		delete(d.entries, k)
	}
	h.count(func(s *Stats) { s.Device.Evictions++ })
}

// releaseLocked ends the device leases of a Stream, and with Exclusive
// drops the RAM-tier copies of the experts it filled slots with.
func (d *devLevel) releaseLocked(h *Hierarchy, layer int, uses []use) {
	for i := range uses {
		u := &uses[i]
		if u.d == nil {
			continue
		}
		id := weights.ExpertID{Layer: layer, Expert: u.x}
		d.cache.Release(id)
		if u.dfill && u.d.state == loading {
			// Never delivered (the Stream stopped at an error first).
			u.d.state = failed
			h.loaded.Broadcast()
		}
		if d.exclusive && u.dfill && u.d.state == ready && h.cache != nil {
			if ok, _ := h.cache.Remove(id); ok {
				if e := h.resident[u.d.k]; e != nil {
					h.releaseBufLocked(e)
					delete(h.resident, u.d.k)
				}
			}
		}
		u.d, u.dfill, u.dhit, u.dwait = nil, false, false, false
	}
}

// close frees the slots.
func (d *devLevel) close() {
	for _, s := range d.all {
		d.pool.FreeSlot(s)
	}
	d.all, d.spare, d.entries = nil, nil, nil
}
