//go:build cuda

package cuda

// The driver calls gorgonia.org/cu does not wrap (ECOSYSTEM.md): pinned host
// memory. cu has MemFreeHost but no cuMemHostAlloc.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

static CUresult tarfaMemHostAlloc(void **p, size_t n) {
	return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE);
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
