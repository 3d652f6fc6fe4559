// Package pagecache asks the kernel whether a file's pages are in the page
// cache, without reading them: mincore on a mapping of the range, which
// starts no I/O. (A probing read with RWF_NOWAIT would: on a miss it starts
// read-ahead, and a reader about to use O_DIRECT would read every byte
// twice.) It is the one use of unsafe outside the weights and backends:
// mincore takes the address of its result vector.
package pagecache

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported says whether Resident can answer here.
const Supported = true

var pageSize = unix.Getpagesize()

// Resident reports whether every page of n bytes of the file fd at off is
// in the page cache (false on any error, and for an off that is not
// page-aligned). It maps the range for the question and unmaps it after:
// a caller that asks often keeps a Map instead.
func Resident(fd int, off int64, n int) bool {
	// mmap refuses an empty range and an offset off the page grid.
	m, err := unix.Mmap(fd, off, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(m)
	return resident(m)
}

// resident asks mincore about every page of the mapped range m.
func resident(m []byte) bool {
	var vec [4096]byte // one byte per page: 16 MiB of 4 KiB pages at a time
	for lo := 0; lo < len(m); lo += len(vec) * pageSize {
		hi := min(len(m), lo+len(vec)*pageSize)
		pages := (hi - lo + pageSize - 1) / pageSize
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[lo])), uintptr(hi-lo), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 {
			return false
		}
		for _, v := range vec[:pages] {
			if v&1 == 0 {
				return false
			}
		}
	}
	return true
}

// A Map answers Resident for one file from one mapping of all of it, made
// once and never touched: each question is mincore alone, where Resident
// maps and unmaps the range (and the unmap's TLB shootdown reaches every
// core the process runs on) — the difference between a few microseconds
// and a fraction of a millisecond for an expert-sized range. The mapping
// takes address space only: no page of it is read or faulted in.
type Map struct {
	m      []byte
	closed atomic.Bool
}

// NewMap maps the n bytes of the file fd (its size when the map is made:
// a question past them is answered no).
func NewMap(fd int, n int64) (*Map, error) {
	if n <= 0 {
		return &Map{}, nil
	}
	if int64(int(n)) != n {
		return nil, fmt.Errorf("pagecache: a %d-byte file does not fit the address space", n)
	}
	m, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("pagecache: mapping %d bytes: %w", n, err)
	}
	return &Map{m: m}, nil
}

// covers says whether p can be asked about n bytes at off: an open
// mapping, a page-aligned off (mincore takes page addresses) and a
// non-empty range within the mapping.
func (p *Map) covers(off int64, n int) bool {
	return p != nil && !p.closed.Load() && n > 0 && off >= 0 && off%int64(pageSize) == 0 && off <= int64(len(p.m)) && int64(n) <= int64(len(p.m))-off
}

// Resident reports whether every page of n bytes at off is in the page
// cache (false for an off that is not page-aligned, an empty or negative
// range, or one past the mapping).
func (p *Map) Resident(off int64, n int) bool {
	if !p.covers(off, n) {
		return false
	}
	return resident(p.m[off : off+int64(n)])
}

// Likely reports whether the first, middle and last pages of n bytes at
// off are in the page cache: three one-page questions, where Resident
// asks about every page (about 35 ns each: 160 µs for an 18 MiB expert).
// It is a sample, for decisions that cost only speed when it is wrong
// (package tier: which path reads an expert, and whether to read it
// ahead; the bytes are hashed either way). The same ranges as Resident
// answer no.
func (p *Map) Likely(off int64, n int) bool {
	if !p.covers(off, n) {
		return false
	}
	pages := (int64(n) + int64(pageSize) - 1) / int64(pageSize)
	for _, i := range [3]int64{0, pages / 2, pages - 1} {
		at := off + i*int64(pageSize)
		if !resident(p.m[at:min(at+int64(pageSize), off+int64(n))]) {
			return false
		}
	}
	return true
}

// Close unmaps the file (once: a second Close does nothing). A question
// asked while it closes is answered no, or from the page cache as before:
// mincore never touches the pages.
func (p *Map) Close() error {
	if p == nil || p.m == nil || !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	return unix.Munmap(p.m)
}
