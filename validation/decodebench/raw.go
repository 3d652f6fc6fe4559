package decodebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/unix"

	"github.com/tarfa-ai/tarfa/weights"
)

// rawRead reads every record of refs (its 4096-aligned read length at its
// offset) with n reads in flight, in file order, with O_DIRECT where asked
// and allowed, into page-aligned buffers, and nothing else: no hashing. It
// reports whether every read bypassed the page cache.
func rawRead(ctx context.Context, refs []weights.ExpertRef, n int, direct bool, size int) (bool, error) {
	return rawReadSplit(ctx, refs, n, direct, size, 1)
}

// rawReadSplit is rawRead with every record read as split requests of
// (at most) a 4096-aligned split-th of its read length each: the same
// bytes in more requests, which separates per-request latency from
// bandwidth.
func rawReadSplit(ctx context.Context, refs []weights.ExpertRef, n int, direct bool, size, split int) (bool, error) {
	refs = sortedRefs(refs)
	files := map[string]*os.File{}
	allDirect := direct && oDirect != 0
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, r := range refs {
		if _, ok := files[r.Path()]; ok {
			continue
		}
		var f *os.File
		var err error
		if allDirect {
			if f, err = os.OpenFile(r.Path(), os.O_RDONLY|oDirect, 0); err != nil {
				allDirect = false // the file system refuses it: buffered, after the dropped cache
				for _, g := range files {
					g.Close()
				}
				clear(files)
				return rawReadSplit(ctx, refs, n, false, size, split)
			}
		} else if f, err = os.Open(r.Path()); err != nil {
			return false, err
		}
		files[r.Path()] = f
	}
	jobs := make(chan weights.ExpertRef)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			if err != nil {
				errc <- fmt.Errorf("aligned read buffer: %w", err)
				for range jobs {
				}
				return
			}
			defer unix.Munmap(buf)
			for r := range jobs {
				chunk := chunkLen(r.ReadLength(), split)
				for off := int64(0); off < r.ReadLength(); off += chunk {
					n := min(chunk, r.ReadLength()-off)
					m, err := files[r.Path()].ReadAt(buf[:n], r.Offset()+off)
					if err != nil && !(errors.Is(err, io.EOF) && off+int64(m) >= r.Length()) {
						errc <- fmt.Errorf("%s@%d: %w", r.Path(), r.Offset()+off, err)
						for range jobs {
						}
						return
					}
				}
			}
		}()
	}
	var err error
feed:
	for _, r := range refs {
		select {
		case jobs <- r:
		case err = <-errc:
			break feed
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return allDirect, err
}

// chunkLen is the request size of a record of n bytes read in split parts.
func chunkLen(n int64, split int) int64 {
	c := (n/int64(split) + 4095) &^ 4095
	return max(c, 4096)
}

// requests is how many requests rawReadSplit makes for refs.
func requests(refs []weights.ExpertRef, split int) int64 {
	var k int64
	for _, r := range refs {
		c := chunkLen(r.ReadLength(), split)
		k += (r.ReadLength() + c - 1) / c
	}
	return k
}

// readRecord reads one record into memory (for the hash figure).
func readRecord(r weights.ExpertRef) ([]byte, error) {
	f, err := os.Open(r.Path())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, r.Length())
	if _, err := f.ReadAt(b, r.Offset()); err != nil {
		return nil, fmt.Errorf("%s@%d: %w", r.Path(), r.Offset(), err)
	}
	return b, nil
}

func blake3Sum(b []byte) [32]byte { return blake3.Sum256(b) }
