package weights

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"lukechampine.com/blake3/guts"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Check is the verification of one expert record read into an arena
// buffer, in parts that several goroutines may hash at once: a record of
// 18 MiB is hashed by as many cores as take its parts, not by one. The
// buffer is sealed read-only before any part is hashed (as by Verify), so
// the bytes hashed are the bytes served; the value is minted only by
// Verify, once every part was hashed and the combined digest matched the
// manifest's.
type Check struct {
	ref   ExpertRef
	b     *Buffer
	rec   *record
	data  []byte // rec.data, for the hashing code (read only)
	plan  plan
	nodes []guts.Node
	left  atomic.Int64 // parts not hashed yet
	// codes is the end of a block-FP8 record's E4M3 codes (0: none), which
	// Hash searches for NaN in the part it hashes, while the bytes are in
	// cache; nan is the lowest offset of one found (−1: none).
	codes int64
	nan   atomic.Int64
}

// Check seals b, which holds ref's record (its first Length bytes; as for
// Verify), and returns the check of it in parts of at most part bytes
// (rounded down to a power-of-two number of 1 KiB chunks; part ≤ 0: one
// part). Each part is hashed by one call of Hash; then Verify. A check
// that is never finished leaves b sealed: Release unseals it.
func (r ExpertRef) Check(b *Buffer, part int64) (*Check, error) {
	if r.ref == nil {
		panic("weights: use of a zero ExpertRef")
	}
	n := r.ref.rec.Length
	if b == nil || !b.inUse || b.sealed || int64(len(b.mem)) < n {
		return nil, fmt.Errorf("%s: a %d-byte record needs a writable buffer of the arena, at least as long", r.ref.rec.Name, n)
	}
	if err := b.seal(); err != nil {
		return nil, err
	}
	rec, err := newRecord(r.ck.root, r.ck.blk, r.ref.file.Name, &r.ref.rec, r.ref.want, b.mem[:n:n])
	if err != nil {
		b.unseal()
		return nil, err
	}
	c := &Check{ref: r, b: b, rec: rec, plan: newPlan(n, part)}
	if e := &r.ref.rec; len(e.Parts) == 6 {
		c.codes = codesEnd(e)
	}
	c.nan.Store(-1)
	c.data = unsafe.Slice(unsafe.StringData(rec.data), len(rec.data)) // only read: the hashing code takes slices
	c.nodes = make([]guts.Node, c.plan.parts())
	c.left.Store(int64(len(c.nodes)))
	return c, nil
}

// Parts is the number of parts.
func (c *Check) Parts() int { return len(c.nodes) }

// Hash hashes part i (each part once; parts may be hashed concurrently)
// and reports whether it was the last one outstanding: exactly one call
// reports true, and its caller (or any goroutine it hands the check to)
// calls Verify.
func (c *Check) Hash(i int) (last bool) {
	c.nodes[i] = c.plan.hash(c.data, i)
	if lo := int64(i) * c.plan.part; lo < c.codes {
		hi := min(lo+c.plan.part, c.codes)
		if j := nanCode(c.rec.data[lo:hi]); j >= 0 {
			for at := lo + int64(j); ; {
				old := c.nan.Load()
				if old >= 0 && old <= at || c.nan.CompareAndSwap(old, at) {
					break
				}
			}
		}
	}
	return c.left.Add(-1) == 0
}

// Verify, once every part is hashed, compares the record's digest with its
// manifest entry's and mints the expert (viewing b in place until b is
// released, as Verify's value); on a mismatch b is unsealed and the error
// names the record.
func (c *Check) Verify() (VerifiedExpert, error) {
	if n := c.left.Load(); n != 0 {
		return VerifiedExpert{}, fmt.Errorf("%s: verified with %d of %d parts not hashed", c.ref.ref.rec.Name, n, len(c.nodes))
	}
	rec, err := c.rec.checked(&c.ref.ref.rec, c.plan.sum(c.nodes), true)
	if err == nil {
		if at := c.nan.Load(); at >= 0 {
			err = nanError(&c.ref.ref.rec, c.rec.file, int(at), c.rec.data[at])
		}
	}
	if err != nil {
		c.b.unseal()
		return VerifiedExpert{}, err
	}
	return c.ref.minted(rec, c.b), nil
}

// SumInParts is the BLAKE3 digest of data computed as a Check computes a
// record's: in parts of at most part bytes (part ≤ 0: one), hashed by
// workers goroutines taking them in order. It mints nothing: it is for
// measurements (tarfa bench hash).
func SumInParts(data []byte, part int64, workers int) jnf.Digest {
	if len(data) == 0 {
		return jnf.BLAKE3Bytes(data)
	}
	p := newPlan(int64(len(data)), part)
	nodes := make([]guts.Node, p.parts())
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(nodes); i = int(next.Add(1) - 1) {
			nodes[i] = p.hash(data, i)
		}
	}
	var wg sync.WaitGroup
	for range max(workers, 1) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return p.sum(nodes)
}
