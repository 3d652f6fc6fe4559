package backendtest

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zeebo/blake3"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// NewDevice returns a simulated device backend for tests of the code above
// the backend interface: it computes with the CPU reference, but
//   - its memory is its own type, so a host Buf given to it (or one of its
//     Bufs given to the host) is an error;
//   - its queues run nothing until Sync, so a host slice read after the
//     call that was to copy it, or written before Sync, shows;
//   - it is a backend.SlotPool of up to slots slots, each holding its own
//     copy of an expert's bytes, so a caller that binds a slot for an
//     expert it does not hold, fills a slot a queue still binds, or
//     recycles bytes LoadExpert is still reading, computes wrong bits or
//     fails.
func NewDevice(threads, slots int) backend.Backend {
	return NewDeviceWith(DeviceOptions{Threads: threads, Slots: slots})
}

// DeviceOptions configures NewDeviceWith.
type DeviceOptions struct {
	Threads, Slots int
	// VerifyCopies hashes every copy of an expert (LoadExpert, FillSlot)
	// at the queue's next Sync against its digest, as the CUDA backend's
	// device check does: a copy that differs fails the Sync naming the
	// expert (jnf.ErrVerification) and empties its slot.
	VerifyCopies bool
}

// NewDeviceWith is NewDevice with options.
func NewDeviceWith(o DeviceOptions) backend.Backend {
	return &device{c: cpu.New(o.Threads), o: o, corrupt: map[jnf.Digest]bool{}}
}

type device struct {
	c *cpu.CPU
	o DeviceOptions

	mu      sync.Mutex
	slots   []*devSlot          // allocated
	corrupt map[jnf.Digest]bool // copies of these digests get a byte flipped (CorruptCopies)

	// counters (Counters): the bytes each operation copies across, counted
	// when it is enqueued
	h2d, h2dCopies, expertH2D, d2h, upload atomic.Int64
	loaded, cached, direct                 atomic.Int64
	verified, failures, scrubbed           atomic.Int64
	grouped                                atomic.Int64 // MatMuls calls
	groupedSiLU                            atomic.Int64 // SiLUMul calls between a queue's odd and even MatMuls

	pinMu  sync.Mutex
	pinned map[uintptr]int // base address → length of memory Pin pinned

	// closed is set by Close; late counts the calls made after it, on the
	// backend or its queues (a real device has released its context by
	// then: such a call crashes or corrupts), each refused with an error.
	closed atomic.Bool
	late   atomic.Int64
}

// live counts op as a late call and returns an error when the device is
// closed.
func (d *device) live(op string) error {
	if !d.closed.Load() {
		return nil
	}
	d.late.Add(1)
	return fmt.Errorf("fake device: %s after Close", op)
}

// CallsAfterClose is the number of calls made on the simulated device, or
// on one of its queues, after its Close (for tests: it must stay 0).
func CallsAfterClose(be backend.Backend) int64 { return be.(*device).late.Load() }

var _ backend.Pinner = (*device)(nil)

// Pin records mem as pinned: LoadExpert of bytes inside pinned memory
// counts as a direct copy (Counters.ExpertsDirect).
func (d *device) Pin(mem []byte) (func() error, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("fake device: pin of 0 bytes")
	}
	if err := d.live("Pin"); err != nil {
		return nil, err
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	d.pinMu.Lock()
	defer d.pinMu.Unlock()
	if d.pinned == nil {
		d.pinned = map[uintptr]int{}
	}
	if _, ok := d.pinned[base]; ok {
		return nil, fmt.Errorf("fake device: memory at %#x pinned twice", base)
	}
	d.pinned[base] = len(mem)
	return func() error {
		if err := d.live("unpin"); err != nil {
			return err
		}
		d.pinMu.Lock()
		defer d.pinMu.Unlock()
		if _, ok := d.pinned[base]; !ok {
			return fmt.Errorf("fake device: memory at %#x unpinned twice", base)
		}
		delete(d.pinned, base)
		return nil
	}, nil
}

// isPinned reports whether b lies inside memory Pin pinned.
func (d *device) isPinned(b string) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(b)))
	d.pinMu.Lock()
	defer d.pinMu.Unlock()
	for base, n := range d.pinned {
		if p >= base && p+uintptr(len(b)) <= base+uintptr(n) {
			return true
		}
	}
	return false
}

// Pinned is the number of pinned ranges (for tests).
func Pinned(be backend.Backend) int {
	d := be.(*device)
	d.pinMu.Lock()
	defer d.pinMu.Unlock()
	return len(d.pinned)
}

// Counters reports what the simulated device copied: Write's values,
// LoadExpert's expert bytes and index lists count as host-to-device, Read
// and Route's expert ids as device-to-host. It measures no time.
func (d *device) Counters() backend.Counters {
	return backend.Counters{H2DBytes: d.h2d.Load(), H2DCopies: d.h2dCopies.Load(), ExpertH2DBytes: d.expertH2D.Load(),
		D2HBytes: d.d2h.Load(), ExpertsLoaded: d.loaded.Load(), ExpertsDirect: d.direct.Load(), ExpertsCached: d.cached.Load(), UploadBytes: d.upload.Load(),
		DeviceVerified: d.verified.Load(), DeviceVerifyFailures: d.failures.Load(), DeviceScrubbedBytes: d.scrubbed.Load()}
}

// toDevice counts a host-to-device copy of n bytes.
func (d *device) toDevice(n int) {
	if n > 0 {
		d.h2d.Add(int64(n))
		d.h2dCopies.Add(1)
	}
}

type devMem struct{ host backend.Buf }

func (m *devMem) Elems() int { return m.host.Len() }

type devExpert struct {
	gate, up, down backend.Mat
	// scales are a block-FP8 expert's weight_scale_inv bytes as the record
	// stores them (gate, up, down): with the codes, the record's bytes, as
	// a real device copies and hashes them.
	scales [3][]byte
}

func (d *device) Name() string     { return "fake-device" }
func (d *device) Threads() int     { return d.c.Threads() }
func (d *device) Close() error     { d.closed.Store(true); return nil }
func (d *device) Free(backend.Buf) { d.live("Free") }

func (d *device) Alloc(n int) (backend.Buf, error) {
	if err := d.live("Alloc"); err != nil {
		return backend.Buf{}, err
	}
	h, err := d.c.Alloc(n)
	if err != nil {
		return backend.Buf{}, err
	}
	return backend.MakeBuf(&devMem{host: h}, 0, n), nil
}

// devWeight marks a weight as uploaded to the device.
type devWeight struct{}

func (d *device) Upload(w *backend.Weight, key backend.Key, l weights.Linear, rows, cols int, _ backend.Use) error {
	if err := d.live("Upload"); err != nil {
		return err
	}
	*w = backend.Weight{Key: key, Dev: devWeight{}}
	if err := w.Host.InitLinear(l, rows, cols); err != nil {
		return err
	}
	d.upload.Add(w.Bytes())
	return nil
}

func (d *device) Drop(w *backend.Weight) { d.live("Drop"); *w = backend.Weight{} }

var _ backend.Meter = (*device)(nil)

func (d *device) Residency() backend.Residency {
	d.mu.Lock()
	defer d.mu.Unlock()
	return backend.Residency{Device: "fake device", ExpertSlots: len(d.slots), VerifyCopies: d.o.VerifyCopies}
}

func (d *device) NewQueue() (backend.Queue, error) {
	if err := d.live("NewQueue"); err != nil {
		return nil, err
	}
	return &devQueue{d: d, h: d.c.NewHostQueue()}, nil
}

// devQueue records operations and runs them on the CPU at Sync.
type devQueue struct {
	d      *device
	h      *cpu.Queue
	ops    []func()
	err    error
	checks []check  // copies to verify at Sync (VerifyCopies)
	filled *devSlot // the slot the last FillSlot filled
	binds  []*devSlot
	// inGroup: an odd number of MatMuls calls so far (a grouped step's
	// gate and up products are done, its down products not yet).
	inGroup bool
}

func (q *devQueue) fail(format string, a ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("fake device: "+format, a...)
	}
}

// b translates one of the device's Bufs to the CPU Buf behind it.
func (q *devQueue) b(op string, x backend.Buf) backend.Buf {
	if x.Mem() == nil {
		return x
	}
	m, ok := x.Mem().(*devMem)
	if !ok {
		q.fail("%s: a Buf of %T, not of this device", op, x.Mem())
		return backend.Buf{}
	}
	return m.host.Slice(x.Off(), x.Off()+x.Len())
}

// w checks that a weight was uploaded here (or is a loaded expert's) and
// returns a copy of it, taken at enqueue time.
func (q *devQueue) w(op string, w *backend.Weight) *backend.Weight {
	if w.Dev == nil {
		q.fail("%s: weight %s was not uploaded to this device", op, w.Host.Name)
	}
	c := *w
	return &c
}

func (q *devQueue) do(f func()) {
	if err := q.d.live("a queue operation"); err != nil {
		if q.err == nil {
			q.err = err
		}
		return
	}
	q.ops = append(q.ops, f)
}

func (q *devQueue) Sync() error {
	ops := q.ops
	q.ops = nil
	checks := q.checks
	q.checks = nil
	if err := q.d.live("Queue.Sync"); err != nil {
		return err
	}
	if q.err != nil {
		return q.err
	}
	for _, c := range checks {
		if err := q.d.check(c); err != nil && q.err == nil {
			q.err = err
		}
	}
	if q.err != nil {
		return q.err
	}
	for _, f := range ops {
		f()
	}
	if err := q.h.Err(); err != nil {
		q.err = err
	}
	return q.err
}

func (q *devQueue) Close() error { return q.d.live("Queue.Close") }

func (q *devQueue) Write(dst backend.Buf, src []float32) {
	d, s := q.b("Write", dst), append([]float32(nil), src...)
	q.d.toDevice(4 * len(s))
	q.do(func() { q.h.Write(d, s) })
}

func (q *devQueue) Read(dst []float32, src backend.Buf) {
	s := q.b("Read", src)
	q.d.d2h.Add(int64(4 * len(dst)))
	q.do(func() { q.h.Read(dst, s) })
}

func (q *devQueue) Zero(dst backend.Buf) {
	d := q.b("Zero", dst)
	q.do(func() { q.h.Zero(d) })
}

func (q *devQueue) Copy(dst backend.Buf, ds int, src backend.Buf, ss int, rows, cols int) {
	d, s := q.b("Copy", dst), q.b("Copy", src)
	q.do(func() { q.h.Copy(d, ds, s, ss, rows, cols) })
}

func (q *devQueue) Gather(dst, src backend.Buf, idx []int32, n int) {
	d, s, i := q.b("Gather", dst), q.b("Gather", src), append([]int32(nil), idx...)
	q.d.toDevice(4 * len(i))
	q.do(func() { q.h.Gather(d, s, i, n) })
}

func (q *devQueue) Scatter(dst, src backend.Buf, idx []int32, n int) {
	d, s, i := q.b("Scatter", dst), q.b("Scatter", src), append([]int32(nil), idx...)
	q.d.toDevice(4 * len(i))
	q.do(func() { q.h.Scatter(d, s, i, n) })
}

func (q *devQueue) Embed(dst backend.Buf, table *backend.Weight, ids []int32) {
	d, w, i := q.b("Embed", dst), q.w("Embed", table), append([]int32(nil), ids...)
	q.d.toDevice(4 * len(i))
	q.do(func() { q.h.Embed(d, w, i) })
}

func (q *devQueue) MatMul(y backend.Buf, w *backend.Weight, x backend.Buf, T int) {
	yy, ww, xx := q.b("MatMul", y), q.w("MatMul", w), q.b("MatMul", x)
	q.do(func() { q.h.MatMul(yy, ww, xx, T) })
}

func (q *devQueue) RMSNorm(y, x, scale backend.Buf, n int, eps float32) {
	yy, xx, ss := q.b("RMSNorm", y), q.b("RMSNorm", x), q.b("RMSNorm", scale)
	q.do(func() { q.h.RMSNorm(yy, xx, ss, n, eps) })
}

func (q *devQueue) GatedRMSNorm(y, x, z, w backend.Buf, n int, eps float32) {
	yy, xx, zz, ww := q.b("GatedRMSNorm", y), q.b("GatedRMSNorm", x), q.b("GatedRMSNorm", z), q.b("GatedRMSNorm", w)
	q.do(func() { q.h.GatedRMSNorm(yy, xx, zz, ww, n, eps) })
}

func (q *devQueue) L2Norm(y, x backend.Buf, n int, eps, scale float32) {
	yy, xx := q.b("L2Norm", y), q.b("L2Norm", x)
	q.do(func() { q.h.L2Norm(yy, xx, n, eps, scale) })
}

func (q *devQueue) RoPE(x backend.Buf, T, heads, hd int, cos, sin backend.Buf) {
	xx, cc, ss := q.b("RoPE", x), q.b("RoPE", cos), q.b("RoPE", sin)
	q.do(func() { q.h.RoPE(xx, T, heads, hd, cc, ss) })
}

func (q *devQueue) Attention(o, qb, k, v backend.Buf, T, pos0, nq, nkv, hd int, scale float32) {
	oo, qq, kk, vv := q.b("Attention", o), q.b("Attention", qb), q.b("Attention", k), q.b("Attention", v)
	q.do(func() { q.h.Attention(oo, qq, kk, vv, T, pos0, nq, nkv, hd, scale) })
}

func (q *devQueue) CausalConv(y, x, state, w backend.Buf, T, C, Kc int) {
	yy, xx, st, ww := q.b("CausalConv", y), q.b("CausalConv", x), q.b("CausalConv", state), q.b("CausalConv", w)
	q.do(func() { q.h.CausalConv(yy, xx, st, ww, T, C, Kc) })
}

func (q *devQueue) GDNGates(beta, alpha, b, a, aLog, dtBias backend.Buf) {
	be, al, bb, aa, lg, dt := q.b("GDNGates", beta), q.b("GDNGates", alpha), q.b("GDNGates", b), q.b("GDNGates", a), q.b("GDNGates", aLog), q.b("GDNGates", dtBias)
	q.do(func() { q.h.GDNGates(be, al, bb, aa, lg, dt) })
}

func (q *devQueue) DeltaRule(o, qb, k, v, beta, alpha, S backend.Buf, T, nk, nv, dk, dv int) {
	oo, qq, kk, vv := q.b("DeltaRule", o), q.b("DeltaRule", qb), q.b("DeltaRule", k), q.b("DeltaRule", v)
	be, al, ss := q.b("DeltaRule", beta), q.b("DeltaRule", alpha), q.b("DeltaRule", S)
	q.do(func() { q.h.DeltaRule(oo, qq, kk, vv, be, al, ss, T, nk, nv, dk, dv) })
}

// DeltaRules is backend.DeltaRuler's: each op's DeltaRule, in order.
func (q *devQueue) DeltaRules(ops []backend.DeltaRuleOp, nk, nv, dk, dv int) {
	for _, o := range ops {
		q.DeltaRule(o.O, o.Q, o.K, o.V, o.Beta, o.Alpha, o.S, o.T, nk, nv, dk, dv)
	}
}

// SoftmaxNorm is backend.Normaliser's, computed at Sync with canon's
// reference on the host copy.
func (q *devQueue) SoftmaxNorm(out, x backend.Buf, rows, n int) {
	oo, xx := q.b("SoftmaxNorm", out), q.b("SoftmaxNorm", x)
	if q.err == nil && (rows < 0 || n < 0 || oo.Len() != 2*rows || xx.Len() < rows*n) {
		q.fail("SoftmaxNorm: %d rows of %d into %d values from %d", rows, n, oo.Len(), xx.Len())
		return
	}
	q.do(func() {
		xs, ys := cpu.Floats(xx), cpu.Floats(oo)
		for r := range rows {
			row := xs[r*n : (r+1)*n]
			m := canon.Max(row)
			ys[2*r], ys[2*r+1] = m, canon.ExpSum(row, m)
		}
	})
}

// Argmax is backend.Argmaxer's, computed at Sync with canon's reference on
// the host copy.
func (q *devQueue) Argmax(idx []int32, x backend.Buf, rows, n int) {
	xx := q.b("Argmax", x)
	if q.err == nil && (rows < 0 || n < 0 || len(idx) != rows || xx.Len() < rows*n) {
		q.fail("Argmax: %d rows of %d into %d ids from %d values", rows, n, len(idx), xx.Len())
		return
	}
	q.d.d2h.Add(int64(4 * rows))
	q.do(func() {
		xs := cpu.Floats(xx)
		for r := range rows {
			idx[r] = int32(canon.Argmax(xs[r*n : (r+1)*n]))
		}
	})
}

func (q *devQueue) SiLUMul(y, g, u backend.Buf) {
	if q.inGroup {
		q.d.groupedSiLU.Add(1)
	}
	yy, gg, uu := q.b("SiLUMul", y), q.b("SiLUMul", g), q.b("SiLUMul", u)
	q.do(func() { q.h.SiLUMul(yy, gg, uu) })
}

func (q *devQueue) SigmoidMul(y, x, g backend.Buf) {
	yy, xx, gg := q.b("SigmoidMul", y), q.b("SigmoidMul", x), q.b("SigmoidMul", g)
	q.do(func() { q.h.SigmoidMul(yy, xx, gg) })
}

func (q *devQueue) Add(y, a, b backend.Buf) {
	yy, aa, bb := q.b("Add", y), q.b("Add", a), q.b("Add", b)
	q.do(func() { q.h.Add(yy, aa, bb) })
}

func (q *devQueue) Route(idx []int32, w, logits backend.Buf, T, E, k int, renorm bool) {
	ww, lg := q.b("Route", w), q.b("Route", logits)
	q.d.d2h.Add(int64(4 * len(idx)))
	q.do(func() { q.h.Route(idx, ww, lg, T, E, k, renorm) })
}

func (q *devQueue) Combine(y, x, w backend.Buf, T, k, n int) {
	yy, xx, ww := q.b("Combine", y), q.b("Combine", x), q.b("Combine", w)
	q.do(func() { q.h.Combine(yy, xx, ww, T, k, n) })
}

func (q *devQueue) GateAdd(y, x, g backend.Buf, T, n int) {
	yy, xx, gg := q.b("GateAdd", y), q.b("GateAdd", x), q.b("GateAdd", g)
	q.do(func() { q.h.GateAdd(yy, xx, gg, T, n) })
}

// LoadExpert copies the expert's bytes (they may be recycled once it
// returns) for this use only: the device keeps nothing beyond
// ReleaseExpert (residency is the SlotPool's slots').
func (q *devQueue) LoadExpert(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	if err := q.d.live("LoadExpert"); err != nil {
		return err
	}
	de, err := q.copyIn(id, digest, gate, up, down, I, H)
	if err != nil {
		return err
	}
	if q.d.o.VerifyCopies {
		q.checks = append(q.checks, check{de: de, id: id, want: digest})
	}
	fill(x, id, digest, de)
	return nil
}

// copyIn makes the device's copy of an expert's bytes, counting it (and
// flipping a byte of it for CorruptCopies).
func (q *devQueue) copyIn(id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) (*devExpert, error) {
	var v backend.Expert
	if err := backend.ViewExpert(&v, id, digest, gate, up, down, I, H); err != nil {
		return nil, err
	}
	de := &devExpert{gate: copyMat(v.Gate.Host), up: copyMat(v.Up.Host), down: copyMat(v.Down.Host)}
	if gate.Quantized() {
		for j, l := range []weights.Linear{gate, up, down} {
			sv, _, _ := l.Scales()
			de.scales[j] = []byte(sv.Data())
		}
	}
	d := q.d
	n := v.Gate.Bytes() + v.Up.Bytes() + v.Down.Bytes()
	d.toDevice(int(n))
	d.expertH2D.Add(n)
	d.loaded.Add(1)
	if d.isPinned(gate.Values().Data()) && d.isPinned(up.Values().Data()) && d.isPinned(down.Values().Data()) {
		d.direct.Add(1)
	}
	d.mu.Lock()
	bad := d.corrupt[digest]
	d.mu.Unlock()
	if bad {
		flipByte(de)
	}
	return de, nil
}

// flipByte changes one bit of a copy (a fault between the host's check
// and the device).
func flipByte(de *devExpert) {
	if len(de.down.F8) > 0 {
		de.down.F8[len(de.down.F8)/2] ^= 0x10
	} else if len(de.down.BF16) > 0 {
		de.down.BF16[len(de.down.BF16)/2] ^= 0x10
	} else if len(de.down.F32) > 0 {
		de.down.F32[len(de.down.F32)/2] = math.Float32frombits(math.Float32bits(de.down.F32[len(de.down.F32)/2]) ^ 0x10)
	}
}

// sum is the BLAKE3 of a copy's three matrices as stored (the record's
// bytes: gate, up, down).
func (de *devExpert) sum() (jnf.Digest, int64) {
	h := blake3.New()
	var n int64
	for _, m := range []*backend.Mat{&de.gate, &de.up, &de.down} {
		var b []byte
		if m.Quantized() {
			b = m.F8
		} else if m.F32 != nil {
			b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.F32))), 4*len(m.F32))
		} else {
			b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.BF16))), 2*len(m.BF16))
		}
		h.Write(b)
		n += int64(len(b))
	}
	for _, sc := range de.scales {
		h.Write(sc)
		n += int64(len(sc))
	}
	var dg jnf.Digest
	dg.Alg = jnf.BLAKE3
	copy(dg.Sum[:], h.Sum(nil))
	return dg, n
}

// check is a copy to verify at Sync.
type check struct {
	de   *devExpert
	sl   *devSlot // nil: a LoadExpert copy
	id   weights.ExpertID
	want jnf.Digest
}

// check verifies one copy: one that differs empties its slot and is an
// error naming the expert.
func (d *device) check(c check) error {
	got, _ := c.de.sum()
	d.verified.Add(1)
	if got == c.want {
		return nil
	}
	d.failures.Add(1)
	err := fmt.Errorf("fake device: %v: the device's copy has %s, want %s: %w", c.id, got, c.want, jnf.ErrVerification)
	if c.sl != nil {
		d.mu.Lock()
		if c.sl.de == c.de {
			c.sl.digest, c.sl.bad = jnf.Digest{}, err
		}
		d.mu.Unlock()
	}
	return err
}

// CorruptCopies makes every later copy of the expert with this digest into
// the simulated device's memory differ from its bytes by one bit (be from
// NewDevice): the fault the device check (VerifyCopies) must find.
func CorruptCopies(be backend.Backend, digest jnf.Digest, on bool) {
	d := be.(*device)
	d.mu.Lock()
	defer d.mu.Unlock()
	if on {
		d.corrupt[digest] = true
	} else {
		delete(d.corrupt, digest)
	}
}

// FlipResident flips a bit of the copy a slot holds of the expert with this
// digest (a fault in device memory after the copy was checked, for
// ScrubDevice to find), reporting whether a slot held one.
func FlipResident(be backend.Backend, digest jnf.Digest) bool {
	d := be.(*device)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sl := range d.slots {
		if sl.digest == digest && !digest.IsZero() {
			flipByte(sl.de)
			return true
		}
	}
	return false
}

// devSlot is one slot of the simulated device: its own copy, made afresh
// by each fill.
type devSlot struct {
	d      *device
	bytes  int64
	id     weights.ExpertID
	digest jnf.Digest // zero: holds nothing
	de     *devExpert
	bad    error // the last check of its copy failed
	users  int   // BindSlot uses not yet released
}

func (s *devSlot) Bytes() int64 { return s.bytes }

var _ backend.SlotPool = (*device)(nil)
var _ backend.SlotQueue = (*devQueue)(nil)
var _ backend.DeviceScrubber = (*device)(nil)

func (d *device) SlotCapacity(n int64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n <= 0 {
		return 0
	}
	return max(d.o.Slots-len(d.slots), 0)
}

func (d *device) AllocSlot(n int64) (backend.Slot, error) {
	if err := d.live("AllocSlot"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.slots) >= d.o.Slots {
		return nil, fmt.Errorf("fake device: all %d slots are allocated", d.o.Slots)
	}
	sl := &devSlot{d: d, bytes: n}
	d.slots = append(d.slots, sl)
	return sl, nil
}

func (d *device) FreeSlot(s backend.Slot) {
	if d.live("FreeSlot") != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, sl := range d.slots {
		if sl == s {
			d.slots = append(d.slots[:i], d.slots[i+1:]...)
			sl.d, sl.digest, sl.de = nil, jnf.Digest{}, nil
			return
		}
	}
}

func (d *device) SlotHolds(s backend.Slot, digest jnf.Digest) bool {
	sl, ok := s.(*devSlot)
	d.mu.Lock()
	defer d.mu.Unlock()
	return ok && sl.d == d && !digest.IsZero() && sl.digest == digest
}

func (q *devQueue) slot(op string, s backend.Slot) (*devSlot, error) {
	if err := q.d.live(op); err != nil {
		return nil, err
	}
	sl, ok := s.(*devSlot)
	if !ok || sl == nil || sl.d != q.d {
		return nil, fmt.Errorf("fake device: %s: %T is not a slot of this device", op, s)
	}
	return sl, nil
}

// FillSlot copies the expert into s; filling a slot that a queue still
// binds (no ReleaseExpert yet) is an error, as its reads would see the new
// bytes on a real device.
func (q *devQueue) FillSlot(s backend.Slot, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	sl, err := q.slot("FillSlot", s)
	if err != nil {
		return err
	}
	de, err := q.copyIn(id, digest, gate, up, down, I, H)
	if err != nil {
		return err
	}
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if sl.users > 0 {
		return fmt.Errorf("fake device: FillSlot of %v into a slot %d uses still bind (holding %v)", id, sl.users, sl.id)
	}
	sl.id, sl.digest, sl.de, sl.bad = id, digest, de, nil
	if d.o.VerifyCopies {
		q.checks = append(q.checks, check{de: de, sl: sl, id: id, want: digest})
	}
	q.filled = sl
	return nil
}

// BindSlot makes x use s's copy.
func (q *devQueue) BindSlot(x *backend.Expert, s backend.Slot, id weights.ExpertID, digest jnf.Digest) error {
	sl, err := q.slot("BindSlot", s)
	if err != nil {
		return err
	}
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if sl.digest.IsZero() || sl.digest != digest || sl.id != id {
		if sl.bad != nil {
			return fmt.Errorf("fake device: BindSlot of %v: the slot's copy failed its check: %w", id, sl.bad)
		}
		return fmt.Errorf("fake device: BindSlot of %v (%s): the slot holds %v (%s)", id, digest, sl.id, sl.digest)
	}
	sl.users++
	fill(x, id, digest, sl.de)
	x.Slot = sl
	if q.filled == sl {
		q.filled = nil
	} else {
		d.cached.Add(1)
	}
	return nil
}

// ScrubDevice re-hashes every filled slot's copy.
func (d *device) ScrubDevice() (int64, error) {
	d.mu.Lock()
	slots := append([]*devSlot(nil), d.slots...)
	d.mu.Unlock()
	var n int64
	var first error
	for _, sl := range slots {
		d.mu.Lock()
		de, id, want := sl.de, sl.id, sl.digest
		d.mu.Unlock()
		if want.IsZero() {
			continue
		}
		got, k := de.sum()
		n += k
		if got != want {
			err := fmt.Errorf("fake device: %v: a scrub found the slot's copy has %s, want %s: %w", id, got, want, jnf.ErrVerification)
			d.mu.Lock()
			if sl.de == de {
				sl.digest, sl.bad = jnf.Digest{}, err
			}
			d.mu.Unlock()
			d.failures.Add(1)
			if first == nil {
				first = err
			}
		}
	}
	d.scrubbed.Add(n)
	return n, first
}

func copyMat(m backend.Mat) backend.Mat {
	c := m
	switch {
	case m.Quantized():
		c.F8 = append([]byte(nil), m.F8...)
		c.Scale = append([]float32(nil), m.Scale...)
		c.ScaleData = append([]byte(nil), m.ScaleData...)
	case m.BF16 != nil:
		c.BF16 = append([]uint16(nil), m.BF16...)
	default:
		c.F32 = append([]float32(nil), m.F32...)
	}
	return c
}

func fill(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, de *devExpert) {
	*x = backend.Expert{ID: id, Digest: digest, Slot: de}
	for i, p := range []struct {
		w *backend.Weight
		m backend.Mat
	}{{&x.Gate, de.gate}, {&x.Up, de.up}, {&x.Down, de.down}} {
		*p.w = backend.Weight{Key: backend.Key{Digest: digest, Part: i}, Host: p.m, Dev: devWeight{}}
	}
}

// ReleaseExpert ends x's use (of its slot, if bound).
func (q *devQueue) ReleaseExpert(x *backend.Expert) {
	q.d.live("ReleaseExpert")
	if sl, ok := x.Slot.(*devSlot); ok {
		q.d.mu.Lock()
		sl.users--
		q.d.mu.Unlock()
	}
	*x = backend.Expert{}
}

// MatMuls computes each op as MatMul does (backend.Grouper), counting the
// calls (GroupedMatMuls).
func (q *devQueue) MatMuls(ops []backend.MatMulOp) {
	q.d.grouped.Add(1)
	q.inGroup = !q.inGroup
	for _, o := range ops {
		q.MatMul(o.Y, o.W, o.X, o.T)
	}
}

// GroupedMatMuls counts the MatMuls calls of be's queues (a NewDevice
// backend).
func GroupedMatMuls(be backend.Backend) int64 { return be.(*device).grouped.Load() }

// GroupedSiLUMuls counts the SiLUMul calls of be's queues (a NewDevice
// backend) made between a queue's odd and even MatMuls calls: the
// activations of a grouped step's experts, between their gate and up
// products and their down products.
func GroupedSiLUMuls(be backend.Backend) int64 { return be.(*device).groupedSiLU.Load() }

// BoundSlots counts the slots of be (a NewDevice backend) that a queue
// still binds (BindSlot without its ReleaseExpert): none once every step
// has ended.
func BoundSlots(be backend.Backend) int {
	d := be.(*device)
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, s := range d.slots {
		if s.users > 0 {
			n++
		}
	}
	return n
}
