package policy

// ixheap is a binary heap of dense indices with O(log n) removal and update
// of any member. first(a, b) says a must come out before b; it must be a
// strict order (ties broken by index) so that victims are deterministic.
// The arrays are sized once: no allocation after construction.
type ixheap struct {
	h     []int32
	pos   []int32 // position in h plus one; 0: absent
	first func(a, b int32) bool
}

func newHeap(n int, first func(a, b int32) bool) ixheap {
	return ixheap{h: make([]int32, 0, n), pos: make([]int32, n), first: first}
}

func (x *ixheap) has(i int32) bool { return x.pos[i] != 0 }

func (x *ixheap) top() (int32, bool) {
	if len(x.h) == 0 {
		return 0, false
	}
	return x.h[0], true
}

func (x *ixheap) push(i int32) {
	x.h = append(x.h, i)
	x.pos[i] = int32(len(x.h))
	x.up(len(x.h) - 1)
}

func (x *ixheap) remove(i int32) {
	p := int(x.pos[i]) - 1
	last := len(x.h) - 1
	if p != last {
		x.swap(p, last)
	}
	x.h = x.h[:last]
	x.pos[i] = 0
	if p != last {
		x.fixAt(p)
	}
}

// heapify restores the order after the keys of any members changed.
func (x *ixheap) heapify() {
	for j := len(x.h)/2 - 1; j >= 0; j-- {
		x.down(j)
	}
}

// fix restores the order after the key of member i changed.
func (x *ixheap) fix(i int32) { x.fixAt(int(x.pos[i]) - 1) }

func (x *ixheap) fixAt(p int) {
	if !x.down(p) {
		x.up(p)
	}
}

func (x *ixheap) swap(a, b int) {
	x.h[a], x.h[b] = x.h[b], x.h[a]
	x.pos[x.h[a]] = int32(a + 1)
	x.pos[x.h[b]] = int32(b + 1)
}

func (x *ixheap) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !x.first(x.h[j], x.h[p]) {
			return
		}
		x.swap(j, p)
		j = p
	}
}

func (x *ixheap) down(i int) bool {
	j := i
	n := len(x.h)
	for {
		c := 2*j + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && x.first(x.h[r], x.h[c]) {
			c = r
		}
		if !x.first(x.h[c], x.h[j]) {
			break
		}
		x.swap(j, c)
		j = c
	}
	return j > i
}

// lists is a set of doubly linked lists over dense indices 0..n-1, one per
// sentinel n..n+k-1: each index is on at most one list.
type lists struct {
	prev, next []int32
	n          int32
}

func newLists(n, k int) lists {
	l := lists{prev: make([]int32, n+k), next: make([]int32, n+k), n: int32(n)}
	for i := range l.prev {
		l.prev[i], l.next[i] = -1, -1
	}
	for s := n; s < n+k; s++ {
		l.prev[s], l.next[s] = int32(s), int32(s)
	}
	return l
}

func (l *lists) linked(i int32) bool { return l.next[i] >= 0 }

// pushFront puts i at the front (most recent end) of list k.
func (l *lists) pushFront(k int, i int32) {
	s := l.n + int32(k)
	f := l.next[s]
	l.next[s], l.prev[i], l.next[i], l.prev[f] = i, s, f, i
}

func (l *lists) unlink(i int32) {
	p, n := l.prev[i], l.next[i]
	l.next[p], l.prev[n] = n, p
	l.prev[i], l.next[i] = -1, -1
}

// back is the last (least recent) member of list k.
func (l *lists) back(k int) (int32, bool) {
	s := l.n + int32(k)
	b := l.prev[s]
	return b, b != s
}

// lheap orders the experts of every layer in a heap of that layer (over
// local indices 0..Experts-1) and the layers by their first experts, so that
// a key shared by all experts of a layer (its last run) can change in
// O(log layers). within orders two experts of one layer, cross the first
// experts of two layers; both take dense indices.
type lheap struct {
	experts int32
	hs      []ixheap
	lh      ixheap
}

func newLHeap(d Dims, within, cross func(a, b int32) bool) lheap {
	x := lheap{experts: int32(d.Experts), hs: make([]ixheap, d.Layers)}
	for l := range x.hs {
		off := int32(l) * x.experts
		x.hs[l] = newHeap(d.Experts, func(a, b int32) bool { return within(off+a, off+b) })
	}
	x.lh = newHeap(d.Layers, func(a, b int32) bool {
		return cross(a*x.experts+x.hs[a].h[0], b*x.experts+x.hs[b].h[0])
	})
	return x
}

func (x *lheap) split(i int32) (int32, int32) { return i / x.experts, i % x.experts }

func (x *lheap) has(i int32) bool { l, e := x.split(i); return x.hs[l].has(e) }

func (x *lheap) push(i int32) {
	l, e := x.split(i)
	x.hs[l].push(e)
	x.refresh(l)
}

func (x *lheap) remove(i int32) {
	l, e := x.split(i)
	x.hs[l].remove(e)
	x.refresh(l)
}

func (x *lheap) fix(i int32) {
	l, e := x.split(i)
	x.hs[l].fix(e)
	x.refresh(l)
}

// refresh restores the order of the layers after layer l changed.
func (x *lheap) refresh(l int32) {
	switch nonEmpty, in := len(x.hs[l].h) > 0, x.lh.has(l); {
	case nonEmpty && in:
		x.lh.fix(l)
	case nonEmpty:
		x.lh.push(l)
	case in:
		x.lh.remove(l)
	}
}

func (x *lheap) top() (int32, bool) {
	l, ok := x.lh.top()
	if !ok {
		return 0, false
	}
	return l*x.experts + x.hs[l].h[0], true
}
