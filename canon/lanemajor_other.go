//go:build !amd64 || purego

package canon

const useVector = false

const noVector = "canon: no vector kernels in this build"

func dotBF16Rounds(acc *[Lanes]float32, w *uint16, xT *float32, rounds int) { panic(noVector) }

func dotF32Rounds(acc *[Lanes]float32, wT, xT *float32, rounds int) { panic(noVector) }

func interleaveBF16Rounds(dst *float32, src *uint16, rounds int) { panic(noVector) }

func interleaveF32Rounds(dst, src *float32, rounds int) { panic(noVector) }

func tokensBF16Rounds(acc [][Lanes]float32, w *uint16, xT *float32, xstride, rounds int) {
	panic(noVector)
}

func tileRounds(acc [][Lanes]float32, wT, xT *float32, stride, R, T, rounds int) { panic(noVector) }

func combineLanes(acc *[Lanes]float32, n int, y *float32, ystride int) { panic(noVector) }
