package cpu

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// hostMem is the CPU backend's memory: a Go slice.
type hostMem struct{ f []float32 }

func (m *hostMem) Elems() int { return len(m.f) }

// Wrap returns a Buf viewing f (host memory the CPU backend computes on in
// place). It allocates the small descriptor once; views of it do not.
func Wrap(f []float32) backend.Buf {
	return backend.MakeBuf(&hostMem{f: f}, 0, len(f))
}

// Floats returns the values b views, or nil if b is not the CPU backend's
// memory.
func Floats(b backend.Buf) []float32 {
	f, _ := floats(b)
	return f
}

// floats is Floats that also says whether b is CPU memory (the zero Buf
// counts as empty CPU memory).
func floats(b backend.Buf) ([]float32, bool) {
	if b.Mem() == nil {
		return nil, true
	}
	m, ok := b.Mem().(*hostMem)
	if !ok {
		return nil, false
	}
	return m.f[b.Off() : b.Off()+b.Len() : b.Off()+b.Len()], true
}

// Alloc returns n zeroed values.
func (c *CPU) Alloc(n int) (backend.Buf, error) {
	if n < 0 {
		return backend.Buf{}, fmt.Errorf("cpu: alloc of %d values", n)
	}
	return Wrap(make([]float32, n)), nil
}

// Free does nothing: the garbage collector owns host memory.
func (c *CPU) Free(backend.Buf) {}

// Upload makes w view the verified bytes v in place (no copy).
func (c *CPU) Upload(w *backend.Weight, key backend.Key, l weights.Linear, rows, cols int, _ backend.Use) error {
	*w = backend.Weight{Key: key}
	return w.Host.InitLinear(l, rows, cols)
}

// Drop forgets w's view.
func (c *CPU) Drop(w *backend.Weight) { *w = backend.Weight{} }

// Residency: everything is on the host (the slots of SetSlots included).
func (c *CPU) Residency() backend.Residency {
	c.slotMu.Lock()
	n := c.allocated
	c.slotMu.Unlock()
	return backend.Residency{Device: fmt.Sprintf("host (%d threads)", c.threads), ExpertSlots: n}
}

// Counters reports the experts LoadExpert took (viewed in place) and
// FillSlot copied, and the BindSlot uses of slots (SetSlots); the CPU copies
// nothing to a device.
func (c *CPU) Counters() backend.Counters {
	return backend.Counters{ExpertsLoaded: c.loaded.Load(), ExpertsCached: c.cached.Load()}
}

var _ backend.Meter = (*CPU)(nil)

// Close does nothing (the workers end when the backend is unreachable).
func (c *CPU) Close() error { return nil }

// NewQueue returns a queue that runs each operation as it is enqueued.
func (c *CPU) NewQueue() (backend.Queue, error) { return &Queue{c: c}, nil }

// Queue is the CPU backend's queue: each operation runs on the calling
// goroutine (and the backend's workers) before the call returns, so host
// outputs are ready at once and Sync only reports the first error.
type Queue struct {
	c      *CPU
	err    error
	filled *hostSlot // the slot the last FillSlot filled (Counters.ExpertsCached)
}

var _ backend.Queue = (*Queue)(nil)

// NewHostQueue is NewQueue with its concrete type (for the CUDA backend's
// host computations).
func (c *CPU) NewHostQueue() *Queue { return &Queue{c: c} }

// Err is the queue's first error.
func (q *Queue) Err() error { return q.err }

func (q *Queue) fail(format string, a ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("cpu: "+format, a...)
	}
}

// Fail records err as the queue's error if it has none (for callers that
// run host work on the queue's behalf).
func (q *Queue) Fail(err error) {
	if q.err == nil && err != nil {
		q.err = err
	}
}

// f resolves b, which must have exactly n values (n < 0: any length).
func (q *Queue) f(op, what string, b backend.Buf, n int) []float32 {
	if q.err != nil {
		return nil
	}
	s, ok := floats(b)
	if !ok {
		q.fail("%s: %s is not CPU memory (%T)", op, what, b.Mem())
		return nil
	}
	if n >= 0 && len(s) != n {
		q.fail("%s: %s has %d values, want %d", op, what, len(s), n)
		return nil
	}
	return s
}

func (q *Queue) ok() bool { return q.err == nil }

func (q *Queue) Sync() error  { return q.err }
func (q *Queue) Close() error { return nil }

func (q *Queue) Write(dst backend.Buf, src []float32) {
	if d := q.f("Write", "dst", dst, len(src)); q.ok() {
		copy(d, src)
	}
}

func (q *Queue) Read(dst []float32, src backend.Buf) {
	if s := q.f("Read", "src", src, len(dst)); q.ok() {
		copy(dst, s)
	}
}

func (q *Queue) Zero(dst backend.Buf) {
	if d := q.f("Zero", "dst", dst, -1); q.ok() {
		clear(d)
	}
}

func (q *Queue) Copy(dst backend.Buf, dstStride int, src backend.Buf, srcStride int, rows, cols int) {
	if rows < 0 || cols < 0 || dstStride < cols || srcStride < cols {
		q.fail("Copy: %d rows of %d with strides %d and %d", rows, cols, dstStride, srcStride)
		return
	}
	if rows == 0 || cols == 0 {
		return
	}
	d := q.f("Copy", "dst", dst, -1)
	s := q.f("Copy", "src", src, -1)
	if !q.ok() {
		return
	}
	if len(d) < (rows-1)*dstStride+cols || len(s) < (rows-1)*srcStride+cols {
		q.fail("Copy: %d rows of %d with strides %d and %d from %d into %d values", rows, cols, srcStride, dstStride, len(s), len(d))
		return
	}
	for r := range rows {
		copy(d[r*dstStride:r*dstStride+cols], s[r*srcStride:r*srcStride+cols])
	}
}

// rowIndex checks idx against a buffer of rows rows.
func (q *Queue) rowIndex(op string, idx []int32, rows int) bool {
	if err := backend.CheckRows(op, idx, rows); err != nil {
		q.fail("%v", err)
		return false
	}
	return true
}

func (q *Queue) Gather(dst, src backend.Buf, idx []int32, n int) {
	if n <= 0 {
		q.fail("Gather: rows of %d", n)
		return
	}
	d := q.f("Gather", "dst", dst, len(idx)*n)
	s := q.f("Gather", "src", src, -1)
	if !q.ok() || !q.rowIndex("Gather", idx, len(s)/n) {
		return
	}
	for j, r := range idx {
		copy(d[j*n:(j+1)*n], s[int(r)*n:int(r+1)*n])
	}
}

func (q *Queue) Scatter(dst, src backend.Buf, idx []int32, n int) {
	if n <= 0 {
		q.fail("Scatter: rows of %d", n)
		return
	}
	d := q.f("Scatter", "dst", dst, -1)
	s := q.f("Scatter", "src", src, len(idx)*n)
	if !q.ok() || !q.rowIndex("Scatter", idx, len(d)/n) {
		return
	}
	for j, r := range idx {
		copy(d[int(r)*n:int(r+1)*n], s[j*n:(j+1)*n])
	}
}

func (q *Queue) Embed(dst backend.Buf, table *backend.Weight, ids []int32) {
	H := table.Cols()
	if table.Host.Quantized() {
		q.fail("Embed: table %s is block-FP8 (its rows have no exact float32 values)", table.Host.Name)
	}
	d := q.f("Embed", "dst", dst, len(ids)*H)
	if !q.ok() || !q.rowIndex("Embed", ids, table.Rows()) {
		return
	}
	for t, id := range ids {
		table.Host.Row(int(id), d[t*H:(t+1)*H])
	}
}

// host checks that w has host values to compute with.
func (q *Queue) host(op string, w *backend.Weight) *backend.Mat {
	m := &w.Host
	switch {
	case m.Quantized():
		if m.BlockK > canon.FP8MaxGroup || m.F8 == nil || m.Scale == nil {
			q.fail("%s: block-FP8 weight %s: block %d×%d, %d codes, %d scales", op, m.Name, m.BlockN, m.BlockK, len(m.F8), len(m.Scale))
			return nil
		}
	case m.BF16 == nil && m.F32 == nil && w.Rows()*w.Cols() != 0:
		q.fail("%s: weight %s has no host values", op, w.Host.Name)
		return nil
	}
	return m
}

func (q *Queue) MatMul(y backend.Buf, w *backend.Weight, x backend.Buf, T int) {
	m := q.host("MatMul", w)
	if T < 0 {
		q.fail("MatMul: %d tokens", T)
	}
	yy := q.f("MatMul", "y", y, T*w.Rows())
	xx := q.f("MatMul", "x", x, T*w.Cols())
	if q.ok() && T > 0 {
		q.c.matMul(yy, m, xx, T)
	}
}

// rows checks that x holds whole rows of n.
func (q *Queue) rows(op string, x []float32, n int) bool {
	if q.ok() && (n <= 0 || len(x)%n != 0) {
		q.fail("%s: %d values are not rows of %d", op, len(x), n)
	}
	return q.ok()
}

func (q *Queue) RMSNorm(y, x, scale backend.Buf, n int, eps float32) {
	xx := q.f("RMSNorm", "x", x, -1)
	yy := q.f("RMSNorm", "y", y, len(xx))
	ss := q.f("RMSNorm", "scale", scale, n)
	if q.rows("RMSNorm", xx, n) && len(xx) > 0 {
		q.c.rmsNorm(yy, xx, ss, n, eps)
	}
}

func (q *Queue) GatedRMSNorm(y, x, z, w backend.Buf, n int, eps float32) {
	xx := q.f("GatedRMSNorm", "x", x, -1)
	yy := q.f("GatedRMSNorm", "y", y, len(xx))
	zz := q.f("GatedRMSNorm", "z", z, len(xx))
	ww := q.f("GatedRMSNorm", "w", w, n)
	if q.rows("GatedRMSNorm", xx, n) && len(xx) > 0 {
		q.c.gatedRMSNorm(yy, xx, zz, ww, n, eps)
	}
}

func (q *Queue) L2Norm(y, x backend.Buf, n int, eps, scale float32) {
	xx := q.f("L2Norm", "x", x, -1)
	yy := q.f("L2Norm", "y", y, len(xx))
	if q.rows("L2Norm", xx, n) && len(xx) > 0 {
		q.c.l2Norm(yy, xx, n, eps, scale)
	}
}

func (q *Queue) RoPE(x backend.Buf, T, heads, hd int, cos, sin backend.Buf) {
	if T <= 0 || heads <= 0 || hd <= 0 || cos.Len()%T != 0 || 2*(cos.Len()/T) > hd {
		q.fail("RoPE: %d tokens of %d heads of %d with a table of %d", T, heads, hd, cos.Len())
		return
	}
	xx := q.f("RoPE", "x", x, T*heads*hd)
	cc := q.f("RoPE", "cos", cos, -1)
	ss := q.f("RoPE", "sin", sin, len(cc))
	if q.ok() {
		q.c.rope(xx, T, heads, hd, cc, ss)
	}
}

func (q *Queue) Attention(o, qb, k, v backend.Buf, T, pos0, nq, nkv, hd int, scale float32) {
	if T <= 0 || pos0 < 0 || nq <= 0 || nkv <= 0 || hd <= 0 || nq%nkv != 0 {
		q.fail("Attention: %d tokens at %d, %d query heads, %d KV heads of %d", T, pos0, nq, nkv, hd)
		return
	}
	oo := q.f("Attention", "o", o, T*nq*hd)
	qq := q.f("Attention", "q", qb, T*nq*hd)
	kk := q.f("Attention", "k", k, -1)
	vv := q.f("Attention", "v", v, -1)
	if need := (pos0 + T) * nkv * hd; q.ok() && (len(kk) < need || len(vv) < need) {
		q.fail("Attention: a KV cache of %d and %d values for %d positions of %d", len(kk), len(vv), pos0+T, nkv*hd)
	}
	if q.ok() {
		q.c.attention(oo, qq, kk, vv, T, pos0, nq, nkv, hd, scale)
	}
}

func (q *Queue) CausalConv(y, x, state, w backend.Buf, T, C, Kc int) {
	if T <= 0 || C <= 0 || Kc <= 0 {
		q.fail("CausalConv: %d tokens of %d channels, kernel %d", T, C, Kc)
		return
	}
	yy := q.f("CausalConv", "y", y, T*C)
	xx := q.f("CausalConv", "x", x, T*C)
	st := q.f("CausalConv", "state", state, C*(Kc-1))
	ww := q.f("CausalConv", "w", w, C*Kc)
	if q.ok() {
		q.c.causalConv(yy, xx, st, ww, T, C, Kc)
	}
}

func (q *Queue) GDNGates(beta, alpha, b, a, aLog, dtBias backend.Buf) {
	al := q.f("GDNGates", "aLog", aLog, -1)
	dt := q.f("GDNGates", "dtBias", dtBias, len(al))
	bb := q.f("GDNGates", "b", b, -1)
	aa := q.f("GDNGates", "a", a, len(bb))
	be := q.f("GDNGates", "beta", beta, len(bb))
	ap := q.f("GDNGates", "alpha", alpha, len(bb))
	if q.rows("GDNGates", bb, len(al)) {
		q.c.gdnGates(be, ap, bb, aa, al, dt)
	}
}

func (q *Queue) DeltaRule(o, qb, k, v, beta, alpha, S backend.Buf, T, nk, nv, dk, dv int) {
	if T <= 0 || nk <= 0 || nv <= 0 || dk <= 0 || dv <= 0 || nv%nk != 0 {
		q.fail("DeltaRule: %d tokens, %d key heads, %d value heads, dims %d and %d", T, nk, nv, dk, dv)
		return
	}
	oo := q.f("DeltaRule", "o", o, T*nv*dv)
	qq := q.f("DeltaRule", "q", qb, T*nk*dk)
	kk := q.f("DeltaRule", "k", k, T*nk*dk)
	vv := q.f("DeltaRule", "v", v, T*nv*dv)
	be := q.f("DeltaRule", "beta", beta, T*nv)
	al := q.f("DeltaRule", "alpha", alpha, T*nv)
	ss := q.f("DeltaRule", "S", S, nv*dk*dv)
	if q.ok() {
		q.c.deltaRule(oo, qq, kk, vv, be, al, ss, T, nk, nv, dk, dv)
	}
}

func (q *Queue) SiLUMul(y, g, u backend.Buf) {
	yy := q.f("SiLUMul", "y", y, -1)
	gg := q.f("SiLUMul", "g", g, len(yy))
	uu := q.f("SiLUMul", "u", u, len(yy))
	if q.ok() {
		q.c.siluMul(yy, gg, uu)
	}
}

func (q *Queue) SigmoidMul(y, x, g backend.Buf) {
	yy := q.f("SigmoidMul", "y", y, -1)
	xx := q.f("SigmoidMul", "x", x, len(yy))
	gg := q.f("SigmoidMul", "g", g, len(yy))
	if q.ok() {
		q.c.sigmoidMul(yy, xx, gg)
	}
}

func (q *Queue) Add(y, a, b backend.Buf) {
	yy := q.f("Add", "y", y, -1)
	aa := q.f("Add", "a", a, len(yy))
	bb := q.f("Add", "b", b, len(yy))
	if q.ok() {
		q.c.add(yy, aa, bb)
	}
}

func (q *Queue) Route(idx []int32, w, logits backend.Buf, T, E, k int, renorm bool) {
	if T <= 0 || E <= 0 || k <= 0 || k > E || len(idx) != T*k {
		q.fail("Route: %d tokens, %d experts, top-%d into %d ids", T, E, k, len(idx))
		return
	}
	ww := q.f("Route", "w", w, T*k)
	lg := q.f("Route", "logits", logits, T*E)
	if q.ok() {
		q.c.route(idx, ww, lg, T, E, k, renorm)
	}
}

func (q *Queue) Combine(y, x, w backend.Buf, T, k, n int) {
	if T <= 0 || k <= 0 || n <= 0 {
		q.fail("Combine: %d tokens, %d slots of %d", T, k, n)
		return
	}
	yy := q.f("Combine", "y", y, T*n)
	xx := q.f("Combine", "x", x, T*k*n)
	ww := q.f("Combine", "w", w, T*k)
	if q.ok() {
		q.c.combine(yy, xx, ww, T, k, n)
	}
}

func (q *Queue) GateAdd(y, x, g backend.Buf, T, n int) {
	if T <= 0 || n <= 0 {
		q.fail("GateAdd: %d tokens of %d", T, n)
		return
	}
	yy := q.f("GateAdd", "y", y, T*n)
	xx := q.f("GateAdd", "x", x, T*n)
	gg := q.f("GateAdd", "g", g, T)
	if q.ok() {
		q.c.gateAdd(yy, xx, gg, T, n)
	}
}

// LoadExpert makes x view the verified bytes in place.
func (q *Queue) LoadExpert(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	if err := backend.ViewExpert(x, id, digest, gate, up, down, I, H); err != nil {
		return err
	}
	q.c.loaded.Add(1)
	return nil
}

// Wrap is the package's Wrap as a method: the CPU is a backend.Host.
func (c *CPU) Wrap(f []float32) backend.Buf { return Wrap(f) }

var _ backend.Host = (*CPU)(nil)

// ReleaseExpert drops x's views: the source may recycle the bytes.
func (q *Queue) ReleaseExpert(x *backend.Expert) { *x = backend.Expert{} }
