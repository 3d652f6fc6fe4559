package tier

import (
	"sync"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/weights"
)

// An expert's read is a job of pieces and parts: its bytes are read in
// pieces of readPiece bytes by whichever readers are free (the first
// reader to take the job queues the other pieces for the others, and
// readers take queued pieces before new jobs), and once the last piece is
// in, the buffer is sealed and hashed in parts of hashPart bytes by
// whichever hashers are free (weights.Check: subtrees of its BLAKE3 tree).
// The queues are first in, first out, so the experts a Stream asked for
// first are read, then verified, first — each by many cores — and the
// engine copies and computes one while the next ones are read and hashed:
// a layer's eight experts keep every core busy, not eight of them, and the
// first is ready in an eighth of the time. The last part's hasher
// compares the digest and replies; nothing is delivered before that.
var (
	readPiece int64 = 4 << 20 // a multiple of jnf.Align (O_DIRECT)
	hashPart  int64 = 1 << 20
)

// piecesOf is the number of pieces of a read of n bytes.
func piecesOf(n int64) int { return int(max(1, (n+readPiece-1)/readPiece)) }

// job is one expert read in flight.
type job struct {
	readReq
	left atomic.Int32 // pieces not read yet

	mu                       sync.Mutex
	err                      error // the first piece's error
	direct, cached, buffered int   // pieces read each way

	check *weights.Check
}

// piece is piece i of a job, for a reader.
type piece struct {
	j *job
	i int
}

// part is part i of a job's check, for a hasher.
type part struct {
	j *job
	i int
}

// reader serves read requests until Close: pieces of jobs begun first,
// then the reads a Stream waits for, then reads ahead. It only reads: the
// reader of a job's last piece hands its parts to the hashers, so Readers
// reads stay in flight while earlier ones are hashed.
func (h *Hierarchy) reader() {
	defer h.rwg.Done()
	reqs, preqs := h.reqs, h.preqs
	for {
		var r readReq
		var ok bool
		select {
		case p := <-h.pieceQ:
			h.readPiece(p)
			continue
		default:
		}
		if reqs == nil && preqs == nil {
			return // closed, and no piece left: a job's pieces are queued before its first is read
		}
		select { // a read a Stream waits for before a read ahead
		case p := <-h.pieceQ:
			h.readPiece(p)
			continue
		case r, ok = <-reqs:
			if !ok {
				reqs = nil
				continue
			}
		default:
			select {
			case p := <-h.pieceQ:
				h.readPiece(p)
				continue
			case r, ok = <-reqs:
				if !ok {
					reqs = nil
					continue
				}
			case r, ok = <-preqs:
				if !ok {
					preqs = nil
					continue
				}
			}
		}
		r.buf.Pin() // a RAM-tier buffer's first read (the staging ones were pinned when mapped)
		j := &job{readReq: r}
		n := piecesOf(r.ref.ReadLength())
		j.left.Store(int32(n))
		rest := n // the first piece the queue had no room for: this reader reads it and those after it
	queue:
		for i := 1; i < n; i++ {
			select {
			case h.pieceQ <- piece{j, i}:
			default:
				rest = i
				break queue
			}
		}
		h.readPiece(piece{j, 0})
		for i := rest; i < n; i++ {
			h.readPiece(piece{j, i})
		}
	}
}

// readPiece reads one piece; the reader of a job's last piece finishes it.
func (h *Hierarchy) readPiece(p piece) {
	j := p.j
	off := int64(p.i) * readPiece
	n := min(readPiece, j.ref.ReadLength()-off)
	direct, cached, err := h.files.readRange(j.ref, j.buf, off, n)
	j.mu.Lock()
	switch {
	case err != nil:
		if j.err == nil {
			j.err = err
		}
	case direct:
		j.direct++
	case cached:
		j.cached++
	default:
		j.buffered++
	}
	j.mu.Unlock()
	if j.left.Add(-1) == 0 {
		h.readDone(j)
	}
}

// readDone counts a job's read and hands its parts to the hashers (or
// replies with its error).
func (h *Hierarchy) readDone(j *job) {
	n := j.ref.ReadLength()
	prefetch := j.reply == h.prefetchQ
	h.count(func(s *Stats) {
		s.BytesRead += n
		if prefetch {
			s.PrefetchBytes += n
		}
		switch {
		case j.err != nil:
		case j.cached > 0 && j.direct == 0 && j.buffered == 0:
			s.CachedReads++ // every page was in the page cache
		case j.direct > 0:
			s.DirectReads++
		default:
			s.Buffered++
		}
	})
	err := j.err
	if err == nil {
		j.check, err = j.ref.Check(j.buf, hashPart)
	}
	if err != nil {
		h.count(func(s *Stats) { s.Failures++ })
		j.reply <- readDone{j.readReq, weights.VerifiedExpert{}, err}
		return
	}
	for i := range j.check.Parts() {
		h.hashQ <- part{j, i}
	}
}

// hasher hashes parts of checks until Close (one per core, Options.Hashers);
// the hasher of a check's last part verifies it and replies: no byte
// reaches a consumer before its digest matched.
func (h *Hierarchy) hasher() {
	defer h.hwg.Done()
	for q := range h.hashQ {
		j := q.j
		if !j.check.Hash(q.i) {
			continue
		}
		ve, err := j.check.Verify()
		h.count(func(s *Stats) {
			if err == nil {
				s.BytesHashed += j.ref.Length()
			} else {
				s.Failures++
			}
		})
		j.reply <- readDone{j.readReq, ve, err}
	}
}
