//go:build !purego

package canon

import "golang.org/x/sys/cpu"

// useVector selects the AVX2 kernels of lanemajor_amd64.s and
// blockfp8_amd64.s (which also needs F16C's VCVTPH2PS; every AVX2 processor
// has it).
var useVector = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// dotBF16Rounds adds rounds full rounds of BF16 weights w (original order)
// times xT (lane-major) into acc, in the canonical order of every lane.
//
//go:noescape
func dotBF16Rounds(acc *[Lanes]float32, w *uint16, xT *float32, rounds int)

// dotF32Rounds is dotBF16Rounds for lane-major float32 weights wT.
//
//go:noescape
func dotF32Rounds(acc *[Lanes]float32, wT, xT *float32, rounds int)

// interleaveBF16Rounds writes rounds full rounds of src, widened, to dst in
// lane-major order (InterleaveBF16).
//
//go:noescape
func interleaveBF16Rounds(dst *float32, src *uint16, rounds int)

// interleaveF32Rounds is interleaveBF16Rounds for float32 src (Interleave).
//
//go:noescape
func interleaveF32Rounds(dst, src *float32, rounds int)

// dotBF16Rounds<T> add rounds full rounds of the BF16 row w (original
// order) times T lane-major tokens (xT, xT+xstride, ..) into acc[t] (acc is
// [T][Lanes]float32), transposing the row once for the T tokens.
//
//go:noescape
func dotBF16Rounds2(acc *float32, w *uint16, xT *float32, xstride, rounds int)

//go:noescape
func dotBF16Rounds3(acc *float32, w *uint16, xT *float32, xstride, rounds int)

//go:noescape
func dotBF16Rounds4(acc *float32, w *uint16, xT *float32, xstride, rounds int)

// dotF32Rounds<R>x<T> add rounds full rounds of R lane-major rows (wT,
// wT+wstride, ..) times T lane-major tokens into acc[r][t] (acc is
// [R][T][Lanes]float32).
//
//go:noescape
func dotF32Rounds1x2(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds1x3(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds1x4(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds2x1(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds2x2(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds2x3(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds2x4(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds3x1(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds3x2(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds3x3(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

//go:noescape
func dotF32Rounds3x4(acc *float32, wT *float32, wstride int, xT *float32, xstride, rounds int)

// combineLanes sets y[i*ystride] = Combine(acc[i]) for i < n (acc is
// [n][Lanes]float32).
//
//go:noescape
func combineLanes(acc *[Lanes]float32, n int, y *float32, ystride int)

// tokensBF16Rounds adds the full rounds of the BF16 row w times the
// lane-major tokens xT, xT+xstride, .. into acc[t] for t < len(acc) (at
// most 4).
func tokensBF16Rounds(acc [][Lanes]float32, w *uint16, xT *float32, xstride, rounds int) {
	a := &acc[0][0]
	switch len(acc) {
	case 1:
		dotBF16Rounds(&acc[0], w, xT, rounds)
	case 2:
		dotBF16Rounds2(a, w, xT, xstride, rounds)
	case 3:
		dotBF16Rounds3(a, w, xT, xstride, rounds)
	case 4:
		dotBF16Rounds4(a, w, xT, xstride, rounds)
	default:
		panic("canon: tokensBF16Rounds: more than 4 tokens")
	}
}

// tileRounds adds the full rounds of R lane-major rows (wT, wT+stride, ..)
// times T lane-major tokens (xT, xT+stride, ..) into acc[r*T+t], for R ≤ 3
// and T ≤ 4 (len(acc) = R*T).
func tileRounds(acc [][Lanes]float32, wT, xT *float32, stride, R, T, rounds int) {
	a := &acc[0][0]
	switch R<<3 | T {
	case 1<<3 | 1:
		dotF32Rounds(&acc[0], wT, xT, rounds)
	case 1<<3 | 2:
		dotF32Rounds1x2(a, wT, stride, xT, stride, rounds)
	case 1<<3 | 3:
		dotF32Rounds1x3(a, wT, stride, xT, stride, rounds)
	case 1<<3 | 4:
		dotF32Rounds1x4(a, wT, stride, xT, stride, rounds)
	case 2<<3 | 1:
		dotF32Rounds2x1(a, wT, stride, xT, stride, rounds)
	case 2<<3 | 2:
		dotF32Rounds2x2(a, wT, stride, xT, stride, rounds)
	case 2<<3 | 3:
		dotF32Rounds2x3(a, wT, stride, xT, stride, rounds)
	case 2<<3 | 4:
		dotF32Rounds2x4(a, wT, stride, xT, stride, rounds)
	case 3<<3 | 1:
		dotF32Rounds3x1(a, wT, stride, xT, stride, rounds)
	case 3<<3 | 2:
		dotF32Rounds3x2(a, wT, stride, xT, stride, rounds)
	case 3<<3 | 3:
		dotF32Rounds3x3(a, wT, stride, xT, stride, rounds)
	case 3<<3 | 4:
		dotF32Rounds3x4(a, wT, stride, xT, stride, rounds)
	default:
		panic("canon: tileRounds: tile larger than 3 rows by 4 tokens")
	}
}
