package tier

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Scrub schedules re-verification of the copies the hierarchy keeps
// resident. Every copy was verified on its way in; a scrub re-hashes it
// against its manifest digest, so a bit that flips in memory afterwards
// (a failing DIMM, a stray write through an unsealed page) is found.
type Scrub struct {
	// OnUse re-hashes a resident RAM-tier copy before every use: no byte is
	// computed that was not hashed in the same step. A copy that fails is
	// dropped and read again from storage, so outputs stay exact; it is
	// counted (Stats.ScrubFailures) but does not fault the hierarchy. It
	// costs one hash of every expert a step uses.
	OnUse bool
	// Every runs a background pass over every resident copy (and
	// Options.ScrubExtra) this often, on one goroutine; 0: none.
	Every time.Duration
}

// DefaultScrub is the schedule of the generating commands: a background
// pass every ten minutes (one core's hashing of the RAM tier, a small
// fraction of a core at any budget that fits in memory).
var DefaultScrub = Scrub{Every: 10 * time.Minute}

// MinScrubEvery bounds Scrub.Every from below, so a typo cannot turn the
// scrubber into a busy loop.
const MinScrubEvery = time.Second

// ParseScrub reads a schedule: "off", "use" (before every use), or a
// duration such as "10m" (a background pass that often), or both as
// "use,10m".
func ParseScrub(s string) (Scrub, error) {
	var sc Scrub
	if s == "off" {
		return sc, nil
	}
	if s == "" {
		return sc, errors.New(`scrub schedule is empty (want "off", "use", a duration such as "10m", or "use,10m")`)
	}
	for part := range strings.SplitSeq(s, ",") {
		switch {
		case part == "use" && !sc.OnUse:
			sc.OnUse = true
		default:
			d, err := time.ParseDuration(part)
			if err != nil || sc.Every != 0 {
				return Scrub{}, fmt.Errorf(`scrub schedule %q: %q is not "use" or a duration (want "off", "use", "10m" or "use,10m")`, s, part)
			}
			if d < MinScrubEvery {
				return Scrub{}, fmt.Errorf("scrub schedule %q: a pass every %v is more often than every %v", s, d, MinScrubEvery)
			}
			sc.Every = d
		}
	}
	return sc, nil
}

// String is the schedule as ParseScrub reads it.
func (s Scrub) String() string {
	switch {
	case s.OnUse && s.Every > 0:
		return "use," + s.Every.String()
	case s.OnUse:
		return "use"
	case s.Every > 0:
		return s.Every.String()
	}
	return "off"
}

// ScrubFault is what a scrub found: a resident copy that no longer matches
// its digest. Every token computed from that copy between Verified and
// Found may come from bad bytes, so the hierarchy faults: every Stream from
// then on fails with this error (it wraps jnf.ErrVerification) until
// ClearFault. The bad copy itself is dropped and read again on its next use.
type ScrubFault struct {
	Expert   weights.ExpertID // the routed expert, or Layer -1 for ScrubExtra
	Verified time.Time        // when the copy was last verified
	Found    time.Time
	Err      error // the mismatch
}

func (f *ScrubFault) Error() string {
	what := f.Expert.String() + "'s resident copy"
	if f.Expert.Layer < 0 {
		what = "a resident tensor"
	}
	return fmt.Sprintf("tier: scrub: %s no longer matches its digest (%v): a memory fault; tokens computed from it between %s (last verified) and %s may be wrong",
		what, f.Err, f.Verified.Format(time.RFC3339), f.Found.Format(time.RFC3339))
}

func (f *ScrubFault) Unwrap() []error { return []error{f.Err, jnf.ErrVerification} }

// Fault returns the first scrub failure since New or ClearFault, or nil.
func (h *Hierarchy) Fault() *ScrubFault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fault
}

// ClearFault lets Streams run again after a fault was reported (the bad
// copies were dropped already; the next use reads them from storage).
func (h *Hierarchy) ClearFault() {
	h.mu.Lock()
	h.fault = nil
	h.mu.Unlock()
}

// faultLocked records f unless a fault is already pending.
func (h *Hierarchy) faultLocked(f *ScrubFault) {
	if h.fault == nil {
		h.fault = f
	}
}

// ScrubAll re-hashes every copy resident now — the RAM tier's and those of
// Options.ScrubExtra — and returns the bytes checked and the first failure
// (a *ScrubFault, which also faults the hierarchy), or the fault already
// pending. attest run calls it before it signs: every copy still resident
// at the end is checked once more after its last use. (Copies evicted
// during the run were checked on their way in; Scrub.OnUse checks every
// use.)
func (h *Hierarchy) ScrubAll() (int64, error) {
	n, errs := h.scrubPass(false)
	h.count(func(s *Stats) { s.ScrubPasses++ })
	if len(errs) > 0 {
		return n, errs[0]
	}
	if f := h.Fault(); f != nil {
		return n, f // found earlier (that copy is no longer resident)
	}
	return n, nil
}

// Scrub re-hashes up to maxBytes of resident RAM-tier copies against their
// manifest digests, in expert order from where the last call stopped, and
// returns the bytes checked and the failures (each a *ScrubFault naming the
// expert and the digests). A copy that fails is dropped, so it is read
// again on its next use, and the hierarchy faults (Fault).
func (h *Hierarchy) Scrub(maxBytes int64) (int64, []error) {
	return h.scrubBudget(maxBytes)
}

func (h *Hierarchy) scrubPass(stopOnClose bool) (int64, []error) {
	n, errs := h.scrubBudget(-1)
	if h.opt.ScrubExtra != nil && (!stopOnClose || !h.isClosing()) {
		m, err := h.opt.ScrubExtra()
		n += m
		h.count(func(s *Stats) { s.ScrubbedBytes += m })
		if err != nil {
			f := &ScrubFault{Expert: weights.ExpertID{Layer: -1}, Verified: h.started, Found: time.Now(), Err: err}
			h.mu.Lock()
			h.faultLocked(f)
			h.mu.Unlock()
			h.count(func(s *Stats) { s.ScrubFailures++ })
			errs = append(errs, f)
		}
	}
	return n, errs
}

func (h *Hierarchy) isClosing() bool {
	select {
	case <-h.closing:
		return true
	default:
		return false
	}
}

// scrubBudget checks resident copies in dense-index order starting at the
// cursor, up to maxBytes (negative: one full round). One scrub runs at a
// time; it hashes a copy outside mu, and an eviction meanwhile leaves the
// release of that buffer to the scrub (releaseBufLocked).
func (h *Hierarchy) scrubBudget(maxBytes int64) (int64, []error) {
	h.scrubMu.Lock()
	defer h.scrubMu.Unlock()
	h.mu.Lock()
	keys := make([]int, 0, len(h.resident))
	for k, e := range h.resident {
		if e.state == ready {
			keys = append(keys, k)
		}
	}
	cursor := h.scrubCursor
	h.mu.Unlock()
	slices.Sort(keys)
	// Start at the cursor, wrap around.
	start, _ := slices.BinarySearch(keys, cursor)
	keys = append(keys[start:], keys[:start]...)
	var n int64
	var errs []error
	for _, k := range keys {
		if maxBytes >= 0 && n >= maxBytes {
			break
		}
		if h.isClosing() {
			break
		}
		h.mu.Lock()
		e := h.resident[k]
		if e == nil || e.state != ready {
			h.mu.Unlock()
			continue
		}
		buf, ve := e.buf, e.ve
		size := ve.Bytes()
		h.scrubBuf = buf
		h.mu.Unlock()
		if scrubHashHook != nil {
			scrubHashHook(h, e.id)
		}

		err := ve.Recheck()
		now := time.Now()

		h.mu.Lock()
		h.scrubBuf = nil
		if h.scrubOrphan {
			// Evicted (or replaced) while it was hashed: the buffer is ours
			// to release; a failure still counts, the copy is gone already.
			h.scrubOrphan = false
			buf.Release()
			h.loaded.Broadcast() // a lease may wait for this buffer
		}
		if err != nil {
			f := &ScrubFault{Expert: e.id, Verified: e.verifiedAt, Found: now, Err: err}
			if h.resident[k] == e && e.buf == buf && e.state == ready {
				e.state, e.err = failed, err // read again on its next use
			}
			h.faultLocked(f)
			errs = append(errs, f)
		} else if e.buf == buf {
			e.verifiedAt = now
		}
		h.scrubCursor = k + 1
		h.mu.Unlock()
		n += size
	}
	h.count(func(s *Stats) { s.ScrubbedBytes += n; s.ScrubFailures += int64(len(errs)) })
	return n, errs
}

// scrubHashHook, set by tests only, runs as a scrub is about to hash id's
// copy outside the lock.
var scrubHashHook func(h *Hierarchy, id weights.ExpertID)

// releaseBufLocked releases e's buffer, or leaves it to the scrub hashing it.
func (h *Hierarchy) releaseBufLocked(e *entry) {
	if e.buf == h.scrubBuf {
		h.scrubOrphan = true
		return
	}
	e.buf.Release()
}

// ramGetLocked takes a RAM-tier buffer. The policy never holds more copies
// than the arena has buffers, so the arena is short only while the scrub
// still hashes an evicted copy's buffer: then it waits for that one.
func (h *Hierarchy) ramGetLocked() (*weights.Buffer, error) {
	for {
		b, err := h.ram.Get()
		if err == nil || !h.scrubOrphan {
			return b, err
		}
		h.loaded.Wait()
	}
}

// scrubber runs Options.Scrub.Every passes until Close.
func (h *Hierarchy) scrubber(every time.Duration) {
	defer h.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.closing:
			return
		case <-t.C:
			h.scrubPass(true)
			h.count(func(s *Stats) { s.ScrubPasses++ })
		}
	}
}

// recheckOnUse re-hashes a resident copy before it is consumed (Scrub.OnUse).
// A copy that fails is marked so that it is read again, and the caller
// reads this use through a staging buffer instead.
func (h *Hierarchy) recheckOnUse(e *entry) bool {
	ve := e.ve
	err := ve.Recheck()
	h.count(func(s *Stats) {
		s.ScrubbedBytes += ve.Bytes()
		if err != nil {
			// not a hit after all: the use is read through a staging buffer
			s.ScrubFailures++
			s.Hits--
			s.Streamed++
		}
	})
	if err == nil {
		return true
	}
	h.mu.Lock()
	if e.state == ready {
		e.state, e.err = failed, err
	}
	h.mu.Unlock()
	return false
}
