//go:build cuda

package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/tarfa-ai/tarfa/backend"
)

// pinned is the host memory Pin registered with the driver: LoadExpert
// copies bytes inside it to the device directly, with no staging copy.
type pinned struct {
	mu     sync.Mutex
	ranges pinRanges
}

var _ backend.Pinner = (*Backend)(nil)

// Pin registers mem (memory mapped outside the Go heap, such as the
// streaming tier's staging buffers: tier.Options.Pinner) with the driver as
// pinned memory, so that experts read into it are copied to the device
// from where they lie. It returns the function that unregisters it.
func (b *Backend) Pin(mem []byte) (func() error, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("cuda: pin of 0 bytes")
	}
	p := unsafe.Pointer(unsafe.SliceData(mem))
	base := uintptr(p)
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	b.pins.mu.Lock()
	defer b.pins.mu.Unlock()
	if b.pins.ranges.contains(base, 1) {
		return nil, fmt.Errorf("cuda: memory at %#x pinned twice", base)
	}
	if err := hostRegister(p, len(mem)); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	b.pins.ranges.add(base, len(mem))
	return func() error {
		if err := b.enter(); err != nil {
			return err
		}
		defer b.leave()
		b.pins.mu.Lock()
		defer b.pins.mu.Unlock()
		if !b.pins.ranges.remove(base) {
			return fmt.Errorf("cuda: memory at %#x unpinned twice", base)
		}
		if err := hostUnregister(p); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		return nil
	}, nil
}

// isPinned reports whether the n bytes at p lie inside memory Pin
// registered.
func (b *Backend) isPinned(p unsafe.Pointer, n int) bool {
	if n == 0 || p == nil {
		return false
	}
	b.pins.mu.Lock()
	defer b.pins.mu.Unlock()
	return b.pins.ranges.contains(uintptr(p), n)
}
