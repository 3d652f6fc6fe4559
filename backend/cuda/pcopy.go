package cuda

import "sync"

// pcopyPiece is the piece one goroutine of pcopy copies, in elements of 4
// bytes (1 MiB).
const pcopyPiece = 1 << 18

// pcopy copies src into dst (the shorter length, as copy), in pieces of
// pcopyPiece elements by up to 8 goroutines where it is longer than two:
// a step's logits (16 rows of a 248,320-entry vocabulary: 16 MB) leave the
// queue's pinned arena in a fraction of one core's time. The bytes are
// copy's.
func pcopy[T float32 | int32](dst, src []T) {
	n := min(len(dst), len(src))
	if n <= 2*pcopyPiece {
		copy(dst, src)
		return
	}
	pieces := (n + pcopyPiece - 1) / pcopyPiece
	workers := min(8, pieces)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for p := w; p < pieces; p += workers {
				lo := p * pcopyPiece
				hi := min(lo+pcopyPiece, n)
				copy(dst[lo:hi], src[lo:hi])
			}
		})
	}
	wg.Wait()
}
