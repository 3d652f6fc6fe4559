package weights

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Arena is off-heap memory for verified copies that are read from storage
// into recycled buffers (the streaming tier): page-aligned buffers of one
// size (so O_DIRECT can read into them), mapped outside the Go heap (the
// garbage collector never owns the lifetime of verified bytes), counted
// against a hard byte budget, and sealed read-only (mprotect) while they
// hold verified bytes — a stray write faults instead of changing what was
// verified. An Arena is safe for concurrent use.
type Arena struct {
	size   int
	budget int64
	pin    Pinner
	lazy   bool // pin is applied by Buffer.Pin, not by Get

	mu     sync.Mutex
	free   []*Buffer
	mapped int // buffers mapped
	closed bool

	// The spare keeper (KeepSpare): keeps up to spare free buffers mapped
	// and pinned ahead of Get, mapping at most spareMax in all; woken by
	// Get through wake, stopped by Close.
	spare, spareMax int
	wake            chan struct{}
	keeperDone      chan struct{}
	// pending counts the buffers the keeper is mapping, counted in mapped
	// but not yet free; Get waits on spared for it rather than fail for
	// want of budget.
	pending int
	spared  *sync.Cond
}

// Pinner pins host memory for a device backend's copies (page-locked and
// registered with the device driver, so that the device copies from it
// directly): Pin returns the function that unpins mem again. The arena
// calls Pin once per buffer it maps and the unpin function before it
// unmaps the buffer.
type Pinner interface {
	Pin(mem []byte) (unpin func() error, err error)
}

// SetPinner makes the arena pin every buffer it maps from now on with p.
// A buffer p fails to pin is used unpinned (the backend then copies it
// through its own staging memory).
func (a *Arena) SetPinner(p Pinner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pin, a.lazy = p, false
}

// SetLazyPinner is SetPinner for buffers pinned when their user asks
// (Buffer.Pin), outside the arena's lock and whatever lock the caller of
// Get holds: pinning an 18 MiB buffer takes milliseconds (its pages are
// faulted in and registered with the device driver), once per buffer.
func (a *Arena) SetLazyPinner(p Pinner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pin, a.lazy = p, true
}

// KeepSpare starts a goroutine that keeps n free buffers mapped, their
// pages faulted in and, with a pinner (SetPinner, SetLazyPinner), pinned,
// ahead of Get, as long as the arena maps at most max buffers in all (and
// the budget allows): a buffer's first use then costs no page faults and
// no pinning on its user's path, which for an 18 MiB buffer is
// milliseconds. A second call changes n and max. Close stops it.
func (a *Arena) KeepSpare(n, max int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || n <= 0 {
		return
	}
	a.spare, a.spareMax = n, max
	if a.wake == nil {
		a.wake, a.keeperDone = make(chan struct{}, 1), make(chan struct{})
		a.spared = sync.NewCond(&a.mu)
		go a.keep(a.wake) // its own copy: Close sets a.wake to nil
	}
	a.nudge()
}

// nudge wakes the spare keeper, if any (a.mu held).
func (a *Arena) nudge() {
	if a.wake != nil {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// keep is the spare keeper's loop: while fewer than a.spare buffers are
// free, it counts one more as mapped (so Get and the budget see it), maps,
// faults and pins it outside the lock, and adds it to the free list.
func (a *Arena) keep(wake <-chan struct{}) {
	defer close(a.keeperDone)
	for range wake {
		for {
			a.mu.Lock()
			if a.closed || len(a.free) >= a.spare || a.mapped >= a.spareMax || int64(a.mapped+1)*int64(a.size) > a.budget {
				closed := a.closed
				a.mu.Unlock()
				if closed {
					return
				}
				break
			}
			a.mapped++
			a.pending++
			p := a.pin
			a.mu.Unlock()
			b, err := a.mapBuffer(mapPopulate, p)
			a.mu.Lock()
			a.pending--
			a.spared.Broadcast()
			if err != nil {
				// Out of memory: Get maps, and fails, on its own; the
				// keeper waits for the next Get.
				a.mapped--
				a.mu.Unlock()
				break
			}
			if a.closed {
				a.mapped--
				a.mu.Unlock()
				b.unmap()
				return
			}
			a.free = append(a.free, b)
			a.mu.Unlock()
		}
	}
}

// mapBuffer maps a buffer (mmap flags besides private and anonymous:
// mapPopulate or 0) and pins it with p, if any (a refused pin leaves it
// unpinned: Buffer.Pin asks again).
func (a *Arena) mapBuffer(flags int, p Pinner) (*Buffer, error) {
	mem, err := unix.Mmap(-1, 0, a.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|flags)
	if err != nil {
		return nil, fmt.Errorf("arena: mmap %d bytes: %w", a.size, err)
	}
	b := &Buffer{a: a, mem: mem}
	if p != nil {
		if unpin, err := p.Pin(mem); err == nil {
			b.unpin = unpin
		}
	}
	return b, nil
}

// ErrBudget says an arena's budget has no room for another buffer.
var ErrBudget = errors.New("arena budget exhausted")

// PageSize is the alignment of arena buffers.
var PageSize = os.Getpagesize()

// NewArena makes an arena of buffers of at least size bytes (rounded up to
// the page size), at most budget bytes in all.
func NewArena(size int, budget int64) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("arena: buffer size %d", size)
	}
	size = (size + PageSize - 1) / PageSize * PageSize
	if budget < int64(size) {
		return nil, fmt.Errorf("arena: a budget of %d bytes holds no %d-byte buffer: %w", budget, size, ErrBudget)
	}
	return &Arena{size: size, budget: budget}, nil
}

// BufferSize is the size of every buffer.
func (a *Arena) BufferSize() int { return a.size }

// Capacity is the number of buffers the budget allows.
func (a *Arena) Capacity() int { return int(a.budget / int64(a.size)) }

// InUse is the number of buffers handed out and not released.
func (a *Arena) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mapped - len(a.free)
}

// Mapped is the bytes of memory the arena holds (never above the budget).
func (a *Arena) Mapped() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int64(a.mapped) * int64(a.size)
}

// Get returns a free, writable buffer, or ErrBudget when every buffer the
// budget allows is in use.
func (a *Arena) Get() (*Buffer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("arena: closed")
	}
	defer a.nudge()
	for len(a.free) == 0 && a.pending > 0 && int64(a.mapped+1)*int64(a.size) > a.budget && !a.closed {
		a.spared.Wait() // the budget's last buffer is the keeper's, being mapped
	}
	if a.closed {
		return nil, errors.New("arena: closed")
	}
	if n := len(a.free); n > 0 {
		b := a.free[n-1]
		a.free = a.free[:n-1]
		b.inUse = true
		return b, nil
	}
	if int64(a.mapped+1)*int64(a.size) > a.budget {
		return nil, ErrBudget
	}
	var p Pinner
	if !a.lazy {
		p = a.pin
	}
	b, err := a.mapBuffer(0, p)
	if err != nil {
		return nil, err
	}
	a.mapped++
	b.inUse = true
	return b, nil
}

// Pin pins b with the arena's lazy pinner (SetLazyPinner) unless it is
// pinned already, and reports whether it is pinned: false without one, or
// when the pinner refused it (b is then used unpinned, and asked again
// next time). Only b's user (between Get and Release) may call it.
func (b *Buffer) Pin() bool {
	if b.unpin != nil {
		return true
	}
	a := b.a
	a.mu.Lock()
	p, lazy := a.pin, a.lazy
	a.mu.Unlock()
	if p == nil || !lazy || !b.inUse {
		return false
	}
	unpin, err := p.Pin(b.mem)
	if err != nil {
		return false
	}
	b.unpin = unpin
	return true
}

// Close unmaps every buffer; buffers still in use are unmapped when
// released.
func (a *Arena) Close() error {
	a.mu.Lock()
	a.closed = true
	if a.wake != nil {
		close(a.wake)
		a.wake = nil
		done := a.keeperDone
		a.mu.Unlock()
		<-done // a spare it was mapping is unmapped by it, not added
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	var first error
	for _, b := range a.free {
		if err := b.unmap(); err != nil && first == nil {
			first = err
		}
		a.mapped--
	}
	a.free = nil
	return first
}

// Buffer is one arena buffer. While writable (after Get) its bytes are the
// reader's; once a verified value is minted over it (ExpertRef.Verify) it
// is sealed read-only until Release, which also invalidates that value.
type Buffer struct {
	a      *Arena
	mem    []byte
	gen    atomic.Uint64 // bumped by Release: values minted before are invalid
	sealed bool
	inUse  bool
	unpin  func() error // nil: not pinned
}

// Pinned reports whether the arena's Pinner pinned the buffer.
func (b *Buffer) Pinned() bool { return b.unpin != nil }

// unmap unpins and unmaps the buffer.
func (b *Buffer) unmap() error {
	var err error
	if b.unpin != nil {
		err = b.unpin()
		b.unpin = nil
	}
	if uerr := unix.Munmap(b.mem); err == nil {
		err = uerr
	}
	return err
}

// Bytes is the buffer's memory, writable until it is sealed.
func (b *Buffer) Bytes() []byte { return b.mem }

// Sealed reports whether the buffer holds verified bytes.
func (b *Buffer) Sealed() bool { return b.sealed }

func (b *Buffer) seal() error {
	if err := unix.Mprotect(b.mem, unix.PROT_READ); err != nil {
		return fmt.Errorf("arena: seal: %w", err)
	}
	b.sealed = true
	return nil
}

func (b *Buffer) unseal() error {
	if !b.sealed {
		return nil
	}
	if err := unix.Mprotect(b.mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return fmt.Errorf("arena: unseal: %w", err)
	}
	b.sealed = false
	return nil
}

// Release invalidates any value minted over the buffer and every View of
// it (their methods and View.Data panic from now on), makes the buffer
// writable and returns it to the arena. The caller must have stopped using
// the bytes it took from them (Data's strings, slices over them).
func (b *Buffer) Release() error {
	a := b.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if !b.inUse {
		return errors.New("arena: buffer released twice")
	}
	b.inUse = false
	b.gen.Add(1)
	err := b.unseal()
	if a.closed {
		a.mapped--
		if uerr := b.unmap(); err == nil {
			err = uerr
		}
		return err
	}
	a.free = append(a.free, b)
	return err
}
