//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Built reports whether this binary has the CUDA backend.
const Built = true

// maxSlots bounds the expert slots of the pool (SlotPool).
const maxSlots = 1 << 14

// Backend is the CUDA backend: one device, its primary context, the
// kernels' module, the resident weights (keyed by digest) and the pool of
// expert slots (SlotPool), whose contents the expert hierarchy decides. Weights that the budget leaves on the host
// are computed there by the CPU reference (the same bits). It is safe for
// concurrent use.
type Backend struct {
	o     Options
	dev   cu.Device
	ctx   cu.CUContext
	mod   cu.Module
	mod8  cu.Module // the fp8 module (kernels/fp8.cu)
	k     kernels
	host  *cpu.CPU
	desc  string
	total int64
	sms   int       // multiprocessors
	aux   cu.Stream // zeroing new allocations

	allocMu sync.Mutex                   // budget check and allocation together
	small   [smallClasses][]cu.DevicePtr // free small blocks by size class
	slabs   []cu.DevicePtr

	mu       sync.Mutex
	weights  map[backend.Key]*devWeight
	hostOnly map[backend.Key]*hostWeight
	pool     []*slot // the slots AllocSlot made
	slotSize int64   // the largest of them
	// chunks are the device memory of the pool's slots, several slots to
	// an allocation (slotChunk); holes are the slots FreeSlot gave back,
	// by size, for AllocSlot to use again.
	chunks []*slotChunk
	holes  map[int64][]cu.DevicePtr
	// closed is set when Close begins: every call after it is refused
	// (enter fails) instead of running on a released context.
	closed atomic.Bool

	meter meter
	pins  pinned
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.SlotPool = (*Backend)(nil)

// devWeight is a weight matrix in device memory.
type devWeight struct {
	ptr        cu.DevicePtr
	bf16       bool
	rows, cols int
	bytes      int64
	refs       int
	name       string
	own        bool // allocated for this weight (not a part of an expert slot)
	// fp8 marks a block-FP8 matrix: E4M3 codes at ptr, its block scales
	// at scale, stored as sdt (fp8.cu's scaleF32, scaleBF16, scaleF16), in
	// blocks of bn×bk.
	fp8    bool
	scale  cu.DevicePtr
	sdt    int
	bn, bk int
}

// kind tells a weight's storage apart for sharing one upload.
func (dw *devWeight) kind() int {
	switch {
	case dw.fp8:
		return 2
	case dw.bf16:
		return 1
	}
	return 0
}

func hostKind(m *backend.Mat) int {
	switch {
	case m.Quantized():
		return 2
	case m.F32 == nil:
		return 1
	}
	return 0
}

// Scale dtypes as matmul_fp8 takes them (sdt).
const (
	scaleF32  = 0
	scaleBF16 = 1
	scaleF16  = 2
)

// scaleType is the sdt of scales stored as d (false: not a scale dtype).
func scaleType(d jnf.DType) (int, bool) {
	switch d {
	case jnf.F32:
		return scaleF32, true
	case jnf.BF16:
		return scaleBF16, true
	case jnf.F16:
		return scaleF16, true
	}
	return 0, false
}

type hostWeight struct {
	name  string
	bytes int64
	refs  int
}

// devMem is one allocation of device memory.
type devMem struct {
	ptr   cu.DevicePtr
	n     int
	class int // the small size class (-1: an allocation of its own)
}

func (m *devMem) Elems() int { return m.n }

// kernels are the module's functions.
type kernels struct {
	copyRows, gatherRows, scatterRows, embedBF16, embedF32  cu.Function
	matmulBF16, matmulF32, matmulGroup                      cu.Function
	matmulBF16D4, matmulF32D4, matmulGroupD4                cu.Function
	matmulBF16T1, matmulF32T1, matmulGroupT1, matmulBF16R4A cu.Function
	matmulGroupR4                                           cu.Function
	matmulBF16R4, matmulF32R4                               cu.Function
	softmaxNorm, argmaxRows, rmsnormRow                     cu.Function
	deltaRuleGroup                                          cu.Function
	rmsnorm, gatedRMSNorm, l2norm, rope, attention          cu.Function
	causalConv, gdnGates, deltaRule                         cu.Function
	siluMul, sigmoidMul, add, gateAdd, route, combine       cu.Function
	routeWarp                                               cu.Function
	blake3Chunks, blake3Parents                             cu.Function
	// The block-FP8 kernels, of the fp8 module.
	fp8Quantize, matmulFP8 cu.Function
}

func (k *kernels) table() []struct {
	name string
	f    *cu.Function
} {
	return []struct {
		name string
		f    *cu.Function
	}{
		{"copy_rows", &k.copyRows}, {"gather_rows", &k.gatherRows}, {"scatter_rows", &k.scatterRows},
		{"embed_bf16", &k.embedBF16}, {"embed_f32", &k.embedF32},
		{"matmul_bf16", &k.matmulBF16}, {"matmul_f32", &k.matmulF32}, {"matmul_group", &k.matmulGroup},
		{"matmul_bf16_d4", &k.matmulBF16D4}, {"matmul_f32_d4", &k.matmulF32D4}, {"matmul_group_d4", &k.matmulGroupD4},
		{"matmul_bf16_t1", &k.matmulBF16T1}, {"matmul_f32_t1", &k.matmulF32T1}, {"matmul_group_t1", &k.matmulGroupT1},
		{"matmul_bf16_r4a", &k.matmulBF16R4A}, {"matmul_group_r4", &k.matmulGroupR4},
		{"matmul_bf16_r4", &k.matmulBF16R4}, {"matmul_f32_r4", &k.matmulF32R4},
		{"softmax_norm", &k.softmaxNorm}, {"argmax_rows", &k.argmaxRows}, {"rmsnorm_row", &k.rmsnormRow},
		{"delta_rule_group", &k.deltaRuleGroup},
		{"rmsnorm", &k.rmsnorm}, {"gated_rmsnorm", &k.gatedRMSNorm}, {"l2norm", &k.l2norm},
		{"rope", &k.rope}, {"attention", &k.attention},
		{"causal_conv", &k.causalConv}, {"gdn_gates", &k.gdnGates}, {"delta_rule", &k.deltaRule},
		{"silu_mul", &k.siluMul}, {"sigmoid_mul", &k.sigmoidMul}, {"add", &k.add}, {"gate_add", &k.gateAdd},
		{"route", &k.route}, {"route_warp", &k.routeWarp}, {"combine", &k.combine},
		{"blake3_chunks", &k.blake3Chunks}, {"blake3_parents", &k.blake3Parents},
	}
}

// New opens device o.Device: it retains the primary context, loads the
// kernels from the embedded PTX and checks the budget against what the
// driver reports in use.
func New(o Options) (backend.Backend, error) {
	if devOptions != nil {
		devOptions(&o)
	}
	if o.VRAMBudget < 0 || o.Reserve < 0 {
		return nil, fmt.Errorf("cuda: budget %d and reserve %d bytes: want >= 0", o.VRAMBudget, o.Reserve)
	}
	if o.MatMulRows != 0 && o.MatMulRows != 1 && o.MatMulRows != 4 {
		return nil, fmt.Errorf("cuda: MatMulRows %d: want 0 (choose), 1 or 4", o.MatMulRows)
	}
	if o.MatMulDepth != 0 && o.MatMulDepth != 1 && o.MatMulDepth != 4 {
		return nil, fmt.Errorf("cuda: MatMulDepth %d: want 0 (choose), 1 or 4", o.MatMulDepth)
	}
	if o.Reserve == 0 {
		o.Reserve = DefaultReserve
		if o.VRAMBudget > 0 {
			o.Reserve = min(o.Reserve, o.VRAMBudget/8)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("cuda: device %d: the machine has %d CUDA devices", o.Device, n)
	}
	dev, err := cu.GetDevice(o.Device)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: primary context: %w", o.Device, err)
	}
	b := &Backend{o: o, dev: dev, ctx: ctx, weights: map[backend.Key]*devWeight{}, hostOnly: map[backend.Key]*hostWeight{}}
	fail := func(format string, a ...any) (backend.Backend, error) {
		dev.ReleasePrimaryCtx()
		return nil, fmt.Errorf("cuda: device %d: "+format, append([]any{o.Device}, a...)...)
	}
	if err := cu.SetCurrentContext(ctx); err != nil {
		return fail("%w", err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return fail("%w", err)
	}
	name, err := dev.Name()
	if err != nil {
		return fail("%w", err)
	}
	if b.total, err = dev.TotalMem(); err != nil {
		return fail("%w", err)
	}
	b.desc = fmt.Sprintf("%s (sm_%d%d, %.1f GiB)", name, major, minor, float64(b.total)/(1<<30))
	if b.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return fail("%w", err)
	}
	ptx := ptxFor(major)
	if ptx == "" {
		return fail("%s: the kernels need compute capability 8.0 or later", b.desc)
	}
	if b.mod, err = cu.LoadData(ptx); err != nil {
		return fail("loading the kernels' PTX: %w", err)
	}
	for _, e := range b.k.table() {
		if *e.f, err = b.mod.Function(e.name); err != nil {
			return fail("kernel %s: %w", e.name, err)
		}
	}
	if b.mod8, err = cu.LoadData(ptxFP8For(major)); err != nil {
		return fail("loading the block-FP8 kernels' PTX: %w", err)
	}
	for _, e := range []struct {
		name string
		f    *cu.Function
	}{{"fp8_quantize", &b.k.fp8Quantize}, {"matmul_fp8", &b.k.matmulFP8}} {
		if *e.f, err = b.mod8.Function(e.name); err != nil {
			return fail("kernel %s: %w", e.name, err)
		}
	}
	if b.aux, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fail("%w", err)
	}
	if err := b.reserveLocal(); err != nil {
		return fail("%w", err)
	}
	if o.VRAMBudget > 0 {
		if used := b.inUse(); used+o.Reserve > o.VRAMBudget {
			return fail("%s: %d MiB already in use (the context included) plus the %d MiB reserve exceed the budget of %d MiB",
				b.desc, used>>20, o.Reserve>>20, o.VRAMBudget>>20)
		}
	}
	b.host = cpu.New(o.Threads)
	return b, nil
}

// reserveLocal launches the kernel with the largest stack frame (route)
// once, so that the driver reserves the context's local memory (stack size
// × resident threads, hundreds of MiB on a large GPU) now: otherwise the
// first launch grows what is in use past what the budget was checked
// against.
func (b *Backend) reserveLocal() error {
	p, err := cu.MemAlloc(64)
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	defer cu.MemFree(p)
	if err := cu.MemsetD32Async(p, 0, 16, b.aux); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	// route(idx, w, logits, p, pairs, T=1, E=1, k=1, renorm=0) within p.
	args := []uint64{uint64(p), uint64(p + 8), uint64(p + 16), uint64(p + 24), uint64(p + 32), 1, 1, 1, 0}
	ptrs := make([]unsafe.Pointer, len(args))
	for i := range args {
		ptrs[i] = unsafe.Pointer(&args[i])
	}
	if err := b.k.route.Launch(1, 1, 1, 1, 1, 1, 0, b.aux, ptrs); err != nil {
		return fmt.Errorf("cuda: warm-up launch: %w", err)
	}
	if err := b.aux.Synchronize(); err != nil {
		return fmt.Errorf("cuda: warm-up launch: %w", err)
	}
	return nil
}

// errClosed is what every call on a closed backend (or a queue of one)
// returns: its context, streams and memory are gone, so a late call (a
// garbage-collected session's cleanup, say) must not reach the driver.
var errClosed = errors.New("cuda: the backend is closed")

// enter binds the backend's context to the calling goroutine's OS thread
// (CUDA contexts are per thread and goroutines migrate); leave undoes it.
// It fails with errClosed once Close has begun.
func (b *Backend) enter() error {
	if b.closed.Load() {
		return errClosed
	}
	return b.bind()
}

// bind is enter without the closed check (for Close itself).
func (b *Backend) bind() error {
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cuda: setting the context: %w", err)
	}
	return nil
}

func (b *Backend) leave() { runtime.UnlockOSThread() }

func (b *Backend) Name() string { return "cuda" }
func (b *Backend) Threads() int { return b.host.Threads() }

// budget is the device memory the backend may have in use.
func (b *Backend) budget() int64 {
	if b.o.VRAMBudget > 0 {
		return b.o.VRAMBudget
	}
	return b.total
}

// inUse is the device memory in use as the driver reports it (total −
// free), this process's context and every other user included.
func (b *Backend) inUse() int64 {
	free, total, err := cu.MemInfo()
	if err != nil {
		return b.total // unknown: assume full, so nothing more is taken
	}
	return total - free
}

// devAlloc allocates n bytes of device memory if the budget leaves keep
// bytes free after it (the caller holds the context).
func (b *Backend) devAlloc(n, keep int64) (cu.DevicePtr, error) {
	b.allocMu.Lock()
	defer b.allocMu.Unlock()
	if used := b.inUse(); used+n+keep > b.budget() {
		return 0, fmt.Errorf("cuda: %d bytes more on %d in use (the context included) leave less than %d of the %d-byte budget free",
			n, used, keep, b.budget())
	}
	p, err := cu.MemAlloc(max(n, 4))
	if err != nil {
		return 0, fmt.Errorf("cuda: cuMemAlloc of %d bytes: %w", n, err)
	}
	return p, nil
}

// Small allocations come from slabs: the driver gives every cuMemAlloc at
// least 2 MiB of what it reports in use (measured on the H200), and a model
// allocates hundreds of small vectors (norm weights, gates).
const (
	slabBytes    = 2 << 20
	maxSmall     = 256 << 10 // larger allocations are the driver's own
	minSmall     = 256       // the smallest block (the kernels' alignment)
	smallClasses = 11        // 256 B … 256 KiB, powers of two
)

// smallClass is the size class of an allocation of n bytes (n <= maxSmall).
func smallClass(n int64) int {
	c, size := 0, int64(minSmall)
	for size < n {
		size <<= 1
		c++
	}
	return c
}

// smallAlloc returns a block of size class c, carving a new slab when the
// class has no free block (allocMu held).
func (b *Backend) smallAlloc(c int) (cu.DevicePtr, error) {
	if free := b.small[c]; len(free) > 0 {
		p := free[len(free)-1]
		b.small[c] = free[:len(free)-1]
		return p, nil
	}
	size := int64(minSmall) << c
	if used := b.inUse(); used+slabBytes > b.budget() {
		return 0, fmt.Errorf("cuda: a %d-byte slab more on %d in use (the context included) exceeds the %d-byte budget", slabBytes, used, b.budget())
	}
	slab, err := cu.MemAlloc(slabBytes)
	if err != nil {
		return 0, fmt.Errorf("cuda: cuMemAlloc of %d bytes: %w", slabBytes, err)
	}
	b.slabs = append(b.slabs, slab)
	for off := slabBytes - size; off > 0; off -= size {
		b.small[c] = append(b.small[c], slab+cu.DevicePtr(off))
	}
	return slab, nil
}

// Alloc returns n zeroed values of device memory.
func (b *Backend) Alloc(n int) (backend.Buf, error) {
	if n < 0 {
		return backend.Buf{}, fmt.Errorf("cuda: alloc of %d values", n)
	}
	if err := b.enter(); err != nil {
		return backend.Buf{}, err
	}
	defer b.leave()
	m, err := b.allocMem(4 * int64(n))
	if err != nil {
		return backend.Buf{}, fmt.Errorf("cuda: alloc of %d values: %w", n, err)
	}
	if n > 0 {
		err := cu.MemsetD32Async(m.ptr, 0, int64(n), b.aux)
		if err == nil {
			err = b.aux.Synchronize()
		}
		if err != nil {
			b.release(m)
			return backend.Buf{}, fmt.Errorf("cuda: zeroing %d values: %w", n, err)
		}
	}
	m.n = n
	return backend.MakeBuf(m, 0, n), nil
}

// allocMem allocates bytes of device memory: a small block or an
// allocation of its own (the context current).
func (b *Backend) allocMem(bytes int64) (*devMem, error) {
	m := &devMem{class: -1}
	var err error
	if bytes <= maxSmall {
		m.class = smallClass(bytes)
		b.allocMu.Lock()
		m.ptr, err = b.smallAlloc(m.class)
		b.allocMu.Unlock()
	} else {
		m.ptr, err = b.devAlloc(bytes, 0)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// release returns m's memory: a small block to its class, else to the
// driver (the context current).
func (b *Backend) release(m *devMem) {
	if m.class >= 0 {
		b.allocMu.Lock()
		b.small[m.class] = append(b.small[m.class], m.ptr)
		b.allocMu.Unlock()
	} else {
		cu.MemFree(m.ptr)
	}
	m.ptr, m.n = 0, 0
}

// Free releases b's allocation.
func (b *Backend) Free(buf backend.Buf) {
	m, ok := buf.Mem().(*devMem)
	if !ok || m.ptr == 0 {
		return
	}
	if b.enter() != nil {
		return
	}
	defer b.leave()
	b.release(m)
}

// Upload keeps w on the device when the budget allows (less the reserve
// for sessions), else on the host: the embedding table (UseGather) always
// stays on the host under a budget (its rows are gathered there and cost
// nothing to move). Uploads of the same key share one copy.
func (b *Backend) Upload(w *backend.Weight, key backend.Key, l weights.Linear, rows, cols int, use backend.Use) error {
	*w = backend.Weight{Key: key}
	if err := w.Host.InitLinear(l, rows, cols); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	kind := hostKind(&w.Host)
	if dw, ok := b.weights[key]; ok && dw.rows == rows && dw.cols == cols && dw.kind() == kind {
		dw.refs++
		w.Dev = dw
		return nil
	}
	if hw, ok := b.hostOnly[key]; ok {
		hw.refs++
		return nil
	}
	n := w.Bytes()
	if n > 0 && !(use == backend.UseGather && b.o.VRAMBudget > 0) {
		if err := b.enter(); err != nil {
			return err
		}
		defer b.leave()
		// A block-FP8 matrix is its codes, then (at a 256-byte boundary)
		// its scales as float32.
		codes := (int64(len(w.Host.F8)) + 255) &^ 255
		dn := n
		if kind == 2 {
			dn = codes + 4*int64(len(w.Host.Scale))
		}
		if p, err := b.devAlloc(dn, b.o.Reserve); err == nil {
			var err error
			// A copy from pageable memory may return before its DMA is done,
			// and the queues' streams do not wait for the legacy stream it
			// is ordered on: wait for it here.
			switch kind {
			case 2:
				err = cu.MemcpyHtoD(p, unsafe.Pointer(unsafe.SliceData(w.Host.F8)), int64(len(w.Host.F8)))
				if err == nil {
					err = cu.MemcpyHtoD(p+cu.DevicePtr(codes), unsafe.Pointer(unsafe.SliceData(w.Host.Scale)), 4*int64(len(w.Host.Scale)))
				}
			case 1:
				err = cu.MemcpyHtoD(p, unsafe.Pointer(unsafe.SliceData(w.Host.BF16)), n)
			default:
				err = cu.MemcpyHtoD(p, unsafe.Pointer(unsafe.SliceData(w.Host.F32)), n)
			}
			if err == nil {
				err = cu.Synchronize()
			}
			if err != nil {
				cu.MemFree(p)
				return fmt.Errorf("cuda: uploading %s (%d bytes): %w", w.Host.Name, dn, err)
			}
			b.meter.upload.Add(dn)
			dw := &devWeight{ptr: p, bf16: kind == 1, rows: rows, cols: cols, bytes: dn, refs: 1, name: w.Host.Name, own: true}
			if kind == 2 {
				dw.fp8, dw.scale, dw.sdt, dw.bn, dw.bk = true, p+cu.DevicePtr(codes), scaleF32, w.Host.BlockN, w.Host.BlockK
			}
			b.weights[key] = dw
			w.Dev = dw
			return nil
		}
	}
	b.hostOnly[key] = &hostWeight{name: w.Host.Name, bytes: n, refs: 1}
	return nil
}

// Drop releases what Upload made for w.
func (b *Backend) Drop(w *backend.Weight) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dw, ok := w.Dev.(*devWeight); ok && dw.own {
		if dw.refs--; dw.refs == 0 {
			delete(b.weights, w.Key)
			if b.enter() == nil {
				cu.MemFree(dw.ptr)
				b.leave()
			}
		}
	} else if hw, ok := b.hostOnly[w.Key]; ok && w.Dev == nil {
		if hw.refs--; hw.refs == 0 {
			delete(b.hostOnly, w.Key)
		}
	}
	*w = backend.Weight{}
}

// Residency reports the weights on each side, the memory in use and the
// expert slots.
func (b *Backend) Residency() backend.Residency {
	r := backend.Residency{Device: b.desc, Budget: b.o.VRAMBudget, VerifyCopies: b.o.VerifyCopies}
	if b.enter() == nil {
		r.InUse = b.inUse()
		b.leave()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, dw := range b.weights {
		r.DeviceWeights += dw.bytes
		r.DeviceWeightCount++
	}
	for _, hw := range b.hostOnly {
		r.HostWeights += hw.bytes
		r.HostWeightCount++
		r.HostResident = append(r.HostResident, hw.name)
	}
	slices.Sort(r.HostResident)
	r.ExpertSlots, r.ExpertSlotBytes = len(b.pool), b.slotSize
	return r
}

// NewQueue returns a queue with its own compute stream and copy stream.
func (b *Backend) NewQueue() (backend.Queue, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	return newQueue(b)
}

// Close frees the resident experts and the module and releases the
// context. Every queue must have been closed and every weight dropped;
// any call after Close, on the backend or on one of its queues, fails
// with an error naming the backend closed (and touches no device).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	if err := b.bind(); err != nil {
		return err
	}
	defer b.leave()
	for _, sl := range b.pool {
		sl.destroy()
	}
	b.pool = nil
	for _, c := range b.chunks {
		cu.MemFree(c.ptr)
	}
	b.chunks, b.holes = nil, nil
	for k, dw := range b.weights {
		cu.MemFree(dw.ptr)
		delete(b.weights, k)
	}
	for _, p := range b.slabs {
		cu.MemFree(p)
	}
	b.slabs, b.small = nil, [smallClasses][]cu.DevicePtr{}
	b.aux.Destroy()
	b.mod8.Unload()
	b.mod.Unload()
	return b.dev.ReleasePrimaryCtx()
}

// ---- routed-expert slots ----

// slot is device memory holding one routed expert's three matrices (and a
// block-FP8 expert's scales): one of
// the pool's (AllocSlot; the expert hierarchy decides what it holds) or one
// of a queue's two transient slots (LoadExpert).
type slot struct {
	ptr    cu.DevicePtr
	bytes  int64
	b      *Backend
	pool   bool       // AllocSlot's (else a queue's transient slot)
	owns   bool       // its memory is its own (else a slotChunk's)
	digest jnf.Digest // what it holds (zero: nothing, or a failed check)
	bad    *CopyError // the check that emptied it, if one did
	parts  [3]devWeight
	// segs are the ranges the device hash of its copy reads (slotLayout's
	// segs: their concatenation is the record).
	segs  [3]segment
	ready cu.Event // recorded after the copy that filled it
	id    weights.ExpertID
	// hashed is recorded after the device hash of the copy that filled it
	// (Options.VerifyCopies), once hashedSet: the next copy into the slot
	// waits for it.
	hashed    cu.Event
	hashedSet bool
	users     int
	// free holds, per queue that used the slot (a bind, or a scrub's
	// hash), an event recorded after its last use: a copy into the slot
	// first waits for all of them.
	free map[*Queue]cu.Event
}

func (sl *slot) Bytes() int64 { return sl.bytes }

// newSlot makes a slot of n bytes with device memory of its own (a queue's
// transient slot).
func newSlot(b *Backend, n int64) (*slot, error) {
	p, err := b.devAlloc(n, b.o.Reserve)
	if err != nil {
		return nil, err
	}
	sl, err := slotAt(b, p, n)
	if err != nil {
		cu.MemFree(p)
		return nil, err
	}
	sl.owns = true
	return sl, nil
}

// slotAt makes a slot of n bytes at p (its events; the memory is the
// caller's).
func slotAt(b *Backend, p cu.DevicePtr, n int64) (*slot, error) {
	ev, err := cu.MakeEvent(cu.DisableTiming)
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	hv, err := cu.MakeEvent(cu.DisableTiming)
	if err != nil {
		cu.DestroyEvent(&ev)
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return &slot{ptr: p, bytes: n, b: b, ready: ev, hashed: hv, free: map[*Queue]cu.Event{}}, nil
}

// destroy releases the slot's events, and its memory if it owns it.
func (sl *slot) destroy() {
	for q, ev := range sl.free {
		cu.DestroyEvent(&ev)
		delete(sl.free, q)
	}
	cu.DestroyEvent(&sl.ready)
	cu.DestroyEvent(&sl.hashed)
	if sl.owns {
		cu.MemFree(sl.ptr)
	}
}

// slotChunk is one allocation holding up to n pool slots of size bytes,
// next of them handed out. The driver rounds every cuMemAlloc up to 2 MiB
// of what it reports in use: a slot of its own for a Qwen3.5-122B expert
// (18 MiB and its 768 bytes of alignment) would take 20 MiB, 10% of the
// device level; a chunk of slotsPerChunk wastes at most 2 MiB for all.
type slotChunk struct {
	ptr     cu.DevicePtr
	size    int64
	n, next int
}

// slotsPerChunk is how many pool slots one allocation holds at most.
const slotsPerChunk = 16

// slotMemLocked returns device memory for a pool slot of sz bytes: a hole
// FreeSlot left, the next one of the last chunk, or a new chunk of as many
// slots as the budget allows, up to slotsPerChunk (b.mu held).
func (b *Backend) slotMemLocked(sz int64) (cu.DevicePtr, error) {
	if h := b.holes[sz]; len(h) > 0 {
		p := h[len(h)-1]
		b.holes[sz] = h[:len(h)-1]
		return p, nil
	}
	if n := len(b.chunks); n > 0 {
		if c := b.chunks[n-1]; c.size == sz && c.next < c.n {
			c.next++
			return c.ptr + cu.DevicePtr(int64(c.next-1)*sz), nil
		}
	}
	var err error
	for k := slotsPerChunk; k >= 1; k /= 2 {
		var p cu.DevicePtr
		if p, err = b.devAlloc(int64(k)*sz, b.o.Reserve); err == nil {
			b.chunks = append(b.chunks, &slotChunk{ptr: p, size: sz, n: k, next: 1})
			return p, nil
		}
	}
	return 0, err
}

// SlotCapacity is how many more slots for experts of n bytes the budget
// leaves room for after what is in use and the reserve for sessions,
// bounded by Options.ExpertSlots (< 0: none).
func (b *Backend) SlotCapacity(n int64) int {
	if n <= 0 || b.o.ExpertSlots < 0 {
		return 0
	}
	if err := b.enter(); err != nil {
		return 0
	}
	defer b.leave()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := 0
	if avail := b.budget() - b.inUse() - b.o.Reserve; avail > 0 {
		c = int(min(avail/slotBytes(n), int64(maxSlots-len(b.pool))))
	}
	if b.o.ExpertSlots > 0 {
		c = min(c, b.o.ExpertSlots-len(b.pool))
	}
	return max(c, 0)
}

// AllocSlot allocates a slot of the pool for an expert of up to n bytes
// within the budget (less the reserve).
func (b *Backend) AllocSlot(n int64) (backend.Slot, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: a slot for %d bytes", n)
	}
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pool) >= maxSlots || (b.o.ExpertSlots != 0 && len(b.pool) >= max(b.o.ExpertSlots, 0)) {
		return nil, fmt.Errorf("cuda: %d expert slots allocated: the most Options.ExpertSlots allows", len(b.pool))
	}
	sz := slotBytes(n)
	p, err := b.slotMemLocked(sz)
	if err != nil {
		return nil, err
	}
	sl, err := slotAt(b, p, sz)
	if err != nil {
		b.holeLocked(sz, p)
		return nil, err
	}
	sl.pool = true
	b.pool = append(b.pool, sl)
	b.slotSize = max(b.slotSize, sl.bytes)
	return sl, nil
}

// FreeSlot waits for every queue's last use of s and frees it.
func (b *Backend) FreeSlot(s backend.Slot) {
	sl, ok := s.(*slot)
	if !ok || sl.b != b || !sl.pool {
		return
	}
	if b.enter() != nil {
		return
	}
	defer b.leave()
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.pool, sl)
	if i < 0 {
		return
	}
	b.pool = slices.Delete(b.pool, i, i+1)
	for _, ev := range sl.free {
		ev.Synchronize()
	}
	if sl.hashedSet {
		sl.hashed.Synchronize()
	}
	sl.ready.Synchronize()
	sl.destroy()
	b.holeLocked(sl.bytes, sl.ptr)
	sl.digest = jnf.Digest{}
}

// holeLocked gives the memory of a pool slot of sz bytes at p back for
// AllocSlot to use again (b.mu held).
func (b *Backend) holeLocked(sz int64, p cu.DevicePtr) {
	if b.holes == nil {
		b.holes = map[int64][]cu.DevicePtr{}
	}
	b.holes[sz] = append(b.holes[sz], p)
}

// SlotHolds reports whether s holds the copy of digest (filled with it, and
// not emptied by a failed check).
func (b *Backend) SlotHolds(s backend.Slot, digest jnf.Digest) bool {
	sl, ok := s.(*slot)
	if !ok || sl.b != b || digest.IsZero() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return sl.digest == digest
}
