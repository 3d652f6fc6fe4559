//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Routed experts are verified on the host before they are copied (the
// hierarchy's leases carry only bytes that matched the manifest). With
// Options.VerifyCopies the backend also hashes every copy it makes into
// device memory, on the device (kernels/blake3.cuh), against the same
// digest: the check covers the staging buffer, the copy over the bus and
// device memory, up to the last place the bytes are before the kernels
// read them. The hash runs on a stream of its own after the copy (copies
// and kernels do not wait for it; the next copy into the slot does), and
// its result is compared at the queue's next synchronisation (every step
// ends with one), before any output of the step is handed back: a copy
// that differs fails the step with an error matching jnf.ErrVerification
// and empties its slot (SlotHolds is false, BindSlot refuses it), so no
// token is produced from it and the expert hierarchy fills the slot again
// at the next use. Backend.ScrubDevice re-hashes every filled slot of the
// pool in the same way.

// maxPendingChecks bounds the device-copy checks a queue holds between
// synchronisations (32 bytes of device memory each); a queue that reaches
// it synchronises early.
const maxPendingChecks = 1024

// pendingCheck is a device copy whose digest is being computed: after the
// copy into sl (VerifyCopies), or of sl's resident copy (scrub).
type pendingCheck struct {
	sl    *slot
	id    weights.ExpertID
	want  jnf.Digest
	scrub bool
}

// segment is a range of device memory.
type segment struct {
	ptr cu.DevicePtr
	n   int64
}

// b3Chunks is the chunk count of a BLAKE3 stream of n bytes (one empty
// chunk for none).
func b3Chunks(n int64) int64 { return max(1, (n+1023)/1024) }

// hashOn enqueues on stream s the BLAKE3 of the concatenation of segs and
// writes its 8 words (the digest, little-endian) to out; cvs is scratch of
// at least 64 bytes per chunk (two levels of chaining values).
func (q *Queue) hashOn(s cu.Stream, out, cvs cu.DevicePtr, segs []segment) {
	var total int64
	var a [6]uint64
	for j, g := range segs {
		a[2*j], a[2*j+1] = p(g.ptr), uint64(g.n)
		total += g.n
	}
	chunks := b3Chunks(total)
	half := cvs + cu.DevicePtr(32*chunks)
	lv := [2]cu.DevicePtr{cvs, half}
	if chunks == 1 {
		lv[0] = out
	}
	root := uint64(0)
	if chunks == 1 {
		root = 1
	}
	q.launchOn(s, "blake3_chunks", q.b.k.blake3Chunks, blocks(int(chunks), blockThreads), 1, blockThreads,
		p(lv[0]), a[0], a[1], a[2], a[3], a[4], a[5], i(int(chunks)), root)
	cur := 0
	for n := chunks; n > 1; n = (n + 1) / 2 {
		dst := lv[1-cur]
		root = 0
		if n == 2 {
			dst, root = out, 1
		}
		q.launchOn(s, "blake3_parents", q.b.k.blake3Parents, blocks(int((n+1)/2), blockThreads), 1, blockThreads,
			p(dst), p(lv[cur]), i(int(n)), root)
		cur = 1 - cur
	}
}

// hashStream returns the queue's hash stream, made on first use (the
// caller has the context current); false if making it failed (q.err says
// why). Everything that waits on the stream asks hsMade first: before its
// first use there is nothing to wait for, and the zero cu.Stream is the
// legacy default stream, never to be used in its place.
func (q *Queue) hashStream() (cu.Stream, bool) {
	if !q.hsMade {
		if !q.ok() {
			return cu.Stream{}, false
		}
		s, err := cu.MakeStream(cu.NonBlocking)
		if err != nil {
			q.check("device hash stream", err)
			return cu.Stream{}, false
		}
		q.hs, q.hsMade = s, true
	}
	return q.hs, true
}

// b3Scratch returns the queue's chaining-value scratch for a stream of n
// bytes and the device array of its pending digests, allocating them on
// first use (or when n needs more scratch: the hash stream is drained
// first, as it may be hashing into the old one).
func (q *Queue) b3Scratch(n int64) (cvs, digests cu.DevicePtr) {
	need := 64 * b3Chunks(n)
	if q.b3.cvs == nil || q.b3.cvs.n < int(need) {
		if q.b3.cvs != nil && q.hsMade {
			q.check("synchronize (device hashes)", q.hs.Synchronize())
			q.b.release(q.b3.cvs)
			q.b3.cvs = nil
		}
		m, err := q.b.allocMem(need)
		if err != nil {
			q.check("verification scratch", err)
			return 0, 0
		}
		m.n = int(need)
		q.b3.cvs = m
	}
	if q.b3.digests == nil {
		m, err := q.b.allocMem(32 * maxPendingChecks)
		if err != nil {
			q.check("verification scratch", err)
			return 0, 0
		}
		m.n = 32 * maxPendingChecks
		q.b3.digests = m
	}
	return q.b3.cvs.ptr, q.b3.digests.ptr
}

// verifyCopy enqueues, on the hash stream after the copy into sl, the
// digest of sl's segments (the record's bytes: layout) for the check at
// the next synchronisation (Options.VerifyCopies), and records
// sl.hashed after it, which the next copy into sl waits for. The caller
// holds a use of sl (no other queue copies into it meanwhile) and not b.mu
// (a full list of checks is checked at once, which may drop a slot).
func (q *Queue) verifyCopy(sl *slot, id weights.ExpertID, want jnf.Digest) {
	if !q.b.o.VerifyCopies || !q.ok() {
		return
	}
	if want.Alg != jnf.BLAKE3 {
		q.fail("%v: verifying the device copy needs a BLAKE3 digest, got %s", id, want)
		return
	}
	if len(q.b3.pending) == maxPendingChecks {
		if err := q.flushChecks(); err != nil {
			if q.err == nil {
				q.err = err
			}
			return
		}
	}
	total := q.enqueueCheck(pendingCheck{sl: sl, id: id, want: want}, sl.segs)
	if !q.ok() {
		return
	}
	q.check("device hash", sl.hashed.Record(q.hs))
	sl.hashedSet = true
	q.b.meter.verified.Add(1)
	q.b.meter.verifiedBytes.Add(total)
}

// enqueueCheck enqueues on the hash stream, after the copy into c.sl, the
// digest of segs (c.sl's parts) into the next pending digest, and returns
// the bytes it hashes. The list of pending checks has room.
func (q *Queue) enqueueCheck(c pendingCheck, segs [3]segment) int64 {
	var total int64
	for _, g := range segs {
		total += g.n
	}
	cvs, digests := q.b3Scratch(total)
	if !q.ok() {
		return 0
	}
	hs, ok := q.hashStream()
	if !ok {
		return 0
	}
	k := len(q.b3.pending)
	q.check("device hash", hs.Wait(c.sl.ready, 0))
	q.hashOn(hs, digests+cu.DevicePtr(32*k), cvs, segs[:])
	q.b3.pending = append(q.b3.pending, c)
	return total
}

// flushChecks waits for the pending digests and checks them (checkCopies).
func (q *Queue) flushChecks() error {
	if q.hsMade {
		if err := q.hs.Synchronize(); err != nil {
			q.check("synchronize (device hashes)", err)
		}
	}
	return q.checkCopies()
}

// checkCopies compares the digests of the pending checks, computed by now
// (the hash stream synchronised), with the manifest's, and returns the
// first that differs as a *CopyError; every copy that differs empties its
// slot. A queue that has failed checks nothing (its hashes may not
// have run).
func (q *Queue) checkCopies() error {
	n := len(q.b3.pending)
	if n == 0 {
		return nil
	}
	defer func() { clear(q.b3.pending); q.b3.pending = q.b3.pending[:0] }()
	if !q.ok() {
		return nil
	}
	if q.b3.got == nil {
		q.b3.got = make([][32]byte, maxPendingChecks)
	}
	got := q.b3.got
	if err := cu.MemcpyDtoH(unsafe.Pointer(&got[0]), q.b3.digests.ptr, int64(32*n)); err != nil {
		q.check("reading the device copies' digests", err)
		return nil
	}
	var first error
	for k, c := range q.b3.pending {
		if got[k] == c.want.Sum {
			continue
		}
		ce := &CopyError{ID: c.id, Got: jnf.Digest{Alg: jnf.BLAKE3, Sum: got[k]}, Want: c.want, Scrub: c.scrub}
		q.b.forget(c.sl, c.want, ce)
		q.b.meter.verifyFailures.Add(1)
		if first == nil {
			first = ce
		}
	}
	return first
}

// CopyError reports a routed expert whose bytes in device memory do not
// have the digest they were verified with on the host. It matches
// jnf.ErrVerification.
type CopyError struct {
	ID        weights.ExpertID
	Got, Want jnf.Digest
	// Scrub is set when a scrub of the resident copy found it (else it was
	// the check after the copy).
	Scrub bool
}

func (e *CopyError) Error() string {
	when := "after the copy to the device"
	if e.Scrub {
		when = "by a scrub of the device's resident copy"
	}
	return fmt.Sprintf("cuda: %v: the device's copy has BLAKE3 %s, want %s (found %s: host memory, the copy or device memory changed the bytes after they were verified)",
		e.ID, e.Got, e.Want, when)
}

// Is makes a CopyError match jnf.ErrVerification.
func (e *CopyError) Is(target error) bool { return target == jnf.ErrVerification }

// forget empties sl if it still holds the copy of want that failed its
// check: it holds nothing a SlotHolds or BindSlot accepts until it is
// filled again, and remembers why.
func (b *Backend) forget(sl *slot, want jnf.Digest, why *CopyError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sl.digest != want {
		return
	}
	sl.digest, sl.bad = jnf.Digest{}, why
}

// ScrubDevice re-hashes, on the device, every filled slot of the pool
// against the digest it was verified with, empties the slots that differ,
// and returns the bytes hashed and the first difference (a *CopyError).
// Each hash waits for the copy into its slot; a later fill of the slot
// waits for the hash (an event of the scrub's queue among the slot's free
// events), so the scrub hashes either the old copy or the new one, never a
// copy being overwritten. Kernels reading a slot at the same time are
// unaffected.
func (b *Backend) ScrubDevice() (int64, error) {
	if err := b.enter(); err != nil {
		return 0, err
	}
	defer b.leave()
	q, err := newQueue(b)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	b.mu.Lock()
	pool := slices.Clone(b.pool)
	b.mu.Unlock()
	var n int64
	var first error
	for _, sl := range pool {
		if len(q.b3.pending) == maxPendingChecks {
			if err := q.flushChecks(); first == nil {
				first = err
			}
		}
		b.mu.Lock()
		if sl.digest.IsZero() || slices.Index(b.pool, sl) < 0 {
			b.mu.Unlock()
			continue
		}
		n += q.enqueueCheck(pendingCheck{sl: sl, id: sl.id, want: sl.digest, scrub: true}, sl.segs)
		if hs, ok := q.hashStream(); ok {
			ev, ok := sl.free[q]
			if !ok {
				var err error
				if ev, err = cu.MakeEvent(cu.DisableTiming); err != nil {
					q.check("scrub", err)
				}
				sl.free[q] = ev
			}
			q.check("scrub", ev.Record(hs))
		}
		b.mu.Unlock()
	}
	if err := q.flushChecks(); first == nil {
		first = err
	}
	if !q.ok() {
		return n, q.err
	}
	b.meter.scrubbedBytes.Add(n)
	return n, first
}
