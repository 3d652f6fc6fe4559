package tier

import (
	"slices"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/weights"
)

// The device prefetch (Options.DevicePrefetch). A Stream's own copies into
// device slots start when its layer's routes are known, and its experts'
// compute waits for them; the next layer's copies cannot start before its
// routes, so without a prefetch the copy engine and the multiprocessors
// take turns. At the end of a Stream, the hinted experts of the next MoE
// layer (the engine's Hint: that layer's router on this layer's input,
// and the experts the previous token used there) that the RAM tier holds
// verified and the device level does not are admitted to the device level
// (under its policy, which never evicts a leased slot) and delivered to
// the consumer to fill on its queue (expertstream.Prefiller). Their copies
// then run beside the rest of this layer and the next layer's dense work;
// the next layer's Stream finds them as device hits.
//
// Which hinted experts are copied is policy.ReadAhead's rule with its own
// measures (Hierarchy.dra): a copy of a hint's rank is made when p·h > 1 −
// p, p the rank's measured precision over the hinted experts that were
// candidates, less one standard error; h is taken as 1 (a copy is queued
// as soon as this Stream's own are, and the next Stream waits for the
// device anyway); a copy the next Stream did not use cost one copy (the
// copy engine's time the next layer's own copies may queue behind, and a
// slot another expert held). The rule's kept measures copies evicted
// before their layer came. Nothing here changes what a layer computes: a
// prefetched slot holds the verified bytes of its expert, checked by the
// device like every fill (Options.VerifyCopies), and is bound by digest.

// prefillDevice acts on the device prefetch's pending hint (see above),
// after the Stream's own experts are consumed and before its leases end.
func (h *Hierarchy) prefillDevice(d *devLevel, pf expertstream.Prefiller, now int64) error {
	h.mu.Lock()
	layer, hint := h.dhintLayer, h.dhint // Hint checked the layer
	h.dhint = h.dhint[:0]                // acted on once
	if len(hint) == 0 {
		h.mu.Unlock()
		return nil
	}
	h.dra.Given(layer, hint)
	var fills []use          // each leased on the device (to fill) and in the RAM tier (the copy)
	for i, x := range hint { // Hint kept only experts of the layer
		id := weights.ExpertID{Layer: layer, Expert: x}
		if e := h.resident[h.dims.Index(id)]; d.cache.Contains(id) || e == nil || e.state != ready {
			continue // on the device already (a hint named twice, too), or not verified in RAM: its Stream finds it
		}
		decision, place := h.dra.Decide(i)
		if decision == policy.Skip || decision == policy.BackedOff {
			h.count(func(s *Stats) { s.DevicePrefetchSkipped++ })
			continue
		}
		u := use{x: x}
		if err := d.leaseLocked(h, &u, id, now); err != nil || !u.dfill {
			if u.d != nil {
				d.releaseLocked(h, layer, []use{u})
			}
			continue // every slot leased, or another Stream fills it
		}
		if err := h.leaseLocked(&u, id, now); err != nil || u.e == nil || u.e.state != ready {
			d.releaseLocked(h, layer, []use{u}) // the slot, never filled, is failed: its next use fills it
			h.releaseLocked(layer, []use{u})
			continue
		}
		u.d.ahead, u.d.place = true, place
		fills = append(fills, u)
	}
	h.mu.Unlock()

	var firstErr error
	for i := range fills {
		f := fills[i : i+1]
		de, ve := f[0].d, f[0].e.ve
		err := firstErr
		if err == nil {
			ref := h.refs[de.k]
			err = pf.Prefill(expertstream.Placed{ID: ref.ID(), Digest: ref.Digest(), Host: ve, Slot: de.slot})
		}
		h.mu.Lock()
		if err == nil {
			de.state = ready
			h.dahead = append(h.dahead, de)
		} else {
			de.state, de.ahead = failed, false
			if firstErr == nil {
				firstErr = err
			}
		}
		h.loaded.Broadcast()
		d.releaseLocked(h, layer, f)
		h.releaseLocked(layer, f)
		h.mu.Unlock()
		if err == nil {
			n := ve.Bytes()
			h.count(func(s *Stats) { s.DevicePrefetched++; s.Device.BytesCopied += n })
		}
	}
	return firstErr
}

// scoreDeviceAheadLocked scores the device prefetch's hint for layer
// against experts, the layer's uses now, and measures its copies for layer
// made since the layer's last Stream: used if they are among experts and
// still in their slot, else not.
func (h *Hierarchy) scoreDeviceAheadLocked(d *devLevel, layer int, experts []int) {
	if !h.opt.DevicePrefetch {
		return
	}
	h.dra.Score(layer, experts)
	n := 0
	for _, e := range h.dahead {
		id := h.dims.ID(e.k)
		if id.Layer != layer {
			h.dahead[n] = e
			n++
			continue
		}
		wanted := slices.Contains(experts, id.Expert)
		e.ahead = false
		if wanted && d.entries[e.k] == e {
			h.dra.Used(layer, e.place, 1)
			h.count(func(s *Stats) { s.DevicePrefetchUsed++ })
			continue
		}
		h.dra.Unused(layer, wanted)
		h.count(func(s *Stats) { s.DevicePrefetchUnused++ })
	}
	clear(h.dahead[n:])
	h.dahead = h.dahead[:n]
}
