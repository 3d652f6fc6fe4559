//go:build !amd64 || purego

package canon

const useVector = false

func dotBF16Rounds(acc *[Lanes]float32, w *uint16, xT *float32, rounds int) {
	panic("canon: no vector kernels in this build")
}

func dotF32Rounds(acc *[Lanes]float32, wT, xT *float32, rounds int) {
	panic("canon: no vector kernels in this build")
}
