package weights

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/zeebo/blake3"
	"lukechampine.com/blake3/guts"

	"github.com/tarfa-ai/tarfa/jnf"
)

// treeLengths are lengths where BLAKE3's tree changes shape: around one
// block, one chunk, a SIMD group of 16 chunks, powers of two of chunks,
// and an 18 MiB expert record.
var treeLengths = []int{1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, 3 * 1024, 5*1024 + 1, 15 * 1024, 16 * 1024, 16*1024 + 1,
	17 * 1024, 31*1024 + 5, 32 * 1024, 33 * 1024, 100 * 1024, 128*1024 - 1, 128 * 1024, 128*1024 + 1, 1<<20 + 4096, 3<<20 + 777, 18 << 20}

// TestTreeMatchesBLAKE3: the digest computed in parts, of every size from
// one chunk to the whole record, is github.com/zeebo/blake3's of the
// record (the digest convert wrote into the manifest).
func TestTreeMatchesBLAKE3(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range treeLengths {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		want := blake3.Sum256(data)
		for _, part := range []int64{0, 1024, 2048, 4096, 16 << 10, 48 << 10, 1 << 20, 4 << 20} {
			p := newPlan(int64(n), part)
			if p.part&(p.part-1) != 0 && p.parts() > 1 || p.part > int64(n) {
				t.Fatalf("%d bytes in parts of %d: part %d", n, part, p.part)
			}
			if n > 2<<20 && part < 16<<10 {
				continue // thousands of parts: the small sizes cover the shapes
			}
			nodes := make([]guts.Node, p.parts())
			for i := range nodes {
				nodes[i] = p.hash(data, i)
			}
			if got := p.sum(nodes); got.Sum != want || got.Alg != jnf.BLAKE3 {
				t.Fatalf("%d bytes in %d parts of %d: %x, want %x", n, p.parts(), p.part, got.Sum, want)
			}
		}
	}
}

// TestCheckInParts: an expert hashed in parts by several goroutines mints
// the same value as Verify; the buffer is sealed before any part is
// hashed; a flipped bit in any part is refused (and the buffer unsealed),
// and so is a Verify before the last part.
func TestCheckInParts(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	c := open(t, dir)
	ref, err := c.ExpertRef(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewArena(int(ref.ReadLength()), 1<<22)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	f, err := os.Open(ref.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func() *Buffer {
		b, err := a.Get()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadAt(b.Bytes()[:ref.ReadLength()], ref.Offset()); err != nil {
			t.Fatal(err)
		}
		return b
	}
	want, err := c.Expert(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Length() < 4*1024 {
		t.Fatalf("the fixture's expert has %d bytes: too few for parts", ref.Length())
	}
	hashAll := func(ch *Check) int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		lasts := 0
		for i := range ch.Parts() {
			wg.Go(func() {
				if ch.Hash(i) {
					mu.Lock()
					lasts++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lasts
	}
	b := read()
	ch, err := ref.Check(b, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Sealed() || ch.Parts() != int((ref.Length()+1023)/1024) {
		t.Fatalf("sealed %v, %d parts for %d bytes", b.Sealed(), ch.Parts(), ref.Length())
	}
	if _, err := ch.Verify(); err == nil || !strings.Contains(err.Error(), "not hashed") {
		t.Errorf("Verify before any part was hashed: %v", err)
	}
	if n := hashAll(ch); n != 1 {
		t.Errorf("%d calls of Hash reported the last part", n)
	}
	e, err := ch.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != (ExpertID{1, 2}) || e.Gate().Values().Data() != want.Gate().Values().Data() || e.Down().Values().Data() != want.Down().Values().Data() || !e.Digest().Equal(ref.Digest()) {
		t.Fatal("the expert checked in parts differs from the checkpoint's")
	}
	b.Release()
	runtime.GC()
	// A flipped bit in the first, a middle and the last part.
	for _, at := range []int64{3, ref.Length() / 2, ref.Length() - 1} {
		b := read()
		b.Bytes()[at] ^= 0x10
		ch, err := ref.Check(b, 1024)
		if err != nil {
			t.Fatal(err)
		}
		hashAll(ch)
		var mm *jnf.MismatchError
		if _, err := ch.Verify(); !errors.As(err, &mm) || b.Sealed() || !strings.Contains(err.Error(), "model.layers.1.mlp.experts.2") {
			t.Errorf("bit %d flipped: %v (sealed %v)", at, err, b.Sealed())
		}
		b.Release()
	}
	// A sealed buffer is refused, as by Verify.
	b = read()
	if _, err := ref.Check(b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Check(b, 0); err == nil {
		t.Error("a sealed buffer was checked again")
	}
	b.Release()
}

// BenchmarkCheckExpert: the check of one real Qwen3.5-122B expert record
// (18 MiB) in 1 MiB parts, by 1, 2, 4, … goroutines up to GOMAXPROCS (the
// tier's hashers), against zeebo/blake3 on one core (what Verify used
// before).
func BenchmarkCheckExpert(b *testing.B) {
	data := make([]byte, 18<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			blake3.Sum256(data)
		}
	})
	p := newPlan(int64(len(data)), 1<<20)
	for g := 1; g <= runtime.GOMAXPROCS(0); g *= 2 {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			nodes := make([]guts.Node, p.parts())
			for range b.N {
				var wg sync.WaitGroup
				next := make(chan int, len(nodes))
				for i := range nodes {
					next <- i
				}
				close(next)
				for range g {
					wg.Go(func() {
						for i := range next {
							nodes[i] = p.hash(data, i)
						}
					})
				}
				wg.Wait()
				p.sum(nodes)
			}
		})
	}
}

// TestSumInParts: the measurement's digest is BLAKE3's, for any workers.
func TestSumInParts(t *testing.T) {
	data := make([]byte, 5<<20+123)
	for i := range data {
		data[i] = byte(i * 13)
	}
	want := blake3.Sum256(data)
	for _, w := range []int{0, 1, 3, 16} {
		for _, part := range []int64{0, 64 << 10, 1 << 20} {
			if got := SumInParts(data, part, w); got.Sum != want {
				t.Errorf("%d workers, parts of %d: %x, want %x", w, part, got.Sum, want)
			}
		}
	}
	if got := SumInParts(nil, 1<<20, 2); got.Sum != blake3.Sum256(nil) {
		t.Errorf("empty: %x", got.Sum)
	}
}

// FuzzSumInParts: for any bytes and any part size, the digest in parts is
// BLAKE3's.
func FuzzSumInParts(f *testing.F) {
	f.Add([]byte("abc"), uint16(1), uint8(1))
	f.Add(make([]byte, 5000), uint16(2), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunks uint16, workers uint8) {
		part := int64(chunks) * 1024
		if got, want := SumInParts(data, part, int(workers%8)), blake3.Sum256(data); got.Sum != want {
			t.Fatalf("%d bytes in parts of %d: %x, want %x", len(data), part, got.Sum, want)
		}
	})
}
