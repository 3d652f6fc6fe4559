package cuda

import "slices"

// pinRanges are the host memory ranges Pin registered, sorted by base so
// that contains is a binary search: the tier's RAM tier pins one range a
// buffer, thousands of them, and every expert copy asks about its three
// matrices. Ranges never overlap (memory is pinned once).
type pinRanges struct {
	bases []uintptr
	lens  []int
}

// add records [base, base+n); false if base is recorded already.
func (r *pinRanges) add(base uintptr, n int) bool {
	i, ok := slices.BinarySearch(r.bases, base)
	if ok {
		return false
	}
	r.bases = slices.Insert(r.bases, i, base)
	r.lens = slices.Insert(r.lens, i, n)
	return true
}

// remove forgets the range at base; false if there is none.
func (r *pinRanges) remove(base uintptr) bool {
	i, ok := slices.BinarySearch(r.bases, base)
	if !ok {
		return false
	}
	r.bases = slices.Delete(r.bases, i, i+1)
	r.lens = slices.Delete(r.lens, i, i+1)
	return true
}

// contains reports whether [a, a+n) lies inside one recorded range.
func (r *pinRanges) contains(a uintptr, n int) bool {
	i, ok := slices.BinarySearch(r.bases, a)
	if !ok {
		i-- // the last range starting below a
	}
	return i >= 0 && n >= 0 && a+uintptr(n) <= r.bases[i]+uintptr(r.lens[i])
}
