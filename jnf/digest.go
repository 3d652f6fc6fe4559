package jnf

import (
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"

	sha256simd "github.com/minio/sha256-simd"
	"github.com/zeebo/blake3"
)

// Alg names a digest algorithm. Only the two algorithms below are accepted
// anywhere in Tarfa; an unknown algorithm is an error, never ignored.
type Alg string

const (
	SHA256 Alg = "sha256"
	BLAKE3 Alg = "blake3"
)

// Digest is a parsed, validated 32-byte digest with its algorithm. Its text
// form is "alg:hex" (e.g. "sha256:9f86…"), the form used in manifests,
// attestation subjects and HTTP headers alike.
type Digest struct {
	Alg Alg
	Sum [32]byte
}

// ParseDigest parses "sha256:<64 hex>" or "blake3:<64 hex>".
func ParseDigest(s string) (Digest, error) {
	alg, hx, ok := strings.Cut(s, ":")
	if !ok {
		return Digest{}, fmt.Errorf("digest %q: want ALG:HEX", s)
	}
	d := Digest{Alg: Alg(alg)}
	if d.Alg != SHA256 && d.Alg != BLAKE3 {
		return Digest{}, fmt.Errorf("digest %q: unsupported algorithm %q (want sha256 or blake3)", s, alg)
	}
	if len(hx) != 64 {
		return Digest{}, fmt.Errorf("digest %q: want 64 hex digits, got %d", s, len(hx))
	}
	if strings.ToLower(hx) != hx {
		return Digest{}, fmt.Errorf("digest %q: hex must be lower case", s)
	}
	if _, err := hex.Decode(d.Sum[:], []byte(hx)); err != nil {
		return Digest{}, fmt.Errorf("digest %q: %v", s, err)
	}
	return d, nil
}

// ParseHex parses a bare 64-digit lower-case hex string as a digest of alg.
func ParseHex(alg Alg, hx string) (Digest, error) { return ParseDigest(string(alg) + ":" + hx) }

func (d Digest) Hex() string    { return hex.EncodeToString(d.Sum[:]) }
func (d Digest) String() string { return string(d.Alg) + ":" + d.Hex() }
func (d Digest) IsZero() bool   { return d.Alg == "" }

// Short is the first 12 hex digits, for tables and log lines.
func (d Digest) Short() string { return d.Hex()[:12] }

// Equal compares in constant time.
func (d Digest) Equal(o Digest) bool {
	return d.Alg == o.Alg && subtle.ConstantTimeCompare(d.Sum[:], o.Sum[:]) == 1
}

func (d Digest) MarshalText() ([]byte, error) {
	if d.IsZero() {
		return nil, fmt.Errorf("marshal of an empty digest")
	}
	return []byte(d.String()), nil
}

func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// Digests is the pair of digests Tarfa records for every byte range: SHA-256
// (the interoperable one, also the Hugging Face LFS oid for whole files) and
// BLAKE3 (fast, parallel).
type Digests struct {
	SHA256 Digest
	BLAKE3 Digest
}

// Hasher computes both digests in one pass. It is an io.Writer.
type Hasher struct {
	s hash.Hash
	b *blake3.Hasher
	n int64
}

func NewHasher() *Hasher { return &Hasher{s: sha256simd.New(), b: blake3.New()} }

func (h *Hasher) Write(p []byte) (int, error) {
	h.s.Write(p)
	h.b.Write(p)
	h.n += int64(len(p))
	return len(p), nil
}

// Len is the number of bytes written so far.
func (h *Hasher) Len() int64 { return h.n }

func (h *Hasher) Sum() Digests {
	var d Digests
	d.SHA256.Alg, d.BLAKE3.Alg = SHA256, BLAKE3
	h.s.Sum(d.SHA256.Sum[:0])
	h.b.Sum(d.BLAKE3.Sum[:0])
	return d
}

// SumBytes hashes b with both algorithms.
func SumBytes(b []byte) Digests {
	h := NewHasher()
	h.Write(b)
	return h.Sum()
}

// SHA256Bytes hashes b with SHA-256 only.
func SHA256Bytes(b []byte) Digest {
	d := Digest{Alg: SHA256}
	s := sha256simd.New()
	s.Write(b)
	s.Sum(d.Sum[:0])
	return d
}

// BLAKE3Bytes hashes b with BLAKE3 only.
func BLAKE3Bytes(b []byte) Digest {
	d := Digest{Alg: BLAKE3}
	h := blake3.New()
	h.Write(b)
	h.Sum(d.Sum[:0])
	return d
}

// BLAKE3String hashes s with BLAKE3 only (for bytes held immutable as a
// string).
func BLAKE3String(s string) Digest {
	d := Digest{Alg: BLAKE3}
	h := blake3.New()
	h.WriteString(s)
	h.Sum(d.Sum[:0])
	return d
}

// SumReader hashes everything r yields.
func SumReader(r io.Reader) (Digests, int64, error) {
	h := NewHasher()
	n, err := io.CopyBuffer(h, r, make([]byte, 1<<20))
	return h.Sum(), n, err
}

// MismatchError reports bytes whose digest differs from the expected one.
type MismatchError struct {
	What      string // e.g. "layer 3 expert 17 (layer-003.jnf @ 1048576)"
	Got, Want Digest
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: digest mismatch: got %s, want %s", e.What, e.Got, e.Want)
}

// Is makes a MismatchError match ErrVerification.
func (e *MismatchError) Is(target error) bool { return target == ErrVerification }
