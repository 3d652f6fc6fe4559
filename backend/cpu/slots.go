package cpu

import (
	"fmt"
	"sync"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// SetSlots makes the CPU a backend.SlotPool of up to n slots in host
// memory, each holding a real copy of an expert's bytes (FillSlot copies,
// BindSlot computes from the copy): the device level of the expert
// hierarchy, run on the host so that its logic is tested without a device.
// 0 (the default) offers none. It is an option for tests and benchmarks:
// the CPU computes from the verified bytes in place, so a copy is only
// slower.
func (c *CPU) SetSlots(n int) {
	c.slotMu.Lock()
	c.maxSlots = max(n, 0)
	c.slotMu.Unlock()
}

// hostSlot is one slot: its own copy of an expert's three matrices.
type hostSlot struct {
	c      *CPU
	bytes  int64
	id     weights.ExpertID
	digest jnf.Digest     // zero: holds nothing
	mats   [3]backend.Mat // views of the copies below
	u16    [3][]uint16    // the copies (reused by the next fill)
	f32    [3][]float32
	f8     [3][]byte // block-FP8 codes and scales
	scale  [3][]float32
	sdata  [3][]byte // the scales as the record stores them (Mat.ScaleData)
}

func (s *hostSlot) Bytes() int64 { return s.bytes }

var _ backend.SlotPool = (*CPU)(nil)
var _ backend.SlotQueue = (*Queue)(nil)

// SlotCapacity is the number of slots SetSlots allows that are not
// allocated.
func (c *CPU) SlotCapacity(n int64) int {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	if n <= 0 {
		return 0
	}
	return max(c.maxSlots-c.allocated, 0)
}

// AllocSlot allocates a slot for an expert of up to n bytes (its memory is
// taken at the first fill).
func (c *CPU) AllocSlot(n int64) (backend.Slot, error) {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	if c.allocated >= c.maxSlots {
		return nil, fmt.Errorf("cpu: all %d expert slots are allocated", c.maxSlots)
	}
	c.allocated++
	return &hostSlot{c: c, bytes: n}, nil
}

// FreeSlot releases s.
func (c *CPU) FreeSlot(s backend.Slot) {
	if hs, ok := s.(*hostSlot); ok && hs.c == c {
		c.slotMu.Lock()
		c.allocated--
		c.slotMu.Unlock()
		hs.c, hs.digest = nil, jnf.Digest{}
	}
}

// SlotHolds reports whether s holds the copy of digest.
func (c *CPU) SlotHolds(s backend.Slot, digest jnf.Digest) bool {
	hs, ok := s.(*hostSlot)
	if !ok || hs.c != c {
		return false
	}
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	return !hs.digest.IsZero() && hs.digest == digest
}

// slot resolves s to one of this CPU's slots.
func (q *Queue) slot(op string, s backend.Slot) (*hostSlot, error) {
	hs, ok := s.(*hostSlot)
	if !ok || hs == nil || hs.c != q.c {
		return nil, fmt.Errorf("cpu: %s: %T is not a slot of this backend", op, s)
	}
	return hs, nil
}

// FillSlot copies the expert's bytes into s.
func (q *Queue) FillSlot(s backend.Slot, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	hs, err := q.slot("FillSlot", s)
	if err != nil {
		return err
	}
	var v backend.Expert
	if err := backend.ViewExpert(&v, id, digest, gate, up, down, I, H); err != nil {
		return err
	}
	n := v.Gate.Host.StoredBytes() + v.Up.Host.StoredBytes() + v.Down.Host.StoredBytes()
	if n > hs.bytes {
		return fmt.Errorf("cpu: FillSlot: %v has %d bytes, the slot %d", id, n, hs.bytes)
	}
	q.c.slotMu.Lock()
	defer q.c.slotMu.Unlock()
	for j, w := range [3]*backend.Weight{&v.Gate, &v.Up, &v.Down} {
		m := w.Host
		switch {
		case m.Quantized():
			hs.f8[j] = append(hs.f8[j][:0], m.F8...)
			hs.scale[j] = append(hs.scale[j][:0], m.Scale...)
			hs.sdata[j] = append(hs.sdata[j][:0], m.ScaleData...)
			m.F8, m.Scale, m.ScaleData = hs.f8[j], hs.scale[j], hs.sdata[j]
		case m.F32 != nil:
			hs.f32[j] = append(hs.f32[j][:0], m.F32...)
			m.F32 = hs.f32[j]
		default:
			hs.u16[j] = append(hs.u16[j][:0], m.BF16...)
			m.BF16 = hs.u16[j]
		}
		hs.mats[j] = m
	}
	hs.id, hs.digest = id, digest
	q.filled = hs
	q.c.loaded.Add(1)
	return nil
}

// BindSlot makes x compute from s's copy.
func (q *Queue) BindSlot(x *backend.Expert, s backend.Slot, id weights.ExpertID, digest jnf.Digest) error {
	hs, err := q.slot("BindSlot", s)
	if err != nil {
		return err
	}
	q.c.slotMu.Lock()
	defer q.c.slotMu.Unlock()
	if hs.digest.IsZero() || hs.digest != digest || hs.id != id {
		return fmt.Errorf("cpu: BindSlot: the slot does not hold %v (%s)", id, digest)
	}
	*x = backend.Expert{ID: id, Digest: digest, Slot: hs}
	for j, w := range [3]*backend.Weight{&x.Gate, &x.Up, &x.Down} {
		*w = backend.Weight{Key: backend.Key{Digest: digest, Part: j}, Host: hs.mats[j]}
	}
	if q.filled == hs {
		q.filled = nil // filled for this use, not kept from an earlier one
	} else {
		q.c.cached.Add(1)
	}
	return nil
}

// slotState is the CPU's slot bookkeeping (SetSlots).
type slotState struct {
	slotMu    sync.Mutex
	maxSlots  int
	allocated int
}
