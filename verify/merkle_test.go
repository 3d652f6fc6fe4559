package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

// The Certificate Transparency reference vectors, as published in
// transparency-dev/merkle proof/verify_test.go (from the C++ CT reference
// implementation): the leaf data and the roots of the trees of the first
// 1..8 leaves.
var (
	ctLeaves = []string{
		"", "00", "10", "2021", "3031", "40414243",
		"5051525354555657", "606162636465666768696a6b6c6d6e6f",
	}
	ctRoots = []string{
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
	// Audit paths from the same file. The reference numbers leaves from 1;
	// index here is 0-based (reference leaf 1 of 8 is index 0).
	ctPaths = []struct {
		index, size int
		path        []string
	}{
		{0, 1, nil},
		{0, 8, []string{
			"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
			"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
			"6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
		}},
		{5, 8, []string{
			"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
			"ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
			"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		}},
		{2, 3, []string{
			"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		}},
		{1, 5, []string{
			"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
			"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
			"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
		}},
	}
)

func mustHex32(t testing.TB, s string) [32]byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad test hash %q: %v (len %d)", s, err, len(b))
	}
	return [32]byte(b)
}

func ctLeafHashes(t testing.TB) [][32]byte {
	t.Helper()
	out := make([][32]byte, len(ctLeaves))
	for i, s := range ctLeaves {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = LeafHash(b)
	}
	return out
}

func hx(h [32]byte) string { return hex.EncodeToString(h[:]) }

// Hash vectors from transparency-dev/merkle rfc6962/rfc6962_test.go.
func TestHashVectors(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  [32]byte
		want string
	}{
		{"empty root", EmptyRoot(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"empty leaf", LeafHash(nil), "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"},
		{"leaf L123456", LeafHash([]byte("L123456")), "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"},
	} {
		if hx(tc.got) != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, hx(tc.got), tc.want)
		}
	}
	// NODE is SHA-256 over exactly 0x01 ‖ l ‖ r (checked against crypto/sha256).
	l, r := LeafHash([]byte("l")), LeafHash([]byte("r"))
	want := sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
	if got := NodeHash(l, r); got != want {
		t.Errorf("NodeHash: got %s, want %s", hx(got), hx(want))
	}
	if NodeHash(l, r) == NodeHash(r, l) {
		t.Error("NodeHash does not depend on the order of its children")
	}
	if LeafHash(append(l[:], r[:]...)) == NodeHash(l, r) {
		t.Error("a leaf of 64 bytes hashes like the interior node over them")
	}
}

func TestRootVectors(t *testing.T) {
	leaves := ctLeafHashes(t)
	if got := RootFromLeafHashes(nil); hx(got) != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("size 0: got %s, want SHA-256 of the empty string", hx(got))
	}
	for n := 1; n <= len(leaves); n++ {
		want := ctRoots[n-1]
		if got := RootFromLeafHashes(leaves[:n]); hx(got) != want {
			t.Errorf("RootFromLeafHashes size %d: got %s, want %s", n, hx(got), want)
		}
		if got := NewTree(leaves[:n]).Root(); hx(got) != want {
			t.Errorf("NewTree size %d: got %s, want %s", n, hx(got), want)
		}
	}
}

func TestInclusionProofVectors(t *testing.T) {
	leaves := ctLeafHashes(t)
	for _, tc := range ctPaths {
		proof, err := InclusionProof(leaves[:tc.size], tc.index)
		if err != nil {
			t.Fatalf("leaf %d of %d: %v", tc.index, tc.size, err)
		}
		if len(proof) != len(tc.path) {
			t.Fatalf("leaf %d of %d: got %d hashes, want %d", tc.index, tc.size, len(proof), len(tc.path))
		}
		for i := range proof {
			if hx(proof[i]) != tc.path[i] {
				t.Errorf("leaf %d of %d: proof[%d] = %s, want %s", tc.index, tc.size, i, hx(proof[i]), tc.path[i])
			}
		}
		root := mustHex32(t, ctRoots[tc.size-1])
		if err := VerifyInclusion(leaves[tc.index], tc.index, tc.size, proof, root); err != nil {
			t.Errorf("leaf %d of %d: reference proof rejected: %v", tc.index, tc.size, err)
		}
	}
}

// mth and path are the recursive definitions of RFC 6962 §2.1, written as
// directly as possible, as the reference for the iterative code.
func mth(d [][32]byte) [32]byte {
	switch len(d) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return d[0]
	}
	k := splitPoint(len(d))
	return NodeHash(mth(d[:k]), mth(d[k:]))
}

func path(m int, d [][32]byte) [][32]byte {
	if len(d) == 1 {
		return nil
	}
	k := splitPoint(len(d))
	if m < k {
		return append(path(m, d[:k]), mth(d[k:]))
	}
	return append(path(m-k, d[k:]), mth(d[:k]))
}

// splitPoint is the largest power of two strictly less than n (n > 1).
func splitPoint(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

func syntheticLeaves(n int) [][32]byte {
	out := make([][32]byte, n)
	var b [8]byte
	for i := range out {
		binary.BigEndian.PutUint64(b[:], uint64(i)*0x9e3779b97f4a7c15)
		out[i] = LeafHash(b[:])
	}
	return out
}

func TestIterativeMatchesRecursiveDefinition(t *testing.T) {
	all := syntheticLeaves(300)
	for n := 0; n <= len(all); n++ {
		want := mth(all[:n])
		if got := RootFromLeafHashes(all[:n]); got != want {
			t.Fatalf("RootFromLeafHashes size %d: got %s, want %s", n, hx(got), hx(want))
		}
		tree := NewTree(all[:n])
		if got := tree.Root(); got != want {
			t.Fatalf("Tree.Root size %d: got %s, want %s", n, hx(got), hx(want))
		}
		if tree.Size() != n {
			t.Fatalf("Tree.Size: got %d, want %d", tree.Size(), n)
		}
		if n > 70 {
			continue
		}
		for m := 0; m < n; m++ {
			got, err := tree.InclusionProof(m)
			if err != nil {
				t.Fatalf("leaf %d of %d: %v", m, n, err)
			}
			want := path(m, all[:n])
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("leaf %d of %d: proof differs from PATH(m, D[n])", m, n)
			}
			if len(got) != proofLen(m, n) {
				t.Fatalf("leaf %d of %d: proofLen %d, proof has %d", m, n, proofLen(m, n), len(got))
			}
		}
	}
}

func TestRootFromLeafHashesDoesNotModifyInput(t *testing.T) {
	leaves := syntheticLeaves(37)
	before := fmt.Sprint(leaves)
	RootFromLeafHashes(leaves)
	NewTree(leaves)
	if fmt.Sprint(leaves) != before {
		t.Fatal("leaf slice modified")
	}
}

// TestInclusionRoundTripAndTampering proves and verifies every leaf of every
// tree of 1..70 leaves, and checks that each kind of tampering is rejected.
func TestInclusionRoundTripAndTampering(t *testing.T) {
	all := syntheticLeaves(70)
	other := LeafHash([]byte("not a leaf of this tree"))
	verified, rejected := 0, 0
	reject := func(what string, n, m int, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("leaf %d of %d: %s accepted", m, n, what)
		}
		if !errors.Is(err, ErrInvalidProof) {
			t.Fatalf("leaf %d of %d: %s: error %v does not match ErrInvalidProof", m, n, what, err)
		}
		rejected++
	}
	for n := 1; n <= len(all); n++ {
		leaves := all[:n]
		tree := NewTree(leaves)
		root := tree.Root()
		for m := 0; m < n; m++ {
			proof, err := InclusionProof(leaves, m)
			if err != nil {
				t.Fatalf("leaf %d of %d: %v", m, n, err)
			}
			if err := VerifyInclusion(leaves[m], m, n, proof, root); err != nil {
				t.Fatalf("leaf %d of %d: valid proof rejected: %v", m, n, err)
			}
			verified++

			// Every single-bit flip in every proof element is a root mismatch.
			for i := range proof {
				for bit := 0; bit < 256; bit += 37 {
					bad := append([][32]byte(nil), proof...)
					bad[i][bit/8] ^= 1 << (bit % 8)
					err := VerifyInclusion(leaves[m], m, n, bad, root)
					var rm *RootMismatchError
					if !errors.As(err, &rm) {
						t.Fatalf("leaf %d of %d: proof[%d] bit %d flipped: got %v, want *RootMismatchError", m, n, i, bit, err)
					}
					rejected++
				}
			}
			// Wrong leaf, wrong root.
			reject("wrong leaf", n, m, VerifyInclusion(other, m, n, proof, root))
			reject("wrong root", n, m, VerifyInclusion(leaves[m], m, n, proof, EmptyRoot()))
			// Every other index: the position of a leaf is bound by the proof.
			for j := 0; j < n; j++ {
				if j != m {
					reject(fmt.Sprintf("index %d", j), n, m, VerifyInclusion(leaves[m], j, n, proof, root))
				}
			}
			reject("index -1", n, m, VerifyInclusion(leaves[m], -1, n, proof, root))
			reject("index = size", n, m, VerifyInclusion(leaves[m], n, n, proof, root))
			// Truncated, extended and reordered proofs.
			if len(proof) > 0 {
				reject("truncated proof", n, m, VerifyInclusion(leaves[m], m, n, proof[:len(proof)-1], root))
			}
			reject("trailing root", n, m, VerifyInclusion(leaves[m], m, n, append(append([][32]byte(nil), proof...), root), root))
			reject("preceding root", n, m, VerifyInclusion(leaves[m], m, n, append([][32]byte{root}, proof...), root))
			if len(proof) > 1 && proof[0] != proof[1] {
				bad := append([][32]byte(nil), proof...)
				bad[0], bad[1] = bad[1], bad[0]
				reject("swapped proof[0] and proof[1]", n, m, VerifyInclusion(leaves[m], m, n, bad, root))
			}
			// Doubled size (the tree size must come from a trusted source,
			// see the package doc, but a doubled one is always caught).
			reject("size*2", n, m, VerifyInclusion(leaves[m], m, 2*n, proof, root))
			if m < n/2 {
				reject("size/2", n, m, VerifyInclusion(leaves[m], m, n/2, proof, root))
			}
		}
	}
	if verified != 70*71/2 {
		t.Fatalf("verified %d proofs, want %d", verified, 70*71/2)
	}
	t.Logf("%d valid proofs verified, %d tampered variants rejected", verified, rejected)
}

// TestProofDoesNotPinSize pins down the documented limitation: the audit
// path of leaf 0 in a tree of 3 also verifies as leaf 0 of a tree of 4
// against the same root, so the size must come from the trusted manifest.
func TestProofDoesNotPinSize(t *testing.T) {
	leaves := syntheticLeaves(3)
	root := RootFromLeafHashes(leaves)
	proof, err := InclusionProof(leaves, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyInclusion(leaves[0], 0, 4, proof, root); err != nil {
		t.Fatalf("expected the size-3 proof to verify as size 4 (documented), got %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	leaves := syntheticLeaves(5)
	for _, idx := range []int{-1, 5, 100} {
		if _, err := InclusionProof(leaves, idx); err == nil {
			t.Errorf("InclusionProof(5 leaves, %d): no error", idx)
		}
		if _, err := NewTree(leaves).InclusionProof(idx); err == nil {
			t.Errorf("Tree.InclusionProof(%d): no error", idx)
		}
	}
	if _, err := InclusionProof(nil, 0); err == nil {
		t.Error("InclusionProof on the empty tree: no error")
	}
	for _, tc := range []struct{ index, size int }{{0, 0}, {0, -1}, {-1, 1}, {1, 1}} {
		err := VerifyInclusion(leaves[0], tc.index, tc.size, nil, leaves[0])
		if !errors.Is(err, ErrInvalidProof) {
			t.Errorf("VerifyInclusion(index %d, size %d): got %v, want ErrInvalidProof", tc.index, tc.size, err)
		}
	}
	// Size 1: the root is the leaf hash and the proof is empty.
	if err := VerifyInclusion(leaves[0], 0, 1, nil, leaves[0]); err != nil {
		t.Errorf("single leaf: %v", err)
	}
	err := VerifyInclusion(leaves[0], 0, 1, nil, leaves[1])
	var rm *RootMismatchError
	if !errors.As(err, &rm) || rm.Got != leaves[0] || rm.Want != leaves[1] {
		t.Errorf("single leaf, wrong root: got %v, want RootMismatchError with got/want", err)
	}
}

// TestLargeTree exercises the size the manifest works at (~100k entries).
func TestLargeTree(t *testing.T) {
	const n = 100_003
	leaves := syntheticLeaves(n)
	tree := NewTree(leaves)
	root := RootFromLeafHashes(leaves)
	if tree.Root() != root {
		t.Fatalf("Tree.Root %s != RootFromLeafHashes %s", hx(tree.Root()), hx(root))
	}
	for _, m := range []int{0, 1, 65535, 65536, 99_999, n - 2, n - 1} {
		proof, err := tree.InclusionProof(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyInclusion(leaves[m], m, n, proof, root); err != nil {
			t.Errorf("leaf %d of %d: %v", m, n, err)
		}
		if len(proof) > 17 {
			t.Errorf("leaf %d of %d: proof of %d hashes, want ≤ 17", m, n, len(proof))
		}
	}
}

func BenchmarkRoot100k(b *testing.B) {
	leaves := syntheticLeaves(100_000)
	b.ResetTimer()
	for range b.N {
		RootFromLeafHashes(leaves)
	}
}
