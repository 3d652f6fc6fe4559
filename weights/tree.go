package weights

import (
	"encoding/binary"
	"math/bits"

	"lukechampine.com/blake3/guts"

	"github.com/tarfa-ai/tarfa/jnf"
)

// BLAKE3 is a binary tree of 1 KiB chunks: the left subtree of a node of n
// chunks holds the largest power of two of them below n, the right one the
// rest, and only the root's compression is flagged as the root. So the
// digest of a record can be computed in parts (a plan): parts of a
// power-of-two number of chunks at multiples of that number are subtrees of
// the record's tree, each hashed on its own (by any goroutine), and their
// nodes combined into the root the way the chunks' would be. The digest is
// the one github.com/zeebo/blake3 computes for the whole record
// (TestTreeMatchesBLAKE3); the compressions are lukechampine.com/blake3's
// (guts: AVX-512 or AVX2 where the CPU has them), which exposes the chunk
// counter and the nodes that one part needs.

const (
	chunkLen = guts.ChunkSize
	groupLen = guts.MaxSIMD * guts.ChunkSize // the chunks one SIMD call compresses
)

// plan splits n bytes (n > 0) into parts of part bytes, the last one
// shorter; part is a power-of-two number of chunks.
type plan struct {
	n, part int64
}

// newPlan splits n bytes into parts of at most max bytes (at least one
// chunk, rounded down to a power-of-two number of chunks); max ≤ 0 or
// max ≥ n: one part.
func newPlan(n, max int64) plan {
	if max <= 0 || max >= n {
		return plan{n: n, part: n}
	}
	c := max / chunkLen
	if c < 1 {
		c = 1
	}
	return plan{n: n, part: chunkLen << (bits.Len64(uint64(c)) - 1)}
}

func (p plan) parts() int { return int((p.n + p.part - 1) / p.part) }

// hash returns the node of part i of data (all n bytes of the record). It
// only reads data.
func (p plan) hash(data []byte, i int) guts.Node {
	lo := int64(i) * p.part
	hi := min(lo+p.part, p.n)
	return subtree(data[lo:hi], uint64(lo/chunkLen))
}

// sum combines the parts' nodes (in order) into the record's digest.
func (p plan) sum(nodes []guts.Node) jnf.Digest {
	root := combine(nodes)
	root.Flags |= guts.FlagRoot
	w := guts.CompressNode(root)
	d := jnf.Digest{Alg: jnf.BLAKE3}
	for i := range 8 {
		binary.LittleEndian.PutUint32(d.Sum[4*i:], w[i])
	}
	return d
}

// combine is the tree over the nodes of consecutive subtrees of equal
// power-of-two size (the last one smaller), shaped as BLAKE3's over
// chunks: the left side holds the largest power of two below len(nodes).
func combine(nodes []guts.Node) guts.Node {
	if len(nodes) == 1 {
		return nodes[0]
	}
	left := 1 << (bits.Len(uint(len(nodes)-1)) - 1)
	return guts.ParentNode(guts.ChainingValue(combine(nodes[:left])), guts.ChainingValue(combine(nodes[left:])), &guts.IV, 0)
}

// subtree is the node of data as the subtree of the record's tree that
// starts at chunk counter: a whole number of chunks that is a power of
// two at a multiple of it, or the record's last chunks (the right edge).
func subtree(data []byte, counter uint64) guts.Node {
	m := max(1, (uint64(len(data))+chunkLen-1)/chunkLen)
	if m == 1 {
		return guts.CompressChunk(data, &guts.IV, counter, 0)
	}
	if m <= guts.MaxSIMD {
		var g *[groupLen]byte
		if len(data) >= groupLen {
			g = (*[groupLen]byte)(data[:groupLen])
		} else {
			// The record's last chunks: the SIMD code reads a whole group.
			var tail [groupLen]byte
			copy(tail[:], data)
			g = &tail
		}
		return guts.CompressBuffer(g, len(data), &guts.IV, counter, 0)
	}
	left := uint64(1) << (bits.Len64(m-1) - 1)
	l := guts.ChainingValue(subtree(data[:left*chunkLen], counter))
	r := guts.ChainingValue(subtree(data[left*chunkLen:], counter+left))
	return guts.ParentNode(l, r, &guts.IV, 0)
}
