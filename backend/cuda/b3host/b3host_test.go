//go:build cgo

package b3host

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"
)

// lengths cover BLAKE3's boundaries: empty, inside a block, a block, a
// chunk, a power-of-two tree and the next node, and a real routed expert of
// Qwen3.5-122B-A10B (3 × 3072 × 1024 BF16).
var lengths = []int{0, 1, 3, 63, 64, 65, 127, 128, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 3073,
	4095, 4096, 5000, 8192, 31 * 1024, 32*1024 + 1, 1<<20 - 1, 1 << 20, 1<<20 + 7, 3 * 3072 * 1024 * 2}

func TestSumMatchesBLAKE3(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range lengths {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := blake3.Sum256(b)
		if got := Sum(b); got != want {
			t.Fatalf("%d bytes, one segment: %x, want %x", n, got, want)
		}
		// Three segments at unaligned and chunk-straddling cuts, and the
		// three equal parts of an expert record.
		for _, cut := range [][2]int{{n / 3, 2 * n / 3}, {min(n, 1), max(0, n-1)}, {min(n, 1000), min(n, 1030)}, {0, n}} {
			i, j := min(cut[0], cut[1]), max(cut[0], cut[1])
			if got := Sum(b[:i], b[i:j], b[j:]); got != want {
				t.Fatalf("%d bytes cut at %d and %d: %x, want %x", n, i, j, got, want)
			}
		}
	}
}

func FuzzSum(f *testing.F) {
	f.Add([]byte("abc"), uint16(1), uint16(2))
	f.Fuzz(func(t *testing.T, b []byte, c0, c1 uint16) {
		i, j := int(c0)%(len(b)+1), int(c1)%(len(b)+1)
		if i > j {
			i, j = j, i
		}
		if got, want := Sum(b[:i], b[i:j], b[j:]), blake3.Sum256(b); got != want {
			t.Fatalf("%d bytes cut at %d and %d: %x, want %x", len(b), i, j, got, want)
		}
	})
}

// TestChunk: the chaining value of a stream's only chunk is its digest.
func TestChunk(t *testing.T) {
	b := []byte("tarfa")
	cv := Chunk(0, b[:2], b[2:])
	var got [32]byte
	for i := range got {
		got[i] = byte(cv[i/4] >> (8 * (i % 4)))
	}
	if want := blake3.Sum256(b); got != want {
		t.Errorf("Chunk of a one-chunk stream %x, want its digest %x", got, want)
	}
}
