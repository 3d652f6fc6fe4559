// Package tier is Tarfa's memory hierarchy for routed experts: storage →
// a RAM tier of verified copies → device slots (for the CPU backend, the
// memory it computes from; for CUDA, VRAM). Every backend gets experts
// through it, as leases: a lease pins one verified copy until released,
// carries the record's digest, and is the only way to reach its bytes.
// Reads run in parallel (O_DIRECT where the file system allows it) into
// sealed arena buffers (weights.Arena) and are hashed on the reading
// goroutines, overlapped with compute; no byte reaches compute before its
// digest matched. Budgets are hard limits. Which experts stay resident is a
// pluggable policy (tier/policy); results never depend on it, nor on the
// number of readers, prefetching or arrival order.
package tier

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

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

// files keeps one descriptor per JNF file for the readers: O_DIRECT where
// possible.
type files struct {
	mode DirectMode
	mu   sync.Mutex
	fds  map[string]*fileFD
}

type fileFD struct {
	f      *os.File
	direct bool
}

func newFiles(mode DirectMode) *files { return &files{mode: mode, fds: map[string]*fileFD{}} }

func (fs *files) get(path string) (*fileFD, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fd, ok := fs.fds[path]; ok {
		return fd, nil
	}
	var fd *fileFD
	if fs.mode != DirectOff && oDirect != 0 {
		f, err := os.OpenFile(path, os.O_RDONLY|oDirect, 0)
		switch {
		case err == nil:
			fd = &fileFD{f: f, direct: true}
		case fs.mode == DirectOn:
			return nil, fmt.Errorf("tier: %s: O_DIRECT refused (%w); read without --direct", path, err)
		}
	}
	if fd == nil {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		fd = &fileFD{f: f}
	}
	fs.fds[path] = fd
	return fd, nil
}

// demote replaces an O_DIRECT descriptor whose reads fail with EINVAL (a
// file system that accepted the flag but not the reads) by a buffered one.
func (fs *files) demote(path string, old *fileFD) (*fileFD, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if cur := fs.fds[path]; cur != old {
		return cur, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	old.f.Close()
	fd := &fileFD{f: f}
	fs.fds[path] = fd
	return fd, nil
}

func (fs *files) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, fd := range fs.fds {
		fd.f.Close()
	}
	fs.fds = map[string]*fileFD{}
}

// read fills b with ref's record and its padding (ReadLength bytes, a
// multiple of the page size at an aligned offset, so O_DIRECT accepts it)
// and reports whether the read bypassed the page cache.
func (fs *files) read(ref weights.ExpertRef, b *weights.Buffer) (direct bool, err error) {
	n := ref.ReadLength()
	if int64(len(b.Bytes())) < n {
		return false, fmt.Errorf("tier: a %d-byte buffer for a %d-byte read", len(b.Bytes()), n)
	}
	fd, err := fs.get(ref.Path())
	if err != nil {
		return false, err
	}
	dst := b.Bytes()[:n]
	_, err = fd.f.ReadAt(dst, ref.Offset())
	if err != nil && fd.direct && errors.Is(err, unix.EINVAL) && fs.mode != DirectOn {
		if fd, err = fs.demote(ref.Path(), fd); err != nil {
			return false, err
		}
		_, err = fd.f.ReadAt(dst, ref.Offset())
	}
	if err != nil {
		return false, fmt.Errorf("tier: %s: reading layer %d expert %d at offset %d: %w", ref.Path(), ref.ID().Layer, ref.ID().Expert, ref.Offset(), err)
	}
	return fd.direct, nil
}
