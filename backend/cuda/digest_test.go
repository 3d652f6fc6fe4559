//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/zeebo/blake3"
	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/backend/cuda/b3host"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// deviceSum hashes segs, copied to device memory at offset shift from an
// aligned allocation (odd shifts take the kernels' byte-by-byte loads), on
// the device.
func deviceSum(t *testing.T, b *Backend, q *Queue, shift int, segs ...[]byte) [32]byte {
	t.Helper()
	ds, total, free := toDevice(t, shift, segs)
	defer free()
	out, err := cu.MemAlloc(32)
	if err != nil {
		t.Fatal(err)
	}
	defer cu.MemFree(out)
	cvs, _ := q.b3Scratch(total)
	hs := testHashStream(t, q)
	q.hashOn(hs, out, cvs, ds)
	if err := hs.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if q.err != nil {
		t.Fatal(q.err)
	}
	var got [32]byte
	if err := cu.MemcpyDtoH(unsafe.Pointer(&got[0]), out, 32); err != nil {
		t.Fatal(err)
	}
	return got
}

// toDevice copies segs to device memory, each at offset shift from an
// aligned allocation of its own, and returns them, their total length and
// a function that frees them.
func toDevice(t *testing.T, shift int, segs [][]byte) (ds []segment, total int64, free func()) {
	t.Helper()
	var ps []cu.DevicePtr
	free = func() {
		for _, p := range ps {
			cu.MemFree(p)
		}
	}
	for _, s := range segs {
		p, err := cu.MemAlloc(int64(len(s) + shift + 4))
		if err != nil {
			free()
			t.Fatal(err)
		}
		ps = append(ps, p)
		if len(s) > 0 {
			if err := cu.MemcpyHtoD(p+cu.DevicePtr(shift), unsafe.Pointer(unsafe.SliceData(s)), int64(len(s))); err != nil {
				free()
				t.Fatal(err)
			}
			// The DMA of a pageable copy may still run (legacy stream).
			if err := cu.Synchronize(); err != nil {
				free()
				t.Fatal(err)
			}
		}
		ds = append(ds, segment{p + cu.DevicePtr(shift), int64(len(s))})
		total += int64(len(s))
	}
	return ds, total, free
}

// diagnose reports where the device's hash of segs (as deviceSum places
// them) first differs from the host's C code: the first chunk whose
// chaining value differs, or the parent levels if every chunk agrees.
func diagnose(t *testing.T, q *Queue, shift int, segs ...[]byte) string {
	t.Helper()
	ds, total, free := toDevice(t, shift, segs)
	defer free()
	var a [6]uint64
	for j, g := range ds {
		a[2*j], a[2*j+1] = uint64(g.ptr), uint64(g.n)
	}
	chunks := b3Chunks(total)
	cvs, err := cu.MemAlloc(32 * chunks)
	if err != nil {
		t.Fatal(err)
	}
	defer cu.MemFree(cvs)
	root := uint64(0)
	if chunks == 1 {
		root = 1
	}
	hs := testHashStream(t, q)
	q.launchOn(hs, "blake3_chunks", q.b.k.blake3Chunks, blocks(int(chunks), blockThreads), 1, blockThreads,
		p(cvs), a[0], a[1], a[2], a[3], a[4], a[5], i(int(chunks)), root)
	if err := hs.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]uint32, 8*chunks)
	if err := cu.MemcpyDtoH(unsafe.Pointer(&got[0]), cvs, 32*chunks); err != nil {
		t.Fatal(err)
	}
	for c := range chunks {
		if want := b3host.Chunk(c, segs...); [8]uint32(got[8*c:8*c+8]) != want {
			return fmt.Sprintf("chunk %d of %d first differs: device %08x, host %08x", c, chunks, got[8*c:8*c+8], want)
		}
	}
	return fmt.Sprintf("all %d chunks agree: the parent levels differ", chunks)
}

// TestDeviceBLAKE3: the kernels' digest of a stream in one, two or three
// device segments, aligned or not, is github.com/zeebo/blake3's, at every
// length where BLAKE3's tree changes shape and at a real routed expert's
// 18 874 368 bytes.
func TestDeviceBLAKE3(t *testing.T) {
	be := open(t, Options{}).(*Backend)
	if err := be.enter(); err != nil {
		t.Fatal(err)
	}
	defer be.leave()
	q, err := newQueue(be)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 63, 64, 65, 127, 1023, 1024, 1025, 2047, 2048, 2049, 3073, 4096, 5000,
		32*1024 + 1, 128*1024 + 1, 512*1024 + 1, 1<<20 - 1, 1 << 20, 1<<20 + 7, 3 * 3072 * 1024 * 2} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := blake3.Sum256(b)
		i, j, c := n/3, 2*n/3, min(n, 1000)
		for _, k := range []struct {
			what  string
			shift int
			segs  [][]byte
		}{
			{"in one part", 0, [][]byte{b}},
			{fmt.Sprintf("in three parts at %d, %d", i, j), 0, [][]byte{b[:i], b[i:j], b[j:]}},
			{fmt.Sprintf("unaligned, cut at %d", c), 1, [][]byte{b[:c], b[c:]}},
		} {
			if got := deviceSum(t, be, q, k.shift, k.segs...); got != want {
				t.Errorf("%d bytes %s: device %x, want %x (%s)", n, k.what, got, want, diagnose(t, q, k.shift, k.segs...))
			}
		}
	}
}

// expertModel is a checkpoint with n routed experts of real BF16 values.
func expertModel(t *testing.T, n int) *weights.Checkpoint {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	tensor := func(rows, cols int) jnf.TensorView { return bf16Tensor(r, rows, cols) }
	m := &weightstest.Model{Config: []byte(testConfig), Tensors: map[string]jnf.TensorView{"small": tensor(64, 256)},
		Experts: map[weights.ExpertID][3]jnf.TensorView{}}
	for e := range n {
		m.Experts[weights.ExpertID{Layer: 0, Expert: e}] = [3]jnf.TensorView{tensor(24, 256), tensor(24, 256), tensor(256, 24)}
	}
	return weightstest.Open(t, m)
}

func load(t *testing.T, ck *weights.Checkpoint, q backend.Queue, e int, digest jnf.Digest) backend.Expert {
	t.Helper()
	ve, err := ck.Expert(0, e)
	if err != nil {
		t.Fatal(err)
	}
	if digest.IsZero() {
		digest = ve.Digest()
	}
	var x backend.Expert
	if err := q.LoadExpert(&x, ve.ID(), digest, ve.Gate(), ve.Up(), ve.Down(), 24, 256); err != nil {
		t.Fatal(err)
	}
	return x
}

// fillSlot fills sl with expert e of ck under digest (zero: its own) on q.
func fillSlot(t *testing.T, ck *weights.Checkpoint, q backend.Queue, sl backend.Slot, e int, digest jnf.Digest) weights.VerifiedExpert {
	t.Helper()
	ve, err := ck.Expert(0, e)
	if err != nil {
		t.Fatal(err)
	}
	if digest.IsZero() {
		digest = ve.Digest()
	}
	if err := q.(backend.SlotQueue).FillSlot(sl, ve.ID(), digest, ve.Gate(), ve.Up(), ve.Down(), 24, 256); err != nil {
		t.Fatal(err)
	}
	return ve
}

// TestVerifyCopies: with Options.VerifyCopies every copy into device
// memory is hashed there and checked at the synchronisation; a copy whose
// bytes are not those of its digest fails the step with a *CopyError that
// matches jnf.ErrVerification and names the expert, and its slot then
// holds nothing: SlotHolds is false and BindSlot refuses it, on any queue,
// until a good fill.
func TestVerifyCopies(t *testing.T) {
	ck := expertModel(t, 2)
	be := open(t, Options{VerifyCopies: true})
	pool := be.(backend.SlotPool)
	q, err := be.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	x := load(t, ck, q, 0, jnf.Digest{})
	q.ReleaseExpert(&x)
	if err := q.Sync(); err != nil {
		t.Fatalf("a true copy: %v", err)
	}
	c := be.(backend.Meter).Counters()
	if c.DeviceVerified != 1 || c.DeviceVerifiedBytes != 3*24*256*2 || c.DeviceVerifyFailures != 0 {
		t.Errorf("after one true copy: %d verified, %d bytes, %d failures; want 1, %d, 0", c.DeviceVerified, c.DeviceVerifiedBytes, c.DeviceVerifyFailures, 3*24*256*2)
	}
	// Expert 1's bytes under a digest they do not have (the hierarchy
	// would never pass one: this stands in for bytes changed between the
	// host's check and the device), into a slot of the pool.
	sl, err := pool.AllocSlot(3 * 24 * 256 * 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.FreeSlot(sl)
	e0, _ := ck.Expert(0, 0)
	wrong := e0.Digest()
	wrong.Sum[0] ^= 1
	q2, err := be.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	e1 := fillSlot(t, ck, q2, sl, 1, wrong)
	err = q2.Sync()
	var ce *CopyError
	if !errors.As(err, &ce) || !errors.Is(err, jnf.ErrVerification) || ce.Scrub || ce.Want != wrong || ce.ID != (weights.ExpertID{Layer: 0, Expert: 1}) {
		t.Fatalf("a copy under another digest: %v (%T); want a *CopyError for layer 0 expert 1 matching ErrVerification", err, err)
	}
	t.Log(err)
	if ce.Got.Sum != e1.Digest().Sum {
		t.Errorf("the device hashed %s, want expert 1's true digest %s", ce.Got, e1.Digest())
	}
	if pool.SlotHolds(sl, wrong) {
		t.Error("the slot whose copy failed its check still holds it")
	}
	q3, err := be.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q3.Close()
	var z backend.Expert
	if err := q3.(backend.SlotQueue).BindSlot(&z, sl, e1.ID(), wrong); !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("BindSlot of the slot whose copy failed: %v; want a refusal matching ErrVerification", err)
	}
	if c := be.(backend.Meter).Counters(); c.DeviceVerifyFailures != 1 {
		t.Errorf("%d failures counted, want 1", c.DeviceVerifyFailures)
	}
	// A good fill makes it usable again.
	fillSlot(t, ck, q3, sl, 1, jnf.Digest{})
	if err := q3.Sync(); err != nil || !pool.SlotHolds(sl, e1.Digest()) {
		t.Fatalf("a good fill after the bad one: %v, holds %v", err, pool.SlotHolds(sl, e1.Digest()))
	}
	if err := q3.(backend.SlotQueue).BindSlot(&z, sl, e1.ID(), e1.Digest()); err != nil {
		t.Fatal(err)
	}
	q3.ReleaseExpert(&z)
}

// TestSlotFillBind: an expert filled into a pool slot on one queue and
// bound on another computes the bits of LoadExpert; refilling the slot
// with another expert (after the first queue's use) makes it hold that one
// only: the old digest no longer binds.
func TestSlotFillBind(t *testing.T) {
	ck := expertModel(t, 2)
	be := open(t, Options{VerifyCopies: true})
	pool := be.(backend.SlotPool)
	sl, err := pool.AllocSlot(3 * 24 * 256 * 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.FreeSlot(sl)
	x := make([]float32, 3*256)
	for i := range x {
		x[i] = float32(i%17) / 8
	}
	run := func(q backend.Queue, ex *backend.Expert) []float32 {
		xb, _ := be.Alloc(len(x))
		yb, _ := be.Alloc(3 * 24)
		defer be.Free(xb)
		defer be.Free(yb)
		q.Write(xb, x)
		q.MatMul(yb, &ex.Gate, xb, 3)
		y := make([]float32, 3*24)
		q.Read(y, yb)
		q.ReleaseExpert(ex)
		if err := q.Sync(); err != nil {
			t.Fatal(err)
		}
		return y
	}
	for e := range 2 {
		q1, _ := be.NewQueue()
		q2, _ := be.NewQueue()
		ve := fillSlot(t, ck, q1, sl, e, jnf.Digest{})
		if err := q1.Sync(); err != nil {
			t.Fatal(err)
		}
		var bound, loaded backend.Expert
		if err := q2.(backend.SlotQueue).BindSlot(&bound, sl, ve.ID(), ve.Digest()); err != nil {
			t.Fatal(err)
		}
		got := run(q2, &bound)
		lx := load(t, ck, q1, e, jnf.Digest{})
		loaded = lx
		want := run(q1, &loaded)
		if err := backendtest.Same(got, want); err != nil {
			t.Errorf("expert %d bound from a slot filled on another queue: %v", e, err)
		}
		if e == 1 {
			old, _ := ck.Expert(0, 0)
			var z backend.Expert
			if pool.SlotHolds(sl, old.Digest()) || q2.(backend.SlotQueue).BindSlot(&z, sl, old.ID(), old.Digest()) == nil {
				t.Error("the slot refilled with expert 1 still binds expert 0")
			}
		}
		q1.Close()
		q2.Close()
	}
}

// TestScrubDevice: a bit flipped in a filled pool slot after its copy was
// verified is found by ScrubDevice, which empties that slot (SlotHolds
// false, BindSlot refuses it); the next scrub of what is left finds
// nothing.
func TestScrubDevice(t *testing.T) {
	ck := expertModel(t, 3)
	b := open(t, Options{}).(*Backend)
	q, err := b.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var slots []backend.Slot
	for e := range 3 {
		sl, err := b.AllocSlot(3 * 24 * 256 * 2)
		if err != nil {
			t.Fatal(err)
		}
		defer b.FreeSlot(sl)
		slots = append(slots, sl)
		fillSlot(t, ck, q, sl, e, jnf.Digest{})
	}
	if err := q.Sync(); err != nil {
		t.Fatal(err)
	}
	n, err := b.ScrubDevice()
	if err != nil || n != 3*3*24*256*2 {
		t.Fatalf("scrub of three true copies: %d bytes, %v; want %d, nil", n, err, 3*3*24*256*2)
	}
	e1, _ := ck.Expert(0, 1)
	sl := slots[1].(*slot)
	if err := b.enter(); err != nil {
		t.Fatal(err)
	}
	off := sl.parts[2].ptr + 1000
	var old [1]byte
	if err := cu.MemcpyDtoH(unsafe.Pointer(&old[0]), off, 1); err != nil {
		t.Fatal(err)
	}
	if err := cu.MemsetD8(off, old[0]^0x10, 1); err != nil {
		t.Fatal(err)
	}
	if err := cu.Synchronize(); err != nil { // the memset is asynchronous
		t.Fatal(err)
	}
	b.leave()
	_, err = b.ScrubDevice()
	var ce *CopyError
	if !errors.As(err, &ce) || !ce.Scrub || ce.ID != e1.ID() || ce.Want != e1.Digest() || !errors.Is(err, jnf.ErrVerification) {
		t.Fatalf("scrub after a flipped bit: %v; want a *CopyError of a scrub for %v", err, e1.ID())
	}
	t.Log(err)
	var x backend.Expert
	if b.SlotHolds(sl, e1.Digest()) || q.(backend.SlotQueue).BindSlot(&x, sl, e1.ID(), e1.Digest()) == nil {
		t.Error("the flipped copy is still bound from its slot")
	}
	if n, err := b.ScrubDevice(); err != nil || n != 2*3*24*256*2 {
		t.Errorf("scrub of the two copies left: %d bytes, %v; want %d, nil", n, err, 2*3*24*256*2)
	}
}

// TestCUDAVerifyCopies runs the conformance suite with every device copy
// checked, with two pool slots (refilled with other experts) beside the
// transient slots: the same bits, no failure.
func TestCUDAVerifyCopies(t *testing.T) {
	be := open(t, Options{VerifyCopies: true, ExpertSlots: 2})
	backendtest.Run(t, be, backendtest.Options{Short: true, Slots: true})
	c := be.(backend.Meter).Counters()
	t.Logf("%+v", c)
	if c.DeviceVerified == 0 || c.DeviceVerified != c.ExpertsLoaded-c.HostExperts || c.DeviceVerifyFailures != 0 {
		t.Errorf("%d copies verified of %d loaded (%d on the host), %d failures; want every device copy, none failing",
			c.DeviceVerified, c.ExpertsLoaded, c.HostExperts, c.DeviceVerifyFailures)
	}
}

// BenchmarkDeviceBLAKE3 is the kernels' hash rate over one routed expert
// of Qwen3.5-122B-A10B (18 874 368 bytes) in device memory.
func BenchmarkDeviceBLAKE3(b *testing.B) {
	be, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	cb := be.(*Backend)
	if err := cb.enter(); err != nil {
		b.Fatal(err)
	}
	defer cb.leave()
	q, err := newQueue(cb)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	const n = 3 * 3072 * 1024 * 2
	p, err := cu.MemAlloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer cu.MemFree(p)
	out, _ := cu.MemAlloc(32)
	defer cu.MemFree(out)
	cvs, _ := q.b3Scratch(n)
	segs := []segment{{p, n / 3}, {p + n/3, n / 3}, {p + 2*n/3, n / 3}}
	hs := testHashStream(b, q)
	b.SetBytes(n)
	t0 := time.Now()
	for b.Loop() {
		q.hashOn(hs, out, cvs, segs)
	}
	if err := hs.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)*float64(b.N)/time.Since(t0).Seconds()/1e9, "GB/s")
}

// TestVerifyCopiesManyInAStep: more copies in one step than a queue holds
// checks for (the queue drains early and checks them then), through the
// two transient slots of a queue with no pool slots (each copy into a
// slot waits for the hash of the one before it), with one copy among
// them under a digest its bytes do not have: found, named, at the step's
// end or before.
func TestVerifyCopiesManyInAStep(t *testing.T) {
	ck := expertModel(t, 4)
	be := open(t, Options{VerifyCopies: true, ExpertSlots: -1})
	const n = maxPendingChecks + 100
	for _, bad := range []int{-1, maxPendingChecks + 50} {
		q, err := be.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		before := be.(backend.Meter).Counters()
		var wrong jnf.Digest
		for k := range n {
			d := jnf.Digest{}
			if k == bad {
				e, _ := ck.Expert(0, k%4)
				wrong = e.Digest()
				wrong.Sum[31] ^= 0x80
				d = wrong
			}
			var x backend.Expert
			if ve, _ := ck.Expert(0, k%4); q.LoadExpert(&x, ve.ID(), func() jnf.Digest {
				if d.IsZero() {
					return ve.Digest()
				}
				return d
			}(), ve.Gate(), ve.Up(), ve.Down(), 24, 256) != nil {
				break // the queue failed at an early drain
			}
			q.ReleaseExpert(&x)
		}
		err = q.Sync()
		after := be.(backend.Meter).Counters()
		if bad < 0 {
			if err != nil || after.DeviceVerified-before.DeviceVerified != n || after.HostExperts != before.HostExperts {
				t.Errorf("%d true copies in a step: %v, %d verified, %d on the host; want nil, %d, 0", n, err, after.DeviceVerified-before.DeviceVerified, after.HostExperts-before.HostExperts, n)
			}
		} else {
			var ce *CopyError
			if !errors.As(err, &ce) || ce.Want != wrong || ce.ID.Expert != bad%4 {
				t.Errorf("copy %d of %d under another digest: %v; want a *CopyError for expert %d", bad, n, err, bad%4)
			}
		}
		q.Close()
	}
}

// testHashStream returns q's hash stream, made on first use.
func testHashStream(t testing.TB, q *Queue) cu.Stream {
	t.Helper()
	hs, ok := q.hashStream()
	if !ok {
		t.Fatal(q.err)
	}
	return hs
}
