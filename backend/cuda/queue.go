//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Queue is the CUDA backend's queue. Operations are enqueued on its compute
// stream s; streamed experts are copied on its copy stream cs (through
// pinned staging buffers), so that the next expert's copy overlaps the
// current one's kernels, with events ordering the two. Host data an
// operation reads is copied into pinned memory before the call returns;
// host data it writes is copied out at the next synchronisation. Weights
// the budget left on the host are computed by the CPU reference after a
// synchronisation (the same bits, slower).
type Queue struct {
	b     *Backend
	s, cs cu.Stream
	// hs hashes the device copies (Options.VerifyCopies, ScrubDevice); it
	// is made on first use (hashStream): a stream costs about 560 KiB of
	// device memory (TestNoLeak), and most queues never hash.
	hs     cu.Stream
	hsMade bool
	err    error
	host   *cpu.Queue
	// mmTab and mmRest are MatMuls' scratch: the launch's table, the
	// products it leaves to MatMul.
	mmTabs [mmClasses][]mmEntry
	drTab  []drEntry // DeltaRules' launch table
	mmRest []backend.MatMulOp

	// arena is pinned memory for the host side of transfers, reset at each
	// synchronisation; outs are the copies to the caller's slices then due.
	arena    unsafe.Pointer
	arenaCap int
	used     int
	outs     []copyOut

	// scratch is device memory an operation may use during its kernels
	// (index lists, attention scores, top-k pairs); the stream orders uses.
	scratch    *devMem
	scratchCap int64

	// stage are the pinned buffers streamed experts pass through, each
	// reusable once the copy recorded in its event is done.
	stage  [2]staging
	next   int
	trans  []*slot // device slots of streamed experts that are not kept
	filled *slot   // the slot the last FillSlot filled (Counters.ExpertsCached)

	// timing events (Options.Timing): the pairs enqueued since the last
	// synchronisation, the free ones, all made
	timings       []timed
	evPool, evAll []cu.Event

	// b3 is the device-copy checks' state (digest.go): chaining-value
	// scratch, the device array of pending digests, and what they are for.
	b3 struct {
		cvs, digests *devMem
		pending      []pendingCheck
		got          [][32]byte // the digests read back, one per pending check
	}

	hx, hy []float32 // host copies for host-resident weights
	argv   [16]uint64
	argp   [16]unsafe.Pointer
}

type copyOut struct {
	f   []float32
	i   []int32
	off int
}

type staging struct {
	p    unsafe.Pointer
	cap  int
	done cu.Event
	busy bool
}

var _ backend.Queue = (*Queue)(nil)
var _ backend.SlotQueue = (*Queue)(nil)

func newQueue(b *Backend) (*Queue, error) {
	q := &Queue{b: b, host: b.host.NewHostQueue()}
	var err error
	if q.s, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if q.cs, err = cu.MakeStream(cu.NonBlocking); err != nil {
		q.s.Destroy()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	for i := range q.stage {
		if q.stage[i].done, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			q.s.Destroy()
			q.cs.Destroy()
			return nil, fmt.Errorf("cuda: %w", err)
		}
	}
	return q, nil
}

func (q *Queue) fail(format string, a ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("cuda: "+format, a...)
	}
}

func (q *Queue) check(op string, err error) {
	if err != nil && q.err == nil {
		q.err = fmt.Errorf("cuda: %s: %w", op, err)
	}
}

func (q *Queue) ok() bool { return q.err == nil }

// do runs f with the context current, unless the queue has failed.
func (q *Queue) do(f func()) {
	if q.err != nil {
		return
	}
	if err := q.b.enter(); err != nil {
		q.err = err
		return
	}
	defer q.b.leave()
	f()
}

// dev resolves b to a device pointer; b must have exactly n values (n < 0:
// any length). The zero Buf is empty.
func (q *Queue) dev(op, what string, b backend.Buf, n int) (cu.DevicePtr, int) {
	if q.err != nil {
		return 0, 0
	}
	if b.Mem() == nil {
		if n > 0 {
			q.fail("%s: %s has 0 values, want %d", op, what, n)
		}
		return 0, 0
	}
	m, ok := b.Mem().(*devMem)
	if !ok {
		q.fail("%s: %s is not CUDA memory (%T)", op, what, b.Mem())
		return 0, 0
	}
	if m.ptr == 0 {
		q.fail("%s: %s was freed", op, what)
		return 0, 0
	}
	if n >= 0 && b.Len() != n {
		q.fail("%s: %s has %d values, want %d", op, what, b.Len(), n)
		return 0, 0
	}
	return m.ptr + cu.DevicePtr(4*b.Off()), b.Len()
}

// rows checks that n values are whole rows of length r.
func (q *Queue) rows(op string, n, r int) bool {
	if q.ok() && (r <= 0 || n%r != 0) {
		q.fail("%s: %d values are not rows of %d", op, n, r)
	}
	return q.ok()
}

// ---- staging and synchronisation ----

// drain waits for both streams, copies the due results to the caller's
// slices and resets the arena.
func (q *Queue) drain() {
	t0 := time.Now()
	if err := q.s.Synchronize(); err != nil {
		q.check("synchronize", err)
	}
	if err := q.cs.Synchronize(); err != nil {
		q.check("synchronize (copies)", err)
	}
	if q.hsMade {
		if err := q.hs.Synchronize(); err != nil {
			q.check("synchronize (device hashes)", err)
		}
	}
	q.b.meter.waitNs.Add(int64(time.Since(t0)))
	q.b.meter.waits.Add(1)
	q.collect()
	if err := q.checkCopies(); err != nil && q.err == nil {
		q.err = err
	}
	for _, o := range q.outs {
		if o.f != nil {
			pcopy(o.f, unsafe.Slice((*float32)(unsafe.Add(q.arena, o.off)), len(o.f)))
		} else {
			pcopy(o.i, unsafe.Slice((*int32)(unsafe.Add(q.arena, o.off)), len(o.i)))
		}
	}
	clear(q.outs)
	q.outs = q.outs[:0]
	q.used = 0
	for i := range q.stage {
		q.stage[i].busy = false
	}
}

// hostBuf returns n bytes of the pinned arena (16-byte aligned), draining
// first when it is full, growing it when too small.
func (q *Queue) hostBuf(n int) (unsafe.Pointer, int) {
	n = (n + 15) &^ 15
	if q.used+n > q.arenaCap {
		q.drain()
		if n > q.arenaCap {
			if q.arena != nil {
				cu.MemFreeHost(q.arena)
				q.arena, q.arenaCap = nil, 0
			}
			c := max(n, 2*q.arenaCap, 1<<20)
			p, err := hostAlloc(c)
			if err != nil {
				q.check("pinned staging", err)
				return nil, 0
			}
			q.arena, q.arenaCap = p, c
		}
	}
	off := q.used
	q.used += n
	return unsafe.Add(q.arena, off), off
}

// scratchBuf returns device scratch of at least n bytes (draining and
// reallocating when it is smaller).
func (q *Queue) scratchBuf(n int64) cu.DevicePtr {
	if q.scratch != nil && n <= q.scratchCap {
		return q.scratch.ptr
	}
	q.drain()
	c := max(n, 2*q.scratchCap, 64<<10)
	if q.scratch != nil {
		q.b.release(q.scratch)
		q.scratch, q.scratchCap = nil, 0
	}
	m, err := q.b.allocMem(c)
	if err != nil {
		q.check("scratch", err)
		return 0
	}
	q.scratch, q.scratchCap = m, c
	return m.ptr
}

// upload copies host values to device memory at d (asynchronously, from
// the arena).
func (q *Queue) upload(d cu.DevicePtr, src unsafe.Pointer, n int) {
	if n == 0 || !q.ok() {
		return
	}
	p, _ := q.hostBuf(n)
	if p == nil {
		return
	}
	copy(unsafe.Slice((*byte)(p), n), unsafe.Slice((*byte)(src), n))
	t0, timed := q.timeStart(q.s)
	q.check("copy to the device", cu.MemcpyHtoDAsync(d, p, int64(n), q.s))
	q.timeEnd(q.s, t0, timed, true, "")
	q.b.meter.h2d.Add(int64(n))
	q.b.meter.h2dCopies.Add(1)
}

// uploadIdx copies an index list to device scratch at byte offset off.
func (q *Queue) uploadIdx(base cu.DevicePtr, idx []int32) {
	if len(idx) > 0 {
		q.upload(base, unsafe.Pointer(unsafe.SliceData(idx)), 4*len(idx))
	}
}

// download schedules a copy of n values at d into dst or idx (one of them)
// at the next synchronisation.
func (q *Queue) download(dst []float32, idx []int32, d cu.DevicePtr, n int) {
	if n == 0 || !q.ok() {
		return
	}
	p, off := q.hostBuf(4 * n)
	if p == nil {
		return
	}
	q.check("copy from the device", cu.MemcpyDtoHAsync(p, d, int64(4*n), q.s))
	q.b.meter.d2h.Add(int64(4 * n))
	q.outs = append(q.outs, copyOut{f: dst, i: idx, off: off})
}

// ---- launches ----

const (
	blockThreads = 256
	rowsPerBlock = blockThreads / 32 // warp-per-row kernels
)

func blocks(n, per int) int { return (n + per - 1) / per }

// Kernel arguments are 8-byte slots (gorgonia.org/cu copies each as a
// uint64): pointers, integers (long long) and floats (the low 4 bytes).
func p(d cu.DevicePtr) uint64 { return uint64(d) }
func i(n int) uint64          { return uint64(int64(n)) }
func f(x float32) uint64      { return uint64(math.Float32bits(x)) }

func (q *Queue) launch(name string, fn cu.Function, gx, gy, bx int, args ...uint64) {
	q.launchOn(q.s, name, fn, gx, gy, bx, args...)
}

// launchOn launches fn on stream s (launch: the compute stream).
func (q *Queue) launchOn(s cu.Stream, name string, fn cu.Function, gx, gy, bx int, args ...uint64) {
	q.launchGrid(s, name, fn, gx, gy, 1, bx, args...)
}

// launch3 launches fn on the compute stream over a three-dimensional grid.
func (q *Queue) launch3(name string, fn cu.Function, gx, gy, gz, bx int, args ...uint64) {
	q.launchGrid(q.s, name, fn, gx, gy, gz, bx, args...)
}

func (q *Queue) launchGrid(s cu.Stream, name string, fn cu.Function, gx, gy, gz, bx int, args ...uint64) {
	if !q.ok() || gx == 0 || gy == 0 || gz == 0 {
		return
	}
	if gy > 65535 || gz > 65535 {
		q.fail("%s: grid of %d×%d×%d blocks", name, gx, gy, gz)
		return
	}
	n := copy(q.argv[:], args)
	for j := range n {
		q.argp[j] = unsafe.Pointer(&q.argv[j])
	}
	t0, timed := q.timeStart(s)
	q.check(name, fn.Launch(gx, gy, gz, bx, 1, 1, 0, s, q.argp[:n]))
	q.timeEnd(s, t0, timed, false, name)
	q.b.meter.kernels.Add(1)
}

// ---- Queue operations ----

func (q *Queue) Write(dst backend.Buf, src []float32) {
	q.do(func() {
		d, _ := q.dev("Write", "dst", dst, len(src))
		q.upload(d, unsafe.Pointer(unsafe.SliceData(src)), 4*len(src))
	})
}

func (q *Queue) Read(dst []float32, src backend.Buf) {
	q.do(func() {
		s, _ := q.dev("Read", "src", src, len(dst))
		q.download(dst, nil, s, len(dst))
	})
}

func (q *Queue) Zero(dst backend.Buf) {
	q.do(func() {
		d, n := q.dev("Zero", "dst", dst, -1)
		if q.ok() && n > 0 {
			q.check("Zero", cu.MemsetD32Async(d, 0, int64(n), q.s))
		}
	})
}

func (q *Queue) Copy(dst backend.Buf, dstStride int, src backend.Buf, srcStride int, rows, cols int) {
	if rows < 0 || cols < 0 || dstStride < cols || srcStride < cols {
		q.fail("Copy: %d rows of %d with strides %d and %d", rows, cols, dstStride, srcStride)
		return
	}
	if rows == 0 || cols == 0 {
		return
	}
	q.do(func() {
		d, dn := q.dev("Copy", "dst", dst, -1)
		s, sn := q.dev("Copy", "src", src, -1)
		if !q.ok() {
			return
		}
		if dn < (rows-1)*dstStride+cols || sn < (rows-1)*srcStride+cols {
			q.fail("Copy: %d rows of %d with strides %d and %d from %d into %d values", rows, cols, srcStride, dstStride, sn, dn)
			return
		}
		q.launch("Copy", q.b.k.copyRows, blocks(rows*cols, blockThreads), 1, blockThreads, p(d), i(dstStride), p(s), i(srcStride), i(rows), i(cols))
	})
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
	q.do(func() {
		d, _ := q.dev("Gather", "dst", dst, len(idx)*n)
		s, sn := q.dev("Gather", "src", src, -1)
		if !q.ok() || !q.rowIndex("Gather", idx, sn/n) || len(idx) == 0 {
			return
		}
		sc := q.scratchBuf(4 * int64(len(idx)))
		q.uploadIdx(sc, idx)
		q.launch("Gather", q.b.k.gatherRows, blocks(len(idx)*n, blockThreads), 1, blockThreads, p(d), p(s), p(sc), i(len(idx)), i(n))
	})
}

func (q *Queue) Scatter(dst, src backend.Buf, idx []int32, n int) {
	if n <= 0 {
		q.fail("Scatter: rows of %d", n)
		return
	}
	q.do(func() {
		d, dn := q.dev("Scatter", "dst", dst, -1)
		s, _ := q.dev("Scatter", "src", src, len(idx)*n)
		if !q.ok() || !q.rowIndex("Scatter", idx, dn/n) || len(idx) == 0 {
			return
		}
		sc := q.scratchBuf(4 * int64(len(idx)))
		q.uploadIdx(sc, idx)
		q.launch("Scatter", q.b.k.scatterRows, blocks(len(idx)*n, blockThreads), 1, blockThreads, p(d), p(s), p(sc), i(len(idx)), i(n))
	})
}

func (q *Queue) Embed(dst backend.Buf, table *backend.Weight, ids []int32) {
	H := table.Cols()
	q.do(func() {
		d, _ := q.dev("Embed", "dst", dst, len(ids)*H)
		if !q.ok() || !q.rowIndex("Embed", ids, table.Rows()) || len(ids)*H == 0 {
			return
		}
		dw, ok := table.Dev.(*devWeight)
		if !ok {
			// A host-resident table: gather and widen the rows into pinned
			// memory and copy them.
			if table.Dev != nil || (table.Host.BF16 == nil && table.Host.F32 == nil) {
				q.fail("Embed: table %s is not this backend's", table.Host.Name)
				return
			}
			pb, _ := q.hostBuf(4 * len(ids) * H)
			if pb == nil {
				return
			}
			rows := unsafe.Slice((*float32)(pb), len(ids)*H)
			for t, id := range ids {
				table.Host.Row(int(id), rows[t*H:(t+1)*H])
			}
			q.check("Embed", cu.MemcpyHtoDAsync(d, pb, int64(4*len(rows)), q.s))
			return
		}
		sc := q.scratchBuf(4 * int64(len(ids)))
		q.uploadIdx(sc, ids)
		fn := q.b.k.embedF32
		if dw.bf16 {
			fn = q.b.k.embedBF16
		}
		q.launch("Embed", fn, blocks(len(ids)*H, blockThreads), 1, blockThreads, p(d), p(dw.ptr), p(sc), i(len(ids)), i(H))
	})
}

func (q *Queue) MatMul(y backend.Buf, w *backend.Weight, x backend.Buf, T int) {
	if T < 0 {
		q.fail("MatMul: %d tokens", T)
		return
	}
	N, K := w.Rows(), w.Cols()
	q.do(func() {
		yy, _ := q.dev("MatMul", "y", y, T*N)
		xx, _ := q.dev("MatMul", "x", x, T*K)
		if !q.ok() || T == 0 || N == 0 {
			return
		}
		dw, ok := w.Dev.(*devWeight)
		if !ok {
			q.hostMatMul(yy, w, xx, T)
			return
		}
		if dw.rows != N || dw.cols != K {
			q.fail("MatMul: weight %s is %d×%d on the device, %d×%d on the host", w.Host.Name, dw.rows, dw.cols, N, K)
			return
		}
		if dw.fp8 {
			q.matMulFP8(yy, dw, xx, N, K, T)
			return
		}
		if K == 0 {
			q.check("MatMul", cu.MemsetD32Async(yy, 0, int64(T*N), q.s))
			return
		}
		fn, rows, group := q.b.k.matmulF32, 1, 8
		aligned := uint64(dw.ptr)%16 == 0 && uint64(xx)%16 == 0 && K%8 == 0
		switch {
		case q.b.matMulOneToken(T):
			fn, group = q.b.k.matmulF32T1, 1
			if dw.bf16 {
				fn = q.b.k.matmulBF16T1
			}
		case q.b.matMulRows(N, T) == 4:
			fn, rows = q.b.k.matmulF32R4, 4
			if dw.bf16 && aligned {
				fn = q.b.k.matmulBF16R4A
			} else if dw.bf16 {
				fn = q.b.k.matmulBF16R4
			}
		case q.b.matMulDepth() == 4:
			fn = q.b.k.matmulF32D4
			if dw.bf16 {
				fn = q.b.k.matmulBF16D4
			}
		case dw.bf16:
			fn = q.b.k.matmulBF16
		}
		q.launch("MatMul", fn, blocks(N, rows*rowsPerBlock), blocks(T, group), blockThreads, p(yy), p(dw.ptr), p(xx), i(N), i(K), i(T))
	})
}

// SoftmaxNorm is backend.Normaliser's: one block of softmaxNormThreads a
// row (softmax_norm) finds its canon.Max, then sums the terms canon.Exp(x −
// m) in canon.Sum's order, computed a tile ahead by the block's other warps.
func (q *Queue) SoftmaxNorm(out, x backend.Buf, rows, n int) {
	if rows < 0 || n < 0 {
		q.fail("SoftmaxNorm: %d rows of %d", rows, n)
		return
	}
	q.do(func() {
		oo, _ := q.dev("SoftmaxNorm", "out", out, 2*rows)
		xx, xn := q.dev("SoftmaxNorm", "x", x, -1)
		if !q.ok() || rows == 0 {
			return
		}
		if xn < rows*n {
			q.fail("SoftmaxNorm: x holds %d values, want %d rows of %d", xn, rows, n)
			return
		}
		q.launch("SoftmaxNorm", q.b.k.softmaxNorm, rows, 1, softmaxNormThreads, p(oo), p(xx), i(rows), i(n))
	})
}

// Argmax is backend.Argmaxer's: one block of argmaxThreads a row
// (argmax_rows), the ids copied back at the next synchronisation.
func (q *Queue) Argmax(idx []int32, x backend.Buf, rows, n int) {
	if rows < 0 || n < 0 || len(idx) != rows {
		q.fail("Argmax: %d rows of %d into %d ids", rows, n, len(idx))
		return
	}
	q.do(func() {
		xx, xn := q.dev("Argmax", "x", x, -1)
		if !q.ok() || rows == 0 {
			return
		}
		if xn < rows*n {
			q.fail("Argmax: x holds %d values, want %d rows of %d", xn, rows, n)
			return
		}
		ids := q.scratchBuf((4*int64(rows) + 255) &^ 255)
		if !q.ok() {
			return
		}
		q.launch("Argmax", q.b.k.argmaxRows, rows, 1, argmaxThreads, p(ids), p(xx), i(rows), i(n))
		q.download(nil, idx, ids, rows)
	})
}

// matMulRows is the weight rows a warp of MatMul computes for an N-row
// weight and T tokens (Options.MatMulRows): four when the grid of
// four-row blocks still has a block for every multiprocessor (each token's
// activations are then loaded once for four rows, and a lane has four
// rows' loads in flight), else one. Measured on the H200 (BenchmarkMatMul,
// BENCHMARKS.md): four rows were faster at every shape and token count
// whose grid had 192 blocks or more, one row (four chunks deep) wherever
// it had 96 or fewer.
func (b *Backend) matMulRows(N, T int) int {
	if b.o.MatMulRows != 0 {
		return b.o.MatMulRows
	}
	if blocks(N, 4*rowsPerBlock)*blocks(T, 8) >= b.sms {
		return 4
	}
	return 1
}

// matMulOneToken says whether a product of T tokens runs the one-token
// kernels (matmul_*_t1, matmul_group_t1: one token's accumulators a lane,
// four chunks in flight): for one token, unless MatMulRows or MatMulDepth
// force a kernel.
func (b *Backend) matMulOneToken(T int) bool {
	return T == 1 && b.o.MatMulRows == 0 && b.o.MatMulDepth == 0
}

// matMulDepth is the chunks in flight a lane of the one-row MatMuls
// (Options.MatMulDepth): four unless forced.
func (b *Backend) matMulDepth() int {
	if b.o.MatMulDepth != 0 {
		return b.o.MatMulDepth
	}
	return 4
}

// matMulFP8 enqueues the block-FP8 product y = W·x (kernels/fp8.cu): the
// activations are quantised into the queue's scratch (the integer form of
// their E4M3 codes, the group scales and the groups' non-finite flags),
// then multiplied by the codes and scales of dw.
func (q *Queue) matMulFP8(y cu.DevicePtr, dw *devWeight, x cu.DevicePtr, N, K, T int) {
	G := (K + dw.bk - 1) / dw.bk
	xiBytes := (4*int64(T)*int64(K) + 255) &^ 255
	gBytes := (4*int64(T)*int64(G) + 255) &^ 255
	sc := q.scratchBuf(xiBytes + 2*gBytes)
	if !q.ok() {
		return
	}
	xi, s, bad := sc, sc+cu.DevicePtr(xiBytes), sc+cu.DevicePtr(xiBytes+gBytes)
	q.launch("MatMul FP8 quantize", q.b.k.fp8Quantize, blocks(T*G, rowsPerBlock), 1, blockThreads,
		p(xi), p(s), p(bad), p(x), i(T), i(K), i(dw.bk))
	q.launch("MatMul FP8", q.b.k.matmulFP8, blocks(N, rowsPerBlock), blocks(T, 8), blockThreads,
		p(y), p(dw.ptr), p(dw.scale), i(dw.sdt), p(xi), p(s), p(bad), i(N), i(K), i(T), i(dw.bn), i(dw.bk))
}

// mmEntry is kernels/ops.cu's mm_entry: one product of a matmul_group
// launch.
type mmEntry struct {
	y, w, x                   uint64
	n, k, t, bf16, first, rbs int64
}

// MatMuls computes each op as MatMul does (backend.Grouper): the products
// whose weights are on the device in one matmul_group launch, whose blocks
// are exactly MatMul's, the others one at a time.
func (q *Queue) MatMuls(ops []backend.MatMulOp) {
	rest := q.mmRest[:0]
	defer func() {
		for _, o := range rest {
			q.MatMul(o.Y, o.W, o.X, o.T)
		}
		q.mmRest = rest[:0]
	}()
	q.do(func() {
		// Up to three tables, one launch each (mmOneToken, mmFourRows,
		// mmOneRow: the kernel an entry's token count chooses, as MatMul
		// would); each table's first blocks count from 0.
		var tabs [mmClasses][]mmEntry
		var firsts [mmClasses]int64
		for c := range tabs {
			tabs[c] = q.mmTabs[c][:0]
		}
		for _, o := range ops {
			if o.T < 0 {
				q.fail("MatMuls: %d tokens", o.T)
				return
			}
			N, K := o.W.Rows(), o.W.Cols()
			dw, ok := o.W.Dev.(*devWeight)
			if !ok || dw.fp8 || K == 0 || o.T == 0 || N == 0 {
				rest = append(rest, o) // after the launch: each is independent
				continue
			}
			yy, _ := q.dev("MatMuls", "y", o.Y, o.T*N)
			xx, _ := q.dev("MatMuls", "x", o.X, o.T*K)
			if !q.ok() {
				return
			}
			if dw.rows != N || dw.cols != K {
				q.fail("MatMuls: weight %s is %d×%d on the device, %d×%d on the host", o.W.Host.Name, dw.rows, dw.cols, N, K)
				return
			}
			c, rows, group := mmOneRow, 1, 8
			switch {
			case q.b.matMulOneToken(o.T):
				c, group = mmOneToken, 1
			case q.b.groupFourRows(o.T):
				c, rows = mmFourRows, 4
			}
			e := mmEntry{y: p(yy), w: p(dw.ptr), x: p(xx), n: int64(N), k: int64(K), t: int64(o.T),
				first: firsts[c], rbs: int64(blocks(N, rows*rowsPerBlock))}
			if dw.bf16 {
				e.bf16 = 1
			}
			tabs[c] = append(tabs[c], e)
			firsts[c] += e.rbs * int64(blocks(o.T, group))
		}
		q.mmTabs = tabs
		n := 0
		for c := range tabs {
			if firsts[c] > math.MaxInt32 {
				q.fail("MatMuls: a grid of %d blocks", firsts[c])
				return
			}
			n += len(tabs[c])
		}
		if n == 0 {
			return
		}
		size := int(unsafe.Sizeof(mmEntry{}))
		at := q.scratchBuf(int64(size * n))
		fns := [mmClasses]cu.Function{mmOneToken: q.b.k.matmulGroupT1, mmFourRows: q.b.k.matmulGroupR4, mmOneRow: q.b.k.matmulGroup}
		if q.b.matMulDepth() == 4 {
			fns[mmOneRow] = q.b.k.matmulGroupD4
		}
		for c, tab := range tabs {
			if len(tab) == 0 {
				continue
			}
			q.upload(at, unsafe.Pointer(unsafe.SliceData(tab)), size*len(tab))
			q.launch("MatMuls", fns[c], int(firsts[c]), 1, blockThreads, p(at), i(len(tab)))
			at += cu.DevicePtr(size * len(tab))
		}
	})
}

// The kernels of MatMuls' tables: matmul_group_t1, matmul_group_r4 and
// matmul_group (or _d4).
const (
	mmOneToken = iota
	mmFourRows
	mmOneRow
	mmClasses
)

// groupFourRows says whether a grouped product of T tokens runs four weight
// rows a warp: for 4 tokens or more (a launch holds many products, so the
// grid is the whole group's), or wherever MatMulRows forces four.
func (b *Backend) groupFourRows(T int) bool {
	return b.o.MatMulRows == 4 || (b.o.MatMulRows == 0 && T >= 4)
}

// hostMatMul computes y = W·x with a host-resident weight on the CPU
// reference: x comes back to the host (a synchronisation) and y goes to
// the device.
func (q *Queue) hostMatMul(y cu.DevicePtr, w *backend.Weight, x cu.DevicePtr, T int) {
	if w.Dev != nil || (w.Host.BF16 == nil && w.Host.F32 == nil && w.Host.F8 == nil) {
		q.fail("MatMul: weight %s is not this backend's", w.Host.Name)
		return
	}
	N, K := w.Rows(), w.Cols()
	if cap(q.hx) < T*K {
		q.hx = make([]float32, T*K)
	}
	if cap(q.hy) < T*N {
		q.hy = make([]float32, T*N)
	}
	hx, hy := q.hx[:T*K], q.hy[:T*N]
	q.download(hx, nil, x, T*K)
	q.drain()
	if !q.ok() {
		return
	}
	q.host.MatMul(cpu.Wrap(hy), w, cpu.Wrap(hx), T)
	if err := q.host.Err(); err != nil {
		q.check("MatMul on the host", err)
		return
	}
	q.upload(y, unsafe.Pointer(unsafe.SliceData(hy)), 4*len(hy))
}

func (q *Queue) RMSNorm(y, x, scale backend.Buf, n int, eps float32) {
	q.do(func() {
		xx, xn := q.dev("RMSNorm", "x", x, -1)
		yy, _ := q.dev("RMSNorm", "y", y, xn)
		ss, _ := q.dev("RMSNorm", "scale", scale, n)
		if q.rows("RMSNorm", xn, n) && xn > 0 {
			r := xn / n
			if n >= rmsRowMin && n <= rmsRowMax {
				q.launch("RMSNorm", q.b.k.rmsnormRow, r, 1, rmsRowThreads, p(yy), p(xx), p(ss), i(r), i(n), f(eps))
				return
			}
			q.launch("RMSNorm", q.b.k.rmsnorm, blocks(r, rowsPerBlock), 1, blockThreads, p(yy), p(xx), p(ss), i(r), i(n), f(eps))
		}
	})
}

func (q *Queue) GatedRMSNorm(y, x, z, w backend.Buf, n int, eps float32) {
	q.do(func() {
		xx, xn := q.dev("GatedRMSNorm", "x", x, -1)
		yy, _ := q.dev("GatedRMSNorm", "y", y, xn)
		zz, _ := q.dev("GatedRMSNorm", "z", z, xn)
		ww, _ := q.dev("GatedRMSNorm", "w", w, n)
		if q.rows("GatedRMSNorm", xn, n) && xn > 0 {
			r := xn / n
			q.launch("GatedRMSNorm", q.b.k.gatedRMSNorm, blocks(r, rowsPerBlock), 1, blockThreads, p(yy), p(xx), p(zz), p(ww), i(r), i(n), f(eps))
		}
	})
}

func (q *Queue) L2Norm(y, x backend.Buf, n int, eps, scale float32) {
	q.do(func() {
		xx, xn := q.dev("L2Norm", "x", x, -1)
		yy, _ := q.dev("L2Norm", "y", y, xn)
		if q.rows("L2Norm", xn, n) && xn > 0 {
			r := xn / n
			q.launch("L2Norm", q.b.k.l2norm, blocks(r, rowsPerBlock), 1, blockThreads, p(yy), p(xx), i(r), i(n), f(eps), f(scale))
		}
	})
}

func (q *Queue) RoPE(x backend.Buf, T, heads, hd int, cos, sin backend.Buf) {
	if T <= 0 || heads <= 0 || hd <= 0 || cos.Len()%T != 0 || 2*(cos.Len()/T) > hd {
		q.fail("RoPE: %d tokens of %d heads of %d with a table of %d", T, heads, hd, cos.Len())
		return
	}
	q.do(func() {
		xx, _ := q.dev("RoPE", "x", x, T*heads*hd)
		cc, cn := q.dev("RoPE", "cos", cos, -1)
		ss, _ := q.dev("RoPE", "sin", sin, cn)
		h2 := cn / T
		if q.ok() && h2 > 0 {
			q.launch("RoPE", q.b.k.rope, blocks(T*heads*h2, blockThreads), 1, blockThreads, p(xx), i(T), i(heads), i(hd), i(h2), p(cc), p(ss))
		}
	})
}

func (q *Queue) Attention(o, qb, k, v backend.Buf, T, pos0, nq, nkv, hd int, scale float32) {
	if T <= 0 || pos0 < 0 || nq <= 0 || nkv <= 0 || hd <= 0 || nq%nkv != 0 {
		q.fail("Attention: %d tokens at %d, %d query heads, %d KV heads of %d", T, pos0, nq, nkv, hd)
		return
	}
	q.do(func() {
		oo, _ := q.dev("Attention", "o", o, T*nq*hd)
		qq, _ := q.dev("Attention", "q", qb, T*nq*hd)
		kk, kn := q.dev("Attention", "k", k, -1)
		vv, vn := q.dev("Attention", "v", v, -1)
		if need := (pos0 + T) * nkv * hd; q.ok() && (kn < need || vn < need) {
			q.fail("Attention: a KV cache of %d and %d values for %d positions of %d", kn, vn, pos0+T, nkv*hd)
		}
		if !q.ok() {
			return
		}
		maxn := pos0 + T
		sc := q.scratchBuf(4 * int64(T*nq) * int64(maxn))
		q.launch("Attention", q.b.k.attention, T*nq, 1, 128, p(oo), p(qq), p(kk), p(vv), p(sc), i(T), i(pos0), i(nq), i(nkv), i(hd), f(scale), i(maxn))
	})
}

func (q *Queue) CausalConv(y, x, state, w backend.Buf, T, C, Kc int) {
	if T <= 0 || C <= 0 || Kc <= 0 {
		q.fail("CausalConv: %d tokens of %d channels, kernel %d", T, C, Kc)
		return
	}
	q.do(func() {
		yy, _ := q.dev("CausalConv", "y", y, T*C)
		xx, _ := q.dev("CausalConv", "x", x, T*C)
		st, _ := q.dev("CausalConv", "state", state, C*(Kc-1))
		ww, _ := q.dev("CausalConv", "w", w, C*Kc)
		q.launch("CausalConv", q.b.k.causalConv, blocks(C, 128), 1, 128, p(yy), p(xx), p(st), p(ww), i(T), i(C), i(Kc))
	})
}

func (q *Queue) GDNGates(beta, alpha, b, a, aLog, dtBias backend.Buf) {
	q.do(func() {
		al, nv := q.dev("GDNGates", "aLog", aLog, -1)
		dt, _ := q.dev("GDNGates", "dtBias", dtBias, nv)
		bb, n := q.dev("GDNGates", "b", b, -1)
		aa, _ := q.dev("GDNGates", "a", a, n)
		be, _ := q.dev("GDNGates", "beta", beta, n)
		ap, _ := q.dev("GDNGates", "alpha", alpha, n)
		if q.rows("GDNGates", n, nv) && n > 0 {
			q.launch("GDNGates", q.b.k.gdnGates, blocks(n, blockThreads), 1, blockThreads, p(be), p(ap), p(bb), p(aa), p(al), p(dt), i(n), i(nv))
		}
	})
}

func (q *Queue) DeltaRule(o, qb, k, v, beta, alpha, S backend.Buf, T, nk, nv, dk, dv int) {
	if T <= 0 || nk <= 0 || nv <= 0 || dk <= 0 || dv <= 0 || nv%nk != 0 {
		q.fail("DeltaRule: %d tokens, %d key heads, %d value heads, dims %d and %d", T, nk, nv, dk, dv)
		return
	}
	q.do(func() {
		oo, _ := q.dev("DeltaRule", "o", o, T*nv*dv)
		qq, _ := q.dev("DeltaRule", "q", qb, T*nk*dk)
		kk, _ := q.dev("DeltaRule", "k", k, T*nk*dk)
		vv, _ := q.dev("DeltaRule", "v", v, T*nv*dv)
		be, _ := q.dev("DeltaRule", "beta", beta, T*nv)
		al, _ := q.dev("DeltaRule", "alpha", alpha, T*nv)
		ss, _ := q.dev("DeltaRule", "S", S, nv*dk*dv)
		const bt = 64
		q.launch("DeltaRule", q.b.k.deltaRule, nv, blocks(dv, bt), bt, p(oo), p(qq), p(kk), p(vv), p(be), p(al), p(ss), i(T), i(nk), i(nv), i(dk), i(dv))
	})
}

// drEntry is kernels/ops.cu's dr_entry: one session of a delta_rule_group
// launch.
type drEntry struct {
	o, q, k, v, beta, alpha, s uint64
	t                          int64
}

// DeltaRules is backend.DeltaRuler's: one delta_rule_group launch, whose
// grid's z is the op, each block the block of delta_rule over its op.
func (q *Queue) DeltaRules(ops []backend.DeltaRuleOp, nk, nv, dk, dv int) {
	if nk <= 0 || nv <= 0 || dk <= 0 || dv <= 0 || nv%nk != 0 || len(ops) > 65535 {
		q.fail("DeltaRules: %d ops, %d key heads, %d value heads, dims %d and %d", len(ops), nk, nv, dk, dv)
		return
	}
	for _, o := range ops {
		if o.T <= 0 {
			q.fail("DeltaRules: an op of %d tokens", o.T)
			return
		}
	}
	if len(ops) == 0 {
		return
	}
	q.do(func() {
		tab := q.drTab[:0]
		for _, o := range ops {
			T := o.T
			oo, _ := q.dev("DeltaRules", "o", o.O, T*nv*dv)
			qq, _ := q.dev("DeltaRules", "q", o.Q, T*nk*dk)
			kk, _ := q.dev("DeltaRules", "k", o.K, T*nk*dk)
			vv, _ := q.dev("DeltaRules", "v", o.V, T*nv*dv)
			be, _ := q.dev("DeltaRules", "beta", o.Beta, T*nv)
			al, _ := q.dev("DeltaRules", "alpha", o.Alpha, T*nv)
			ss, _ := q.dev("DeltaRules", "S", o.S, nv*dk*dv)
			tab = append(tab, drEntry{p(oo), p(qq), p(kk), p(vv), p(be), p(al), p(ss), int64(T)})
		}
		q.drTab = tab
		if !q.ok() {
			return
		}
		n := int(unsafe.Sizeof(drEntry{})) * len(tab)
		sc := q.scratchBuf(int64(n))
		q.upload(sc, unsafe.Pointer(unsafe.SliceData(tab)), n)
		const bt = 64 // DeltaRule's
		q.launch3("DeltaRule", q.b.k.deltaRuleGroup, nv, blocks(dv, bt), len(tab), bt, p(sc), i(nk), i(nv), i(dk), i(dv))
	})
}

func (q *Queue) elementwise(op string, fn cu.Function, y, a, b backend.Buf) {
	q.do(func() {
		yy, n := q.dev(op, "y", y, -1)
		aa, _ := q.dev(op, "a", a, n)
		bb, _ := q.dev(op, "b", b, n)
		if n > 0 {
			q.launch(op, fn, blocks(n, blockThreads), 1, blockThreads, p(yy), p(aa), p(bb), i(n))
		}
	})
}

func (q *Queue) SiLUMul(y, g, u backend.Buf) { q.elementwise("SiLUMul", q.b.k.siluMul, y, g, u) }
func (q *Queue) SigmoidMul(y, x, g backend.Buf) {
	q.elementwise("SigmoidMul", q.b.k.sigmoidMul, y, x, g)
}
func (q *Queue) Add(y, a, b backend.Buf) { q.elementwise("Add", q.b.k.add, y, a, b) }

func (q *Queue) Route(idx []int32, w, logits backend.Buf, T, E, k int, renorm bool) {
	if T <= 0 || E <= 0 || k <= 0 || k > E || len(idx) != T*k {
		q.fail("Route: %d tokens, %d experts, top-%d into %d ids", T, E, k, len(idx))
		return
	}
	q.do(func() {
		ww, _ := q.dev("Route", "w", w, T*k)
		lg, _ := q.dev("Route", "logits", logits, T*E)
		if !q.ok() {
			return
		}
		rn := 0
		if renorm {
			rn = 1
		}
		idBytes := (4*int64(T*k) + 255) &^ 255
		if E <= routeWarpE { // one warp a token, p and the pairs in shared memory
			ids := q.scratchBuf(idBytes)
			q.launch("Route", q.b.k.routeWarp, T, 1, 32, p(ids), p(ww), p(lg), i(T), i(E), i(k), i(rn))
			q.download(nil, idx, ids, T*k)
			return
		}
		// Scratch: the ids (T·k), then p (T·E), then the pairs (T·E·8 bytes).
		pBytes := (4*int64(T*E) + 255) &^ 255
		sc := q.scratchBuf(idBytes + pBytes + 8*int64(T*E))
		ids, pp, pairs := sc, sc+cu.DevicePtr(idBytes), sc+cu.DevicePtr(idBytes+pBytes)
		q.launch("Route", q.b.k.route, blocks(T, 64), 1, 64, p(ids), p(ww), p(lg), p(pp), p(pairs), i(T), i(E), i(k), i(rn))
		q.download(nil, idx, ids, T*k)
	})
}

func (q *Queue) Combine(y, x, w backend.Buf, T, k, n int) {
	if T <= 0 || k <= 0 || n <= 0 {
		q.fail("Combine: %d tokens, %d slots of %d", T, k, n)
		return
	}
	q.do(func() {
		yy, _ := q.dev("Combine", "y", y, T*n)
		xx, _ := q.dev("Combine", "x", x, T*k*n)
		ww, _ := q.dev("Combine", "w", w, T*k)
		q.launch("Combine", q.b.k.combine, blocks(T*n, blockThreads), 1, blockThreads, p(yy), p(xx), p(ww), i(T), i(k), i(n))
	})
}

func (q *Queue) GateAdd(y, x, g backend.Buf, T, n int) {
	if T <= 0 || n <= 0 {
		q.fail("GateAdd: %d tokens of %d", T, n)
		return
	}
	q.do(func() {
		yy, _ := q.dev("GateAdd", "y", y, T*n)
		xx, _ := q.dev("GateAdd", "x", x, T*n)
		gg, _ := q.dev("GateAdd", "g", g, T)
		q.launch("GateAdd", q.b.k.gateAdd, blocks(T*n, blockThreads), 1, blockThreads, p(yy), p(xx), p(gg), i(T), i(n))
	})
}

// ---- routed experts ----

// hostExpert is a streamed expert no device slot could take: its bytes are
// copied (the caller recycles them) and computed on the host.
type hostExpert struct{ gate, up, down backend.Mat }

// LoadExpert copies the expert into one of the queue's two transient
// device slots for this use (residency between uses is the pool's slots,
// which the expert hierarchy fills: FillSlot); with no device memory to be
// had, the expert is computed on the host.
func (q *Queue) LoadExpert(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	var v backend.Expert
	if err := backend.ViewExpert(&v, id, digest, gate, up, down, I, H); err != nil {
		return err
	}
	if q.err != nil {
		return q.err
	}
	if err := q.b.enter(); err != nil {
		return err
	}
	defer q.b.leave()
	b := q.b
	l, err := layout(&v)
	if errors.Is(err, errMixed) {
		// No slot layout for it: the host computes it (the same bits).
		b.meter.host.Add(1)
		return q.hostExpert(x, &v)
	} else if err != nil {
		return err
	}
	b.mu.Lock()
	sl := q.transient(l.size)
	if sl != nil {
		sl.users++
	}
	b.mu.Unlock()
	if sl == nil {
		b.meter.host.Add(1)
		return q.hostExpert(x, &v)
	}
	if err := q.copyInto(sl, &v, l); err != nil {
		b.mu.Lock()
		sl.users--
		b.mu.Unlock()
		return err
	}
	fill(x, id, digest, sl)
	return q.err
}

// FillSlot copies the expert into s, one of the pool's slots, after every
// queue's last use of it (its free events) and the device hash of its
// last copy; with Options.VerifyCopies the copy is hashed on the device
// and checked at this queue's next Sync (a copy that differs empties s).
func (q *Queue) FillSlot(s backend.Slot, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	sl, ok := s.(*slot)
	if !ok || sl == nil || sl.b != q.b || !sl.pool {
		return fmt.Errorf("cuda: FillSlot of %v: %T is not a slot of this backend's pool", id, s)
	}
	var v backend.Expert
	if err := backend.ViewExpert(&v, id, digest, gate, up, down, I, H); err != nil {
		return err
	}
	l, err := layout(&v)
	if err != nil {
		return fmt.Errorf("cuda: FillSlot of %v: %w", id, err)
	}
	if q.err != nil {
		return q.err
	}
	if err := q.b.enter(); err != nil {
		return err
	}
	defer q.b.leave()
	if err := q.copyInto(sl, &v, l); err != nil {
		return err
	}
	q.filled = sl
	return nil
}

// BindSlot makes x use the copy s holds, once the copy that filled it is
// done (the compute stream waits for it).
func (q *Queue) BindSlot(x *backend.Expert, s backend.Slot, id weights.ExpertID, digest jnf.Digest) error {
	sl, ok := s.(*slot)
	if !ok || sl == nil || sl.b != q.b || !sl.pool {
		return fmt.Errorf("cuda: BindSlot of %v: %T is not a slot of this backend's pool", id, s)
	}
	if q.err != nil {
		return q.err
	}
	if err := q.b.enter(); err != nil {
		return err
	}
	defer q.b.leave()
	b := q.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if sl.digest.IsZero() || sl.digest != digest || sl.id != id {
		if sl.bad != nil {
			return fmt.Errorf("cuda: BindSlot of %v: the slot's copy failed its check: %w", id, sl.bad)
		}
		return fmt.Errorf("cuda: BindSlot of %v (%s): the slot holds %v (%s)", id, digest, sl.id, sl.digest)
	}
	sl.users++
	q.check("BindSlot", q.s.Wait(sl.ready, 0))
	fill(x, id, digest, sl)
	if q.filled == sl {
		q.filled = nil
	} else {
		b.meter.cached.Add(1)
	}
	return q.err
}

// copyInto copies v's matrices into sl on the copy stream, which first
// waits for every queue's last use of sl and the hash of its last copy;
// the compute stream then waits for the copy. The bytes go straight from
// where they lie when that is memory Pin registered (the streaming tier's
// staging buffers; copyInto then waits for the copy before it returns, as
// the caller may recycle the bytes), else through a pinned staging buffer
// (one host copy, and copyInto returns at once). The context is current;
// the caller keeps other fills of sl out (a use of a transient slot, the
// tier's lease of a pool slot).
func (q *Queue) copyInto(sl *slot, v *backend.Expert, l slotLayout) error {
	if l.size > sl.bytes {
		q.fail("%v: %d bytes in a slot of %d", v.ID, l.size, sl.bytes)
		return q.err
	}
	direct := true
	for _, m := range l.parts[:l.n] {
		direct = direct && q.b.isPinned(unsafe.Pointer(unsafe.SliceData(m)), len(m))
	}
	var st *staging
	if !direct {
		// Stage the bytes in pinned memory first (outside the lock).
		st = &q.stage[q.next]
		q.next = (q.next + 1) % len(q.stage)
		if st.busy {
			if err := st.done.Synchronize(); err != nil {
				q.check("staging", err)
				return q.err
			}
		}
		if st.cap < int(l.size) {
			if st.p != nil {
				cu.MemFreeHost(st.p)
				st.p, st.cap = nil, 0
			}
			ptr, err := hostAlloc(int(l.size))
			if err != nil {
				q.check("expert staging", err)
				return q.err
			}
			st.p, st.cap = ptr, int(l.size)
		}
		buf := unsafe.Slice((*byte)(st.p), l.size)
		for j, m := range l.parts[:l.n] {
			copy(buf[l.off[j]:], m)
		}
	}
	b := q.b
	// Under b.mu from the waits to the new contents: a scrub (ScrubDevice)
	// either enqueued its hash of the old copy before (the copy waits for
	// it) or sees the new one.
	b.mu.Lock()
	q.waitFree(sl)
	t0, timed := q.timeStart(q.cs)
	if direct {
		for j, m := range l.parts[:l.n] {
			q.check("expert copy", cu.MemcpyHtoDAsync(sl.ptr+cu.DevicePtr(l.off[j]), unsafe.Pointer(unsafe.SliceData(m)), int64(len(m)), q.cs))
		}
		b.meter.h2dCopies.Add(int64(l.n))
		b.meter.direct.Add(1)
	} else {
		q.check("expert copy", cu.MemcpyHtoDAsync(sl.ptr, st.p, l.size, q.cs))
		b.meter.h2dCopies.Add(1)
	}
	q.timeEnd(q.cs, t0, timed, true, "")
	b.meter.h2d.Add(l.size)
	b.meter.expertH2D.Add(l.size)
	b.meter.loaded.Add(1)
	if !direct {
		q.check("expert copy", st.done.Record(q.cs))
		st.busy = true
	}
	q.check("expert copy", sl.ready.Record(q.cs))
	q.check("expert copy", q.s.Wait(sl.ready, 0))
	for j, w := range []*backend.Weight{&v.Gate, &v.Up, &v.Down} {
		m := &w.Host
		dw := devWeight{ptr: sl.ptr + cu.DevicePtr(l.off[j]), bf16: m.F32 == nil && !m.Quantized(), rows: w.Rows(), cols: w.Cols(),
			bytes: int64(len(l.parts[j])), name: m.Name}
		if m.Quantized() {
			dw.fp8, dw.scale, dw.bn, dw.bk = true, sl.ptr+cu.DevicePtr(l.off[3+j]), m.BlockN, m.BlockK
			dw.sdt, _ = scaleType(m.ScaleDType)
		}
		sl.parts[j] = dw
	}
	for j, g := range l.segs {
		sl.segs[j] = segment{sl.ptr + cu.DevicePtr(g[0]), g[1]}
	}
	sl.id, sl.digest, sl.bad = v.ID, v.Digest, nil
	b.mu.Unlock()
	q.verifyCopy(sl, v.ID, v.Digest)
	if direct {
		// The caller may recycle the bytes once copyInto returns.
		q.check("expert copy", sl.ready.Synchronize())
	}
	return q.err
}

// waitFree makes the copy stream wait until sl is free to be overwritten:
// every queue's last use of it and the device hash of its last copy.
func (q *Queue) waitFree(sl *slot) {
	for _, ev := range sl.free {
		q.check("expert copy", q.cs.Wait(ev, 0))
	}
	if sl.hashedSet {
		q.check("expert copy", q.cs.Wait(sl.hashed, 0))
	}
}

// transient returns a free slot of the queue's own (allocating up to two),
// or nil (b.mu held).
func (q *Queue) transient(n int64) *slot {
	for _, sl := range q.trans {
		if sl.users == 0 && sl.bytes >= n {
			return sl
		}
	}
	if len(q.trans) >= 2 {
		return nil
	}
	sl, err := newSlot(q.b, n)
	if err != nil {
		return nil
	}
	q.trans = append(q.trans, sl)
	return sl
}

// hostExpert makes x compute on the host from its own copy of the bytes.
func (q *Queue) hostExpert(x *backend.Expert, v *backend.Expert) error {
	he := &hostExpert{gate: copyMat(v.Gate.Host), up: copyMat(v.Up.Host), down: copyMat(v.Down.Host)}
	*x = backend.Expert{ID: v.ID, Digest: v.Digest, Slot: he}
	x.Gate = backend.Weight{Key: backend.Key{Digest: v.Digest, Part: 0}, Host: he.gate}
	x.Up = backend.Weight{Key: backend.Key{Digest: v.Digest, Part: 1}, Host: he.up}
	x.Down = backend.Weight{Key: backend.Key{Digest: v.Digest, Part: 2}, Host: he.down}
	return nil
}

func copyMat(m backend.Mat) backend.Mat {
	c := m
	switch {
	case m.Quantized():
		c.F8 = append([]byte(nil), m.F8...)
		c.Scale = append([]float32(nil), m.Scale...)
		c.ScaleData = append([]byte(nil), m.ScaleData...)
	case m.F32 != nil:
		c.F32 = append([]float32(nil), m.F32...)
	default:
		c.BF16 = append([]uint16(nil), m.BF16...)
	}
	return c
}

// fill makes x use the matrices in sl.
func fill(x *backend.Expert, id weights.ExpertID, digest jnf.Digest, sl *slot) {
	*x = backend.Expert{ID: id, Digest: digest, Slot: sl}
	for j, w := range []*backend.Weight{&x.Gate, &x.Up, &x.Down} {
		dw := &sl.parts[j]
		*w = backend.Weight{Key: backend.Key{Digest: digest, Part: j}, Host: backend.Mat{Name: dw.name, Rows: dw.rows, Cols: dw.cols}, Dev: dw}
	}
}

// ReleaseExpert records the end of x's use on the compute stream: the next
// copy into its slot waits for it.
func (q *Queue) ReleaseExpert(x *backend.Expert) {
	if sl, ok := x.Slot.(*slot); ok {
		if err := q.b.enter(); err != nil {
			q.check("ReleaseExpert", err)
		} else {
			b := q.b
			b.mu.Lock()
			ev, ok := sl.free[q]
			if !ok {
				var err error
				if ev, err = cu.MakeEvent(cu.DisableTiming); err != nil {
					q.check("ReleaseExpert", err)
				}
				sl.free[q] = ev
			}
			q.check("ReleaseExpert", ev.Record(q.s))
			sl.users--
			b.mu.Unlock()
			q.b.leave()
		}
	}
	*x = backend.Expert{}
}

// Sync waits for everything enqueued and returns the queue's first error.
func (q *Queue) Sync() error {
	if err := q.b.enter(); err != nil {
		return err
	}
	defer q.b.leave()
	q.drain()
	return q.err
}

// Close waits for the queue's work and frees what it holds.
func (q *Queue) Close() error {
	if q.b == nil {
		return nil
	}
	if err := q.b.enter(); err != nil {
		return err
	}
	defer q.b.leave()
	q.drain()
	b := q.b
	b.mu.Lock()
	for _, sl := range b.pool {
		if ev, ok := sl.free[q]; ok {
			cu.DestroyEvent(&ev)
			delete(sl.free, q)
		}
	}
	for _, sl := range q.trans {
		sl.destroy()
	}
	b.mu.Unlock()
	q.trans = nil
	for j := range q.stage {
		if q.stage[j].p != nil {
			cu.MemFreeHost(q.stage[j].p)
		}
		cu.DestroyEvent(&q.stage[j].done)
	}
	if q.arena != nil {
		cu.MemFreeHost(q.arena)
	}
	if q.scratch != nil {
		b.release(q.scratch)
	}
	for _, m := range []*devMem{q.b3.cvs, q.b3.digests} {
		if m != nil {
			b.release(m)
		}
	}
	q.destroyEvents()
	q.s.Destroy()
	q.cs.Destroy()
	if q.hsMade {
		q.hs.Destroy()
	}
	q.b = nil
	return nil
}
