package jnf

import (
	"crypto/sha256"
	"hash"
	"testing"

	sha256simd "github.com/minio/sha256-simd"
	"github.com/zeebo/blake3"
)

// Per-core hash throughput (BENCHMARKS.md): go test ./jnf -bench Hash -cpu 1
func benchHash(b *testing.B, h hash.Hash) {
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		h.Reset()
		h.Write(buf)
		h.Sum(nil)
	}
}

func BenchmarkHashSHA256Stdlib(b *testing.B) { benchHash(b, sha256.New()) }
func BenchmarkHashSHA256Simd(b *testing.B)   { benchHash(b, sha256simd.New()) }
func BenchmarkHashBLAKE3(b *testing.B)       { benchHash(b, blake3.New()) }
func BenchmarkHashBoth(b *testing.B) {
	buf := make([]byte, 16<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		SumBytes(buf)
	}
}

func TestDigestParse(t *testing.T) {
	d := SumBytes([]byte("abc"))
	if d.SHA256.Hex() != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("sha256(abc) = %s", d.SHA256.Hex())
	}
	if d.BLAKE3.Hex() != "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85" {
		t.Errorf("blake3(abc) = %s", d.BLAKE3.Hex())
	}
	p, err := ParseDigest(d.SHA256.String())
	if err != nil || !p.Equal(d.SHA256) {
		t.Errorf("round trip: %v", err)
	}
	for _, bad := range []string{"sha256", "md5:" + d.SHA256.Hex(), "sha256:abc", "sha256:" + d.SHA256.Hex()[:63] + "G", "sha256:" + "AB" + d.SHA256.Hex()[2:]} {
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
}
