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
