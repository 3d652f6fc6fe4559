package backendtest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// NewDevice returns a simulated device backend for tests of the code above
// the backend interface: it computes with the CPU reference, but
//   - its memory is its own type, so a host Buf given to it (or one of its
//     Bufs given to the host) is an error;
//   - its queues run nothing until Sync, so a host slice read after the
//     call that was to copy it, or written before Sync, shows;
//   - it keeps up to slots routed experts resident, keyed by digest, as its
//     own copies of the bytes (CachedExpert), so a caller that trusts a
//     copy by anything but its digest, or recycles bytes LoadExpert is
//     still reading, computes wrong bits.
func NewDevice(threads, slots int) backend.Backend {
	return &device{c: cpu.New(threads), slots: slots, resident: map[jnf.Digest]*devExpert{}}
}

type device struct {
	c     *cpu.CPU
	slots int

	mu       sync.Mutex
	resident map[jnf.Digest]*devExpert
	order    []jnf.Digest // FIFO of resident digests

	// counters (Counters): the bytes each operation copies across, counted
	// when it is enqueued
	h2d, h2dCopies, expertH2D, d2h, upload atomic.Int64
	loaded, cached, direct                 atomic.Int64

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
		D2HBytes: d.d2h.Load(), ExpertsLoaded: d.loaded.Load(), ExpertsDirect: d.direct.Load(), ExpertsCached: d.cached.Load(), UploadBytes: d.upload.Load()}
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

func (d *device) Upload(w *backend.Weight, key backend.Key, v weights.View, rows, cols int, _ backend.Use) error {
	if err := d.live("Upload"); err != nil {
		return err
	}
	*w = backend.Weight{Key: key, Dev: devWeight{}}
	if err := w.Host.Init(v, rows, cols); err != nil {
		return err
	}
	d.upload.Add(w.Bytes())
	return nil
}

func (d *device) Drop(w *backend.Weight) { d.live("Drop"); *w = backend.Weight{} }

var _ backend.Meter = (*device)(nil)

func (d *device) Residency() backend.Residency {
	return backend.Residency{Device: "fake device", ExpertSlots: d.slots}
}

func (d *device) NewQueue() (backend.Queue, error) {
	if err := d.live("NewQueue"); err != nil {
		return nil, err
	}
	return &devQueue{d: d, h: d.c.NewHostQueue()}, nil
}

// devQueue records operations and runs them on the CPU at Sync.
type devQueue struct {
	d   *device
	h   *cpu.Queue
	ops []func()
	err error
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
	if err := q.d.live("Queue.Sync"); err != nil {
		return err
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

func (q *devQueue) SiLUMul(y, g, u backend.Buf) {
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
// returns) and keeps the copy resident, evicting the oldest beyond the
// device's slots.
func (q *devQueue) LoadExpert(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.View, I, H int) error {
	if err := q.d.live("LoadExpert"); err != nil {
		return err
	}
	var v backend.Expert
	if err := backend.ViewExpert(&v, id, digest, gate, up, down, I, H); err != nil {
		return err
	}
	de := &devExpert{gate: copyMat(v.Gate.Host), up: copyMat(v.Up.Host), down: copyMat(v.Down.Host)}
	d := q.d
	n := v.Gate.Bytes() + v.Up.Bytes() + v.Down.Bytes()
	d.toDevice(int(n))
	d.expertH2D.Add(n)
	d.loaded.Add(1)
	if d.isPinned(gate.Data()) && d.isPinned(up.Data()) && d.isPinned(down.Data()) {
		d.direct.Add(1)
	}
	if d.slots > 0 {
		d.mu.Lock()
		if _, ok := d.resident[digest]; !ok {
			if len(d.order) >= d.slots {
				delete(d.resident, d.order[0])
				d.order = d.order[1:]
			}
			d.resident[digest] = de
			d.order = append(d.order, digest)
		}
		d.mu.Unlock()
	}
	fill(x, id, digest, de)
	return nil
}

func copyMat(m backend.Mat) backend.Mat {
	c := m
	c.BF16 = append([]uint16(nil), m.BF16...)
	c.F32 = append([]float32(nil), m.F32...)
	if m.BF16 == nil {
		c.BF16 = nil
	} else {
		c.F32 = nil
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

func (q *devQueue) CachedExpert(x *backend.Expert, id weights.ExpertID, digest jnf.Digest) bool {
	if q.d.live("CachedExpert") != nil {
		return false
	}
	d := q.d
	d.mu.Lock()
	de, ok := d.resident[digest]
	d.mu.Unlock()
	if ok {
		fill(x, id, digest, de)
		d.cached.Add(1)
	}
	return ok
}

func (q *devQueue) ReleaseExpert(x *backend.Expert) { q.d.live("ReleaseExpert"); *x = backend.Expert{} }
