//go:build cuda

package cuda

// The driver calls gorgonia.org/cu does not wrap (ECOSYSTEM.md): pinned host
// memory. cu has MemFreeHost but no cuMemHostAlloc or cuMemHostRegister.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

static CUresult tarfaMemHostAlloc(void **p, size_t n) {
	return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE);
}

static CUresult tarfaMemHostRegister(void *p, size_t n) {
	return cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}

static CUresult tarfaMemHostUnregister(void *p) {
	return cuMemHostUnregister(p);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// hostAlloc returns n bytes of page-locked host memory (freed with
// cu.MemFreeHost), visible to every context.
func hostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if r := C.tarfaMemHostAlloc(&p, C.size_t(n)); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuMemHostAlloc of %d bytes: CUDA error %d", n, int(r))
	}
	return p, nil
}

// hostRegister pins n bytes of host memory at p (not Go memory: the
// streaming tier's mmap'd buffers) for every context.
func hostRegister(p unsafe.Pointer, n int) error {
	if r := C.tarfaMemHostRegister(p, C.size_t(n)); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuMemHostRegister of %d bytes: CUDA error %d", n, int(r))
	}
	return nil
}

// hostUnregister unpins memory hostRegister pinned.
func hostUnregister(p unsafe.Pointer) error {
	if r := C.tarfaMemHostUnregister(p); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuMemHostUnregister: CUDA error %d", int(r))
	}
	return nil
}
