package weights

import (
	"testing"

	"github.com/zeebo/blake3"
)

// BenchmarkNaNSearch is the search of an expert's E4M3 codes for NaN
// (Check.Hash does it on each 1 MiB part it hashes) beside BLAKE3 of the
// same part: what the search adds to verifying a block-FP8 expert.
func BenchmarkNaNSearch(b *testing.B) {
	part := make([]byte, 1<<20)
	for i := range part {
		part[i] = byte(i*37) & 0x7E
	}
	s := string(part)
	b.Run("search", func(b *testing.B) {
		b.SetBytes(int64(len(part)))
		for b.Loop() {
			if nanCode(s) >= 0 {
				b.Fatal("NaN")
			}
		}
	})
	b.Run("blake3", func(b *testing.B) {
		b.SetBytes(int64(len(part)))
		for b.Loop() {
			blake3.Sum256(part)
		}
	})
}
