// Package verify re-derives Tarfa's integrity claims from raw bytes. This
// file describes the Merkle tree that identifies a model: the manifest's root.
// The text below is normative and may be copied into the format
// specification as is.
//
// # Merkle tree
//
// The tree is the Merkle Hash Tree of RFC 6962 §2.1 (Certificate
// Transparency; unchanged in RFC 9162 §2.1.1) instantiated with SHA-256
// (FIPS 180-4). All hashes are 32 bytes. "‖" is byte concatenation and
// 0x00, 0x01 are single bytes.
//
// Input: an ordered list of n ≥ 0 leaves D[0:n], each a byte string of any
// length (possibly empty). The order is significant; the caller (the manifest
// format) defines it.
//
// Leaf hash of one leaf d:
//
//	LEAF(d) = SHA-256(0x00 ‖ d)
//
// Interior node hash of two children whose hashes are l and r:
//
//	NODE(l, r) = SHA-256(0x01 ‖ l ‖ r)       (65 bytes hashed)
//
// Merkle Tree Hash MTH of D[0:n]:
//
//	MTH({})       = SHA-256("")   (zero bytes hashed; e3b0c442…7852b855)
//	MTH({d})      = LEAF(d)
//	MTH(D[0:n])   = NODE(MTH(D[0:k]), MTH(D[k:n]))   for n > 1,
//
// where k is the largest power of two strictly less than n (so 1 ≤ k < n,
// and n/2 ≤ k < n). The root is MTH(D[0:n]).
//
// Consequences worth stating: the tree is left-heavy, not padded; an
// unpaired node is never duplicated nor hashed with itself, it is promoted
// unchanged to the next level; the 0x00/0x01 prefixes keep a leaf from being
// mistaken for an interior node (second-preimage resistance); the root of a
// one-leaf tree is that leaf's hash, not the leaf itself. Two lists of leaves
// have the same root only if they have the same length and the same leaves
// in the same order (barring a SHA-256 collision).
//
// Equivalently, and as this package computes it: start from the n leaf
// hashes; while more than one hash remains, replace each adjacent pair
// (positions 2i, 2i+1) by NODE of the pair, and move an unpaired last hash up
// unchanged. The single hash left is the root.
//
// # Inclusion proofs
//
// The inclusion proof (audit path) of leaf m in a tree of size n is
// PATH(m, D[0:n]) of RFC 6962 §2.1.1: the list of sibling subtree hashes
// from the leaf's level up to the root, nearest sibling first:
//
//	PATH(0, {d})    = {}
//	PATH(m, D[0:n]) = PATH(m, D[0:k])   ‖ MTH(D[k:n])   if m < k
//	PATH(m, D[0:n]) = PATH(m−k, D[k:n]) ‖ MTH(D[0:k])   if m ≥ k
//
// with k as above. A verifier recomputes the root from LEAF(d), m, n and
// the path with the algorithm of RFC 9162 §2.1.3.2 and compares it with the
// trusted root; a proof whose length differs from the one the (m, n) shape
// requires is rejected before any hashing.
//
// A proof binds the leaf's position (any other index fails) but not, on its
// own, the tree size: the path of leaf 0 in a tree of 3 also verifies as
// leaf 0 of a tree of 4 against the same root, because every sibling is on
// the right either way. The verifier must take n from the same trusted
// source as the root (the signed manifest), never from the proof's sender.
//
// # Test vectors
//
// The leaves of the Certificate Transparency reference tests (hex) "", 00,
// 10, 2021, 3031, 40414243, 5051525354555657,
// 606162636465666768696a6b6c6d6e6f give, for their first n leaves:
//
//	n=1  6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
//	n=8  5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328
//
// merkle_test.go checks all sizes 0 to 8 and the published audit paths.
package verify
