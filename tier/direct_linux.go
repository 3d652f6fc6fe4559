package tier

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tarfa-ai/tarfa/internal/pagecache"
)

// oDirect is the open flag that bypasses the page cache.
const oDirect = syscall.O_DIRECT

// readCached reads len(p) bytes at off from the buffered descriptor fd if
// the page cache holds every page of them (asked of m first, starting no
// I/O: package pagecache; known, the caller has just asked), and reports
// whether it did. A page evicted since is read like any buffered one: the
// bytes are the same, only slower, and the hash checks them either way.
func readCached(m *pagecache.Map, fd int, p []byte, off int64, known bool) bool {
	if len(p) == 0 || !known && !m.Resident(off, len(p)) {
		return false
	}
	for done := 0; done < len(p); {
		n, err := unix.Pread(fd, p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		done += n
	}
	return true
}

// hasReadCached says whether readCached can work here.
const hasReadCached = pagecache.Supported
