package canon

// TopK selects the k largest values exactly as torch.topk(p, k, sorted=True)
// does on CPU (aten/src/ATen/native/TopKImpl.h, MODEL_SPEC §C.5.2): pairs
// (p[i], i) in index order, then, if k·64 <= n, std::partial_sort, else
// std::nth_element(begin, begin+k−1, end) followed by
// std::sort(begin, begin+k−1), all with comp(a, b) = a.v > b.v (NaN counts
// as largest), using libstdc++'s algorithms, which fix the order of ties.
// A TopK value holds scratch space and is not safe for concurrent use.
type TopK struct{ a []pair }

type pair struct {
	v float32
	i int32
}

func isNaN(f float32) bool { return f != f }

// greater is torch's comparator for largest=True.
func greater(x, y pair) bool { return (isNaN(x.v) && !isNaN(y.v)) || x.v > y.v }

// Select writes the indices of the k largest entries of p, in torch's output
// order, to idx[:k]. It panics unless 0 < k <= len(p) and len(idx) >= k.
func (t *TopK) Select(p []float32, k int, idx []int32) {
	n := len(p)
	if k <= 0 || k > n || len(idx) < k {
		panic("canon: TopK.Select: bad k")
	}
	if cap(t.a) < n {
		t.a = make([]pair, n)
	}
	a := t.a[:n]
	for i, v := range p {
		a[i] = pair{v, int32(i)}
	}
	if k*64 <= n {
		partialSort(a, 0, k, n)
	} else {
		nthElement(a, 0, k-1, n)
		introSort(a, 0, k-1)
	}
	for i := 0; i < k; i++ {
		idx[i] = a[i].i
	}
}

// lg is floor(log2(n)) for n > 0 (std::__lg).
func lg(n int) int {
	r := -1
	for n > 0 {
		n >>= 1
		r++
	}
	return r
}

// nthElement is std::nth_element (std::__introselect).
func nthElement(a []pair, first, nth, last int) {
	if first == last || nth == last {
		return
	}
	depth := 2 * lg(last-first)
	for last-first > 3 {
		if depth == 0 {
			heapSelect(a, first, nth+1, last)
			a[first], a[nth] = a[nth], a[first]
			return
		}
		depth--
		cut := unguardedPartitionPivot(a, first, last)
		if cut <= nth {
			first = cut
		} else {
			last = cut
		}
	}
	insertionSort(a, first, last)
}

// introSort is std::sort (std::__introsort_loop + std::__final_insertion_sort).
func introSort(a []pair, first, last int) {
	if first == last {
		return
	}
	introsortLoop(a, first, last, 2*lg(last-first))
	finalInsertionSort(a, first, last)
}

const sortThreshold = 16

func introsortLoop(a []pair, first, last, depth int) {
	for last-first > sortThreshold {
		if depth == 0 {
			partialSort(a, first, last, last)
			return
		}
		depth--
		cut := unguardedPartitionPivot(a, first, last)
		introsortLoop(a, cut, last, depth)
		last = cut
	}
}

func finalInsertionSort(a []pair, first, last int) {
	if last-first > sortThreshold {
		insertionSort(a, first, first+sortThreshold)
		for i := first + sortThreshold; i < last; i++ {
			unguardedLinearInsert(a, i)
		}
	} else {
		insertionSort(a, first, last)
	}
}

func unguardedPartitionPivot(a []pair, first, last int) int {
	mid := first + (last-first)/2
	moveMedianToFirst(a, first, first+1, mid, last-1)
	return unguardedPartition(a, first+1, last, first)
}

func moveMedianToFirst(a []pair, result, x, y, z int) {
	var m int
	if greater(a[x], a[y]) {
		if greater(a[y], a[z]) {
			m = y
		} else if greater(a[x], a[z]) {
			m = z
		} else {
			m = x
		}
	} else if greater(a[x], a[z]) {
		m = x
	} else if greater(a[y], a[z]) {
		m = z
	} else {
		m = y
	}
	a[result], a[m] = a[m], a[result]
}

func unguardedPartition(a []pair, first, last, pivot int) int {
	for {
		for greater(a[first], a[pivot]) {
			first++
		}
		last--
		for greater(a[pivot], a[last]) {
			last--
		}
		if !(first < last) {
			return first
		}
		a[first], a[last] = a[last], a[first]
		first++
	}
}

func insertionSort(a []pair, first, last int) {
	if first == last {
		return
	}
	for i := first + 1; i < last; i++ {
		if greater(a[i], a[first]) {
			v := a[i]
			copy(a[first+1:i+1], a[first:i])
			a[first] = v
		} else {
			unguardedLinearInsert(a, i)
		}
	}
}

func unguardedLinearInsert(a []pair, last int) {
	v := a[last]
	next := last - 1
	for greater(v, a[next]) {
		a[last] = a[next]
		last = next
		next--
	}
	a[last] = v
}

// partialSort is std::partial_sort (std::__heap_select + std::__sort_heap).
func partialSort(a []pair, first, middle, last int) {
	heapSelect(a, first, middle, last)
	sortHeap(a, first, middle)
}

func heapSelect(a []pair, first, middle, last int) {
	makeHeap(a, first, middle)
	for i := middle; i < last; i++ {
		if greater(a[i], a[first]) {
			popHeap(a, first, middle, i)
		}
	}
}

func makeHeap(a []pair, first, last int) {
	n := last - first
	if n < 2 {
		return
	}
	for parent := (n - 2) / 2; ; parent-- {
		adjustHeap(a, first, parent, n, a[first+parent])
		if parent == 0 {
			return
		}
	}
}

func sortHeap(a []pair, first, last int) {
	for last-first > 1 {
		last--
		popHeap(a, first, last, last)
	}
}

func popHeap(a []pair, first, last, result int) {
	v := a[result]
	a[result] = a[first]
	adjustHeap(a, first, 0, last-first, v)
}

func adjustHeap(a []pair, first, hole, n int, v pair) {
	top := hole
	child := hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if greater(a[first+child], a[first+child-1]) {
			child--
		}
		a[first+hole] = a[first+child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		a[first+hole] = a[first+child-1]
		hole = child - 1
	}
	// std::__push_heap
	parent := (hole - 1) / 2
	for hole > top && greater(a[first+parent], v) {
		a[first+hole] = a[first+parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	a[first+hole] = v
}

// Argmax returns the index of the largest value, the lowest index among
// equal maxima, or -1 if x is empty or contains a NaN. (−0 and +0 are equal
// maxima, as the comparison sees them.)
//
// Four lanes keep their own running maxima (lane l the elements at l, l+4,
// …, each the first of its largest), combined at the end by the larger
// value, the lower index on equal ones: the same index as one scan, about
// 1.6× as fast (the scan's compares no longer wait on each other).
func Argmax(x []float32) int {
	n := len(x)
	if n < 8 {
		return argmaxFrom(x, 0, -1, 0)
	}
	b0, b1, b2, b3 := x[0], x[1], x[2], x[3]
	if b0 != b0 || b1 != b1 || b2 != b2 || b3 != b3 {
		return -1
	}
	i0, i1, i2, i3 := 0, 1, 2, 3
	i := 4
	for ; i+4 <= n; i += 4 {
		c := x[i : i+4 : i+4]
		v0, v1, v2, v3 := c[0], c[1], c[2], c[3]
		if v0 != v0 || v1 != v1 || v2 != v2 || v3 != v3 {
			return -1
		}
		if v0 > b0 {
			b0, i0 = v0, i
		}
		if v1 > b1 {
			b1, i1 = v1, i+1
		}
		if v2 > b2 {
			b2, i2 = v2, i+2
		}
		if v3 > b3 {
			b3, i3 = v3, i+3
		}
	}
	best, bv := i0, b0
	for _, l := range [3]struct {
		i int
		v float32
	}{{i1, b1}, {i2, b2}, {i3, b3}} {
		if l.v > bv || l.v == bv && l.i < best {
			best, bv = l.i, l.v
		}
	}
	return argmaxFrom(x, i, best, bv)
}

// argmaxFrom goes on with one scan from x[i], given the best so far (best
// < 0: none yet).
func argmaxFrom(x []float32, i, best int, bv float32) int {
	for ; i < len(x); i++ {
		v := x[i]
		if v != v {
			return -1
		}
		if best < 0 || v > bv {
			best, bv = i, v
		}
	}
	return best
}
