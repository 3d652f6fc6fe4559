package verify

import (
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	sha256simd "github.com/minio/sha256-simd"
)

// HashSize is the size in bytes of every hash in the tree: leaf hashes,
// interior node hashes, roots and proof elements (SHA-256).
const HashSize = 32

// Domain-separation prefixes of RFC 6962 §2.1: a leaf hash and an interior
// node hash can never be confused for one another.
const (
	leafPrefix = 0x00
	nodePrefix = 0x01
)

// ErrInvalidProof is matched (with errors.Is) by every error that
// VerifyInclusion returns: malformed arguments, a proof of the wrong length,
// and a proof that leads to a different root.
var ErrInvalidProof = errors.New("invalid Merkle inclusion proof")

// RootMismatchError reports an inclusion proof that is well formed but whose
// recomputed root differs from the expected one.
type RootMismatchError struct {
	Index, Size int      // the leaf index and tree size the proof was checked for
	Got, Want   [32]byte // recomputed and expected root
}

func (e *RootMismatchError) Error() string {
	return fmt.Sprintf("%v: leaf %d of %d: root mismatch: got %s, want %s",
		ErrInvalidProof, e.Index, e.Size, hex.EncodeToString(e.Got[:]), hex.EncodeToString(e.Want[:]))
}

// Is makes errors.Is(err, ErrInvalidProof) true.
func (e *RootMismatchError) Is(target error) bool { return target == ErrInvalidProof }

// LeafHash is SHA-256(0x00 ‖ data), the RFC 6962 hash of one leaf.
func LeafHash(data []byte) [32]byte {
	h := sha256simd.New()
	h.Write([]byte{leafPrefix})
	h.Write(data)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// NodeHash is SHA-256(0x01 ‖ left ‖ right), the RFC 6962 hash of an interior
// node whose children hash to left and right.
func NodeHash(left, right [32]byte) [32]byte {
	var buf [1 + 2*HashSize]byte
	buf[0] = nodePrefix
	copy(buf[1:], left[:])
	copy(buf[1+HashSize:], right[:])
	return sha256simd.Sum256(buf[:])
}

// EmptyRoot is the root of the tree with no leaves: SHA-256 of the empty
// string, e3b0c442…b855.
func EmptyRoot() [32]byte { return sha256simd.Sum256(nil) }

// RootFromLeafHashes returns the RFC 6962 Merkle Tree Hash of the leaves,
// given as leaf hashes (see LeafHash), in order.
//
// It works bottom-up in one buffer of len(leaves) hashes: at every level
// adjacent pairs are combined with NodeHash and an unpaired last node moves
// up unchanged. That yields the same tree as the recursive definition, whose
// split point k (the largest power of two below n) is always a multiple of
// every level's pair width. The leaves slice is not modified.
func RootFromLeafHashes(leaves [][32]byte) [32]byte {
	switch len(leaves) {
	case 0:
		return EmptyRoot()
	case 1:
		return leaves[0]
	}
	level := make([][32]byte, len(leaves))
	copy(level, leaves)
	for n := len(level); n > 1; n = (n + 1) / 2 {
		for i := 0; i < n/2; i++ {
			level[i] = NodeHash(level[2*i], level[2*i+1])
		}
		if n%2 == 1 {
			level[n/2] = level[n-1]
		}
	}
	return level[0]
}

// Tree holds every level of a Merkle tree so that many inclusion proofs can
// be produced without rehashing: about 2·n hashes of memory for n leaves.
type Tree struct {
	// levels[0] are the leaf hashes; levels[len-1] holds the root alone.
	// Empty for the empty tree.
	levels [][][32]byte
}

// NewTree builds the tree over the given leaf hashes. It keeps its own copy.
func NewTree(leaves [][32]byte) *Tree {
	if len(leaves) == 0 {
		return &Tree{}
	}
	cur := make([][32]byte, len(leaves))
	copy(cur, leaves)
	levels := [][][32]byte{cur}
	for len(cur) > 1 {
		next := make([][32]byte, (len(cur)+1)/2)
		for i := 0; i < len(cur)/2; i++ {
			next[i] = NodeHash(cur[2*i], cur[2*i+1])
		}
		if len(cur)%2 == 1 {
			next[len(next)-1] = cur[len(cur)-1]
		}
		levels = append(levels, next)
		cur = next
	}
	return &Tree{levels: levels}
}

// Size is the number of leaves.
func (t *Tree) Size() int {
	if len(t.levels) == 0 {
		return 0
	}
	return len(t.levels[0])
}

// Root is the Merkle Tree Hash; EmptyRoot for a tree without leaves.
func (t *Tree) Root() [32]byte {
	if len(t.levels) == 0 {
		return EmptyRoot()
	}
	return t.levels[len(t.levels)-1][0]
}

// InclusionProof returns the RFC 6962 §2.1.1 audit path PATH(index, D[n]) for
// the leaf at index: the sibling hashes from the leaf level up to the root.
// A tree of one leaf has an empty proof.
func (t *Tree) InclusionProof(index int) ([][32]byte, error) {
	n := t.Size()
	if index < 0 || index >= n {
		return nil, fmt.Errorf("inclusion proof for leaf %d: tree has %d leaves (want 0 ≤ index < %d)", index, n, n)
	}
	proof := make([][32]byte, 0, proofLen(index, n))
	i := index
	for _, level := range t.levels[:len(t.levels)-1] {
		if sib := i ^ 1; sib < len(level) {
			proof = append(proof, level[sib])
		}
		i >>= 1
	}
	return proof, nil
}

// InclusionProof returns the audit path for leaves[index]; see
// Tree.InclusionProof. It builds the whole tree: to produce many proofs over
// the same leaves, build a Tree once with NewTree.
func InclusionProof(leaves [][32]byte, index int) ([][32]byte, error) {
	if index < 0 || index >= len(leaves) {
		return nil, fmt.Errorf("inclusion proof for leaf %d: tree has %d leaves (want 0 ≤ index < %d)", index, len(leaves), len(leaves))
	}
	return NewTree(leaves).InclusionProof(index)
}

// proofLen is the number of hashes in the audit path of leaf index in a tree
// of size leaves (0 ≤ index < size): one per level at which the node on the
// path has a sibling.
func proofLen(index, size int) int {
	n := 0
	for i, m := index, size; m > 1; i, m = i>>1, (m+1)/2 {
		if i^1 < m {
			n++
		}
	}
	return n
}

// RootFromInclusionProof recomputes the root of a tree of size leaves from the
// hash of the leaf at index and its audit path, following RFC 9162
// §2.1.3.2. It checks the arguments and the proof length but not the result;
// use VerifyInclusion to compare against a known root.
func RootFromInclusionProof(leafHash [32]byte, index, size int, proof [][32]byte) ([32]byte, error) {
	if size <= 0 || index < 0 || index >= size {
		return [32]byte{}, fmt.Errorf("%w: leaf index %d out of range for tree size %d", ErrInvalidProof, index, size)
	}
	if want := proofLen(index, size); len(proof) != want {
		return [32]byte{}, fmt.Errorf("%w: leaf %d of %d: proof has %d hashes, want %d", ErrInvalidProof, index, size, len(proof), want)
	}
	fn, sn := uint64(index), uint64(size-1)
	r := leafHash
	for _, p := range proof {
		if sn == 0 { // unreachable after the length check; kept from the RFC
			return [32]byte{}, fmt.Errorf("%w: leaf %d of %d: proof too long", ErrInvalidProof, index, size)
		}
		if fn&1 == 1 || fn == sn {
			r = NodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = NodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return [32]byte{}, fmt.Errorf("%w: leaf %d of %d: proof too short", ErrInvalidProof, index, size)
	}
	return r, nil
}

// VerifyInclusion checks that leafHash is the leaf at index in the tree of
// size leaves whose root is root, using the audit path proof (RFC 9162
// §2.1.3.2). Every failure matches errors.Is(err, ErrInvalidProof); a wrong
// root is a *RootMismatchError. The root comparison is constant-time.
func VerifyInclusion(leafHash [32]byte, index, size int, proof [][32]byte, root [32]byte) error {
	got, err := RootFromInclusionProof(leafHash, index, size, proof)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got[:], root[:]) != 1 {
		return &RootMismatchError{Index: index, Size: size, Got: got, Want: root}
	}
	return nil
}
