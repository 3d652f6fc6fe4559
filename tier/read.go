// Package tier is Tarfa's memory hierarchy for routed experts, the one owner
// of every copy of one: storage → a RAM tier of verified, sealed copies →
// the device level, slots of the backend's own memory (backend.SlotPool:
// VRAM for CUDA). Each level is a policy.Cache with a pluggable policy
// (tier/policy); the RAM tier sees only the device level's misses, and
// staging buffers carry the reads no level keeps. Experts reach the engine
// only through Hierarchy.Stream, placed (expertstream.Placed): a filled
// device slot to bind, a slot to fill from verified bytes, or verified host
// bytes, each under a lease released when the engine has consumed it. A
// model run without a hierarchy reads and verifies every expert on every
// use and keeps none. Reads run in parallel (O_DIRECT where the file
// system allows it), each expert's in pieces that any reader takes, into
// sealed arena buffers (weights.Arena), and each expert is hashed in parts
// that any hasher takes (pipeline.go), overlapped with the reads and with
// compute; no byte reaches compute before its digest matched, and a device copy is
// hashed again on the device (cuda: Options.VerifyCopies). Budgets are hard
// limits. Results never depend on the policies, the budgets, the number of
// readers, prefetching or arrival order.
package tier

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tarfa-ai/tarfa/internal/pagecache"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// DirectMode says whether reads bypass the page cache.
type DirectMode int

const (
	// DirectAuto uses O_DIRECT where the file system allows it and falls
	// back to buffered reads (saying so in Stats) where it does not.
	DirectAuto DirectMode = iota
	// DirectOff always reads through the page cache.
	DirectOff
	// DirectOn requires O_DIRECT: a file system that refuses it is an error.
	DirectOn
)

// files holds the readers' descriptors, one or two per JNF file, all opened
// when the hierarchy is made: the checkpoint's own descriptor (opened and
// checked with the model) and, where O_DIRECT is wanted and allowed, a
// second one opened with it and checked to be the same file (same device
// and inode). Nothing is opened by path afterwards: a file replaced while
// the model runs (by another file, a FIFO, a symbolic link) is never read.
type files struct {
	mode DirectMode
	mu   sync.Mutex
	fds  map[*jnf.File]*fileFD
	all  []*os.File // the O_DIRECT descriptors opened here, closed by close
	maps []*pagecache.Map
	// asked counts the questions to the page cache (a test's window on
	// them): inPageCache's, and those of reads not told the answer.
	asked atomic.Int64
	// slow, if set (by tests: a slow storage device), is called before
	// every read of a piece.
	slow func()
}

// mapFile maps all of f for the page-cache questions (pagecache.Map).
func mapFile(f *os.File) (*pagecache.Map, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return pagecache.NewMap(int(f.Fd()), st.Size())
}

type fileFD struct {
	r      io.ReaderAt
	direct bool
	// cached, with DirectAuto beside an O_DIRECT descriptor, is a buffered
	// one of the same file (checked like it): a read whose pages are all in
	// the page cache is copied from there (readCached), the others go to
	// O_DIRECT. A model read again soon — a repeat run — finds its experts
	// in memory instead of on the device.
	cached    *os.File
	cachedFD  int
	cachedMap *pagecache.Map // all of the file, for the page-cache questions
}

// newFiles opens what the readers of refs need.
func newFiles(mode DirectMode, refs []weights.ExpertRef) (*files, error) {
	fs := &files{mode: mode, fds: map[*jnf.File]*fileFD{}}
	for _, ref := range refs {
		jf := ref.File()
		if jf == nil || fs.fds[jf] != nil {
			continue
		}
		fd := &fileFD{r: jf}
		if mode != DirectOff && oDirect != 0 {
			f, err := jf.Reopen(oDirect)
			var replaced *jnf.ReplacedError
			switch {
			case err == nil:
				fd = &fileFD{r: f, direct: true}
				fs.all = append(fs.all, f)
				if mode == DirectAuto && hasReadCached {
					c, err := jf.Reopen(0)
					if err != nil {
						fs.close()
						return nil, fmt.Errorf("tier: %w", err)
					}
					fd.cached, fd.cachedFD = c, int(c.Fd())
					fs.all = append(fs.all, c)
					if fd.cachedMap, err = mapFile(c); err != nil {
						fs.close()
						return nil, fmt.Errorf("tier: %s: %w", jf.Path, err)
					}
					fs.maps = append(fs.maps, fd.cachedMap)
				}
			case errors.As(err, &replaced):
				fs.close()
				return nil, fmt.Errorf("tier: %w", err)
			case mode == DirectOn:
				fs.close()
				return nil, fmt.Errorf("tier: %s: O_DIRECT refused (%w); read without --direct", jf.Path, err)
			}
		}
		fs.fds[jf] = fd
	}
	return fs, nil
}

func (fs *files) get(jf *jnf.File) (*fileFD, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fd, ok := fs.fds[jf]
	if !ok {
		return nil, fmt.Errorf("tier: %s was not opened with the hierarchy", jf.Path)
	}
	return fd, nil
}

// demote replaces an O_DIRECT descriptor whose reads fail with EINVAL (a
// file system that accepted the flag but not the reads) by the checkpoint's
// buffered one. The O_DIRECT descriptor stays open until close: another
// reader may be using it.
func (fs *files) demote(jf *jnf.File, old *fileFD) *fileFD {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if cur := fs.fds[jf]; cur != old {
		return cur
	}
	fd := &fileFD{r: jf}
	fs.fds[jf] = fd
	return fd
}

// close closes the descriptors opened here (the checkpoint closes its own).
func (fs *files) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.all {
		f.Close()
	}
	fs.all = nil
	for _, m := range fs.maps {
		m.Close()
	}
	fs.maps = nil
	fs.fds = map[*jnf.File]*fileFD{}
}

// readRange fills b[off:off+n] with bytes off to off+n of ref's read (its
// record and padding: ReadLength bytes at an aligned offset; off and n
// multiples of the page size, or n the read's last bytes, so O_DIRECT
// accepts them: a piece of an expert read, pipeline.go) and reports
// whether the read bypassed the page cache (direct) or was served from it
// without waiting (cached: DirectAuto found every page there). known
// says the caller has just found every page of the read there
// (inPageCache): the piece is copied from the page cache without asking
// again.
func (fs *files) readRange(ref weights.ExpertRef, b *weights.Buffer, off, n int64, known bool) (direct, cached bool, err error) {
	if off < 0 || n <= 0 || off+n > ref.ReadLength() {
		return false, false, fmt.Errorf("tier: bytes %d to %d of a %d-byte read", off, off+n, ref.ReadLength())
	}
	if int64(len(b.Bytes())) < off+n {
		return false, false, fmt.Errorf("tier: a %d-byte buffer for a %d-byte read", len(b.Bytes()), off+n)
	}
	jf := ref.File()
	fd, err := fs.get(jf)
	if err != nil {
		return false, false, err
	}
	dst := b.Bytes()[off : off+n]
	at := ref.Offset() + off
	if fs.slow != nil {
		fs.slow()
	}
	if fd.cached != nil {
		if !known {
			fs.asked.Add(1)
		}
		if readCached(fd.cachedMap, fd.cachedFD, dst, at, known) {
			return false, true, nil
		}
	}
	_, err = fd.r.ReadAt(dst, at)
	if err != nil && fd.direct && errors.Is(err, unix.EINVAL) && fs.mode != DirectOn {
		fd = fs.demote(jf, fd)
		_, err = fd.r.ReadAt(dst, at)
	}
	if err != nil {
		return false, false, fmt.Errorf("tier: %s: reading layer %d expert %d at offset %d: %w", ref.Path(), ref.ID().Layer, ref.ID().Expert, at, err)
	}
	return fd.direct, false, nil
}

// inPageCache reports whether ref's read is in the page cache, asked of
// the buffered descriptor DirectAuto keeps beside an O_DIRECT one (false
// without one: with buffered reads every read fills the page cache, and it
// says nothing about what an earlier process left there). It asks about
// three of its pages (pagecache.Map.Likely: a few microseconds, where
// asking about every page of an 18.9 MB expert takes 140-180 µs on the
// H200, once per RAM-tier miss under the hierarchy's lock): the answer
// only chooses the path, never the bytes. A read told yes copies from the
// page cache with a buffered pread, which reads a page evicted since from
// storage like any buffered read, and the hash checks it either way; one
// told no reads with O_DIRECT.
func (fs *files) inPageCache(ref weights.ExpertRef) bool {
	fs.asked.Add(1)
	jf := ref.File()
	if jf == nil {
		return false
	}
	fd, err := fs.get(jf)
	if err != nil || fd.cached == nil {
		return false
	}
	return fd.cachedMap.Likely(ref.Offset(), int(ref.ReadLength()))
}
