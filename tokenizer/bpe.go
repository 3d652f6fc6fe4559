package tokenizer

import (
	"container/heap"
	"math"
)

// merge is the result of merging an adjacent pair of ids: the merge's rank
// (its line in the merges list; lower merges first) and the id of the result.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// smallWord is the length up to which bpe uses the quadratic scan; above it
// the heap keeps adversarial inputs (one 100 kB "word") at O(n log n).
const smallWord = 48

// bpe merges the byte ids of one pre-tokenized word in place and returns the
// resulting ids (a prefix of syms). At every step it applies the adjacent
// pair with the lowest merge rank, leftmost first, exactly as the Hugging
// Face BPE model does.
func (t *Tokenizer) bpe(syms []int32) []int32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > smallWord {
		return t.bpeHeap(syms)
	}
	var rankBuf [smallWord]merge
	ranks := rankBuf[:len(syms)-1]
	for i := range ranks {
		ranks[i] = t.lookup(syms[i], syms[i+1])
	}
	for {
		best := -1
		bestRank := int32(math.MaxInt32)
		for i, m := range ranks {
			if m.rank < bestRank {
				best, bestRank = i, m.rank
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] = ranks[best].id
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		if best > 0 {
			ranks[best-1] = t.lookup(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best] = t.lookup(syms[best], syms[best+1])
		}
	}
}

var noMerge = merge{rank: math.MaxInt32, id: -1}

func (t *Tokenizer) lookup(a, b int32) merge {
	if m, ok := t.merges[pairKey(a, b)]; ok {
		return m
	}
	return noMerge
}

// bpeHeap is bpe for long words: a doubly linked list of symbols and a heap
// of candidate merges ordered by (rank, position).
func (t *Tokenizer) bpeHeap(syms []int32) []int32 {
	n := len(syms)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := range n {
		prev[i], next[i], alive[i] = int32(i-1), int32(i+1), true
	}
	next[n-1] = -1
	h := &mergeHeap{}
	for i := 0; i+1 < n; i++ {
		if m := t.lookup(syms[i], syms[i+1]); m.id >= 0 {
			h.items = append(h.items, candidate{rank: m.rank, pos: int32(i), left: syms[i], right: syms[i+1]})
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		c := heap.Pop(h).(candidate)
		p := c.pos
		q := next[p]
		// Stale: either side was merged away or changed since the push.
		if !alive[p] || q < 0 || syms[p] != c.left || syms[q] != c.right {
			continue
		}
		m := t.lookup(c.left, c.right)
		syms[p] = m.id
		alive[q] = false
		next[p] = next[q]
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		if pp := prev[p]; pp >= 0 {
			if m := t.lookup(syms[pp], syms[p]); m.id >= 0 {
				heap.Push(h, candidate{rank: m.rank, pos: pp, left: syms[pp], right: syms[p]})
			}
		}
		if nq := next[p]; nq >= 0 {
			if m := t.lookup(syms[p], syms[nq]); m.id >= 0 {
				heap.Push(h, candidate{rank: m.rank, pos: p, left: syms[p], right: syms[nq]})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

type candidate struct {
	rank, pos   int32
	left, right int32
}

type mergeHeap struct{ items []candidate }

func (h *mergeHeap) Len() int { return len(h.items) }
func (h *mergeHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}
func (h *mergeHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *mergeHeap) Push(x any)    { h.items = append(h.items, x.(candidate)) }
func (h *mergeHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
