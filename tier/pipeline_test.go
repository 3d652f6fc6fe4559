package tier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
)

// smallPieces makes the test model's experts (tens of KiB) reads of
// several pieces and checks of several parts, as an 18 MiB expert's are.
func smallPieces(t *testing.T, piece, part int64) {
	t.Helper()
	p, q := readPiece, hashPart
	readPiece, hashPart = piece, part
	t.Cleanup(func() { readPiece, hashPart = p, q })
}

// TestPiecesAndPartsChangeNothing: experts read in pieces by several
// readers and hashed in parts by several hashers give the logits of the
// default path, whatever the piece and part sizes, the readers, hashers
// and read modes; every read is counted once and verified before use.
func TestPiecesAndPartsChangeNothing(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want [][][]float32
	for _, p := range prompts {
		rows, err := run(t, ref, p, 6)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rows)
	}
	er, _ := ck.ExpertRef(0, 0)
	size := er.ReadLength()
	if size < 3*4096 {
		t.Fatalf("the test model's experts have %d bytes: too few for pieces", size)
	}
	for _, c := range []struct {
		piece, part      int64
		ram, dev         int64 // in experts
		readers, hashers int
		direct           DirectMode
	}{
		{4096, 1024, 0, 2, 1, 1, DirectOff}, // one reader, one hasher: every piece and part in turn
		{4096, 1024, 0, 8, 8, 4, DirectOff},
		{8192, 2048, 0, 3, 3, 2, DirectAuto},
		{4096, 4096, 64, 4, 4, 3, DirectAuto}, // RAM tier: pieces of reads admitted to it
		{4096, 16 << 10, 6, 2, 2, 8, DirectOff},
		{readPiece, hashPart, 0, 8, 8, 8, DirectOff}, // the defaults: one piece, one part
	} {
		t.Run(fmt.Sprintf("piece%d-part%d-ram%d-dev%d-readers%d-hashers%d-direct%d", c.piece, c.part, c.ram, c.dev, c.readers, c.hashers, c.direct), func(t *testing.T) {
			smallPieces(t, c.piece, c.part)
			h, err := New(ck, Options{RAMBudget: c.ram * size, StagingBudget: c.dev * size, Readers: c.readers, Hashers: c.hashers, Direct: c.direct})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, err := engine.Load(ck, engine.Options{Experts: h})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				got, err := run(t, m, p, 6)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, want[i]) {
					t.Fatalf("prompt %d: logits differ from the default path", i)
				}
			}
			st := h.Stats()
			reads := st.Misses + st.Streamed
			if st.Failures != 0 || st.BytesRead != reads*size || st.DirectReads+st.CachedReads+st.Buffered != reads || st.BytesHashed != reads*er.Length() {
				t.Errorf("%d reads: stats %+v", reads, st)
			}
		})
	}
}

// TestPiecesOfAChangedFile: a bit flipped in any piece of any expert's
// read (the first, a middle one, the last) fails its check: no token is
// produced, and the failures are counted.
func TestPiecesOfAChangedFile(t *testing.T) {
	for _, where := range []string{"first", "middle", "last"} {
		t.Run(where, func(t *testing.T) {
			smallPieces(t, 4096, 1024)
			dir := testModel(t)
			ck := openCk(t, dir)
			size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
			h, err := New(ck, Options{StagingBudget: 4 * size, Readers: 4, Hashers: 3, Direct: DirectOff})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, _ := engine.Load(ck, engine.Options{Experts: h})
			for l := range ck.Config().Layers {
				for e := range ck.Config().Experts {
					ref, err := ck.ExpertRef(l, e)
					if err != nil {
						continue // a dense layer
					}
					at := map[string]int64{"first": 7, "middle": ref.Length() / 2, "last": ref.Length() - 2}[where]
					b, _ := os.ReadFile(ref.Path())
					b[ref.Offset()+at] ^= 4
					os.WriteFile(ref.Path(), b, 0o644)
				}
			}
			tokens := 0
			_, err = engine.Generate(context.Background(), m.NewSession(), prompts[0], engine.GenOptions{MaxTokens: 3}, func(int, []float32) error {
				tokens++
				return nil
			})
			var mm *jnf.MismatchError
			if !errors.As(err, &mm) || tokens != 0 {
				t.Fatalf("after the file changed: %d tokens, %v", tokens, err)
			}
			if st := h.Stats(); st.Failures == 0 || st.BytesHashed != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// countPinner counts the buffers it pinned and unpinned.
type countPinner struct {
	mu              sync.Mutex
	pinned, unpined int
	sizes           map[int]int
}

func (p *countPinner) Pin(mem []byte) (func() error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pinned++
	if p.sizes == nil {
		p.sizes = map[int]int{}
	}
	p.sizes[len(mem)]++
	return func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.unpined++
		return nil
	}, nil
}

// TestRAMTierIsPinned: with a Pinner the RAM tier's buffers are pinned as
// the staging ones are (a resident copy is copied to the device from where
// it lies), each once, by its first read; all are unpinned at Close.
func TestRAMTierIsPinned(t *testing.T) {
	ck := openCk(t, testModel(t))
	er, _ := ck.ExpertRef(0, 0)
	size := er.ReadLength()
	var p countPinner
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size, Pinner: &p, Direct: DirectOff})
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(ck, engine.Options{Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range prompts {
		if _, err := run(t, m, pr, 4); err != nil {
			t.Fatal(err)
		}
	}
	st := h.Stats()
	// The arenas' spare keepers map and pin buffers ahead of Get in the
	// background, a buffer counted as mapped before its pin returns: wait
	// (boundedly) for the counts to settle.
	var ram, staging int64
	var pinned int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ram = h.ram.Mapped() / int64(h.ram.BufferSize())
		staging = h.dev.Mapped() / int64(h.dev.BufferSize())
		p.mu.Lock()
		pinned = p.pinned
		p.mu.Unlock()
		if int64(pinned) == ram+staging || time.Now().After(deadline) {
			break
		}
	}
	if st.Misses == 0 || ram == 0 || st.Hits == 0 {
		t.Fatalf("stats %+v, %d RAM buffers", st, ram)
	}
	if int64(pinned) != ram+staging {
		t.Errorf("%d buffers pinned, want the %d of the RAM tier and the %d staging ones", pinned, ram, staging)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unpined != p.pinned { // a keeper's last pin may land during Close
		t.Errorf("%d of %d unpinned at Close", p.unpined, p.pinned)
	}
}

// TestPieceQueueOrder: readers take the pieces of the reads a Stream
// waits for before reads ahead, each read's in order and the reads in the
// order dispatched; a reader waits for a piece, and none is left waiting
// once the queue is closed and empty.
func TestPieceQueueOrder(t *testing.T) {
	var q pieceQueue
	q.init()
	a, b, c := &job{}, &job{}, &job{}
	q.push(a, 2, true) // ahead
	q.push(b, 3, false)
	q.push(c, 1, false)
	var got []piece
	for range 6 {
		p, ok := q.pop()
		if !ok {
			t.Fatal("closed")
		}
		got = append(got, p)
	}
	want := []piece{{b, 0}, {b, 1}, {b, 2}, {c, 0}, {a, 0}, {a, 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("piece %d: %v, want %v", i, got[i], want[i])
		}
	}
	done := make(chan piece)
	go func() {
		p, _ := q.pop()
		done <- p
	}()
	q.push(c, 1, true)
	if p := <-done; p != (piece{c, 0}) {
		t.Errorf("a waiting reader got %v", p)
	}
	go func() {
		_, ok := q.pop()
		done <- piece{i: map[bool]int{true: 1, false: 0}[ok]}
	}()
	q.close()
	if p := <-done; p.i != 0 {
		t.Error("a piece popped from a closed, empty queue")
	}
}
