package tier

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarfa-ai/tarfa/weights"
)

// An expert's read is a job of pieces and parts: its bytes are read in
// pieces of readPiece bytes by whichever readers are free, and once the
// last piece is in, the buffer is sealed and hashed in parts of hashPart
// bytes by whichever hashers are free (weights.Check: subtrees of its
// BLAKE3 tree). One dispatcher turns the reads asked for into pieces, in
// the order asked (a Stream's before reads ahead), and the readers take
// the pieces in that order, so the experts a Stream asked for first are
// read, then verified, first — each by many cores — and the engine copies
// and computes one while the next ones are read and hashed: a layer's
// eight experts keep every core busy, not eight of them. The last part's
// hasher compares the digest and replies; nothing is delivered before
// that.
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

// pieceQueue holds the pieces of the reads dispatched and not yet taken:
// those a Stream waits for (now) before reads ahead (ahead), each in the
// order dispatched. It never blocks the dispatcher: every read in it holds
// a buffer already, so the arenas' budgets bound it.
type pieceQueue struct {
	mu         sync.Mutex
	more       *sync.Cond
	now, ahead []piece
	closed     bool
}

func (q *pieceQueue) init() { q.more = sync.NewCond(&q.mu) }

// push queues every piece of j.
func (q *pieceQueue) push(j *job, n int, ahead bool) {
	q.mu.Lock()
	for i := range n {
		if ahead {
			q.ahead = append(q.ahead, piece{j, i})
		} else {
			q.now = append(q.now, piece{j, i})
		}
	}
	q.mu.Unlock()
	q.more.Broadcast()
}

// pop takes the first piece, waiting for one; false once closed and empty.
func (q *pieceQueue) pop() (piece, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for _, l := range []*[]piece{&q.now, &q.ahead} {
			if len(*l) > 0 {
				p := (*l)[0]
				(*l)[0] = piece{}
				*l = (*l)[1:]
				if len(*l) == 0 {
					*l = nil // let the backing array go
				}
				return p, true
			}
		}
		if q.closed {
			return piece{}, false
		}
		q.more.Wait()
	}
}

func (q *pieceQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.more.Broadcast()
}

// dispatcher turns read requests into pieces until Close: the reads a
// Stream waits for before reads ahead.
func (h *Hierarchy) dispatcher() {
	defer h.rwg.Done()
	defer h.pieces.close()
	reqs, preqs := h.reqs, h.preqs
	for reqs != nil || preqs != nil {
		var r readReq
		var ok bool
		ahead := false
		select { // a read a Stream waits for first
		case r, ok = <-reqs:
			if !ok {
				reqs = nil
				continue
			}
		default:
			select {
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
				ahead = true
			}
		}
		j := &job{readReq: r}
		n := piecesOf(r.ref.ReadLength())
		j.left.Store(int32(n))
		h.pieces.push(j, n, ahead)
	}
}

// reader reads pieces until Close. It only reads: the reader of a job's
// last piece hands its parts to the hashers, so Readers reads stay in
// flight while earlier ones are hashed.
func (h *Hierarchy) reader() {
	defer h.rwg.Done()
	for {
		p, ok := h.pieces.pop()
		if !ok {
			return
		}
		if p.i == 0 {
			p.j.started = time.Now() // pieces are taken in order: the read starts now
			p.j.buf.Pin()            // a RAM-tier buffer's first read (the staging ones were pinned when mapped)
		}
		h.readPiece(p)
	}
}

// readPiece reads one piece; the reader of a job's last piece finishes it.
func (h *Hierarchy) readPiece(p piece) {
	j := p.j
	off := int64(p.i) * readPiece
	n := min(readPiece, j.ref.ReadLength()-off)
	direct, cached, err := h.files.readRange(j.ref, j.buf, off, n, j.known)
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
	q := h.hashQ
	if prefetch {
		q = h.phashQ
	}
	for i := range j.check.Parts() {
		q <- part{j, i}
	}
}

// hasher hashes parts of checks until Close (one per core, Options.Hashers);
// the hasher of a check's last part verifies it and replies: no byte
// reaches a consumer before its digest matched.
// The parts of reads a Stream waits for are hashed first, those of reads
// ahead when none is waiting.
func (h *Hierarchy) hasher() {
	defer h.hwg.Done()
	hq, pq := h.hashQ, h.phashQ
	for hq != nil || pq != nil {
		var q part
		var ok bool
		select {
		case q, ok = <-hq:
			if !ok {
				hq = nil
				continue
			}
		default:
			select {
			case q, ok = <-hq:
				if !ok {
					hq = nil
					continue
				}
			case q, ok = <-pq:
				if !ok {
					pq = nil
					continue
				}
			}
		}
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
