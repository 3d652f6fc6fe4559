// Package pagecache asks the kernel whether a file's pages are in the page
// cache, without reading them: mincore on a mapping of the range, which
// starts no I/O. (A probing read with RWF_NOWAIT would: on a miss it starts
// read-ahead, and a reader about to use O_DIRECT would read every byte
// twice.) It is the one use of unsafe outside the weights and backends:
// mincore takes the address of its result vector.
package pagecache

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported says whether Resident can answer here.
const Supported = true

var pageSize = unix.Getpagesize()

// Resident reports whether every page of n bytes of the file fd at off is
// in the page cache (false on any error, and for an off that is not
// page-aligned).
func Resident(fd int, off int64, n int) bool {
	// mmap refuses an empty range and an offset off the page grid.
	m, err := unix.Mmap(fd, off, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(m)
	var vec [4096]byte // one byte per page: 16 MiB of 4 KiB pages at a time
	for lo := 0; lo < n; lo += len(vec) * pageSize {
		hi := min(n, lo+len(vec)*pageSize)
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
