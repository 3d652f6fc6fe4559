package canon

// Lane-major layout: the canonical reduction order rearranged for SIMD.
//
// A full round of the canonical reduction covers Stride (256) terms: lane l
// adds terms l*8 .. l*8+7 of the round, in that order. A CPU vector of 8
// float32 can hold one term index j of 8 consecutive lanes 8g .. 8g+7 (lane
// group g), so that adding vectors j = 0 .. 7 into one accumulator vector
// per group performs, for each of its 8 lanes, exactly the canonical
// additions in the canonical order. Interleave writes a vector in that
// order:
//
//	dst[r*256 + g*64 + j*8 + i] = x[r*256 + (8g+i)*8 + j]   (i, j < 8; g < 4)
//
// for every full round r; terms after the last full round are not
// interleaved (the kernels take them from the original vector).
//
// The *X dot products below give bit-identical results to DotBF16 and DotF32
// (tests check every length, with tails, against Dot): only the order in
// which independent lanes are visited changes, never the order of the
// additions inside a lane.

// Rounds is the number of full rounds in a reduction of n terms.
func Rounds(n int) int { return n / Stride }

// Interleave writes the full rounds of x into dst in lane-major order and
// returns the number of terms written (Rounds(len(x))*Stride).
func Interleave(dst, x []float32) int {
	m := Rounds(len(x)) * Stride
	dst = dst[:m]
	for r := 0; r < m; r += Stride {
		for g := 0; g < Lanes/8; g++ {
			for i := 0; i < 8; i++ {
				src := x[r+(8*g+i)*Chunk : r+(8*g+i)*Chunk+Chunk : r+(8*g+i)*Chunk+Chunk]
				d := dst[r+g*64+i:]
				d[0], d[8], d[16], d[24], d[32], d[40], d[48], d[56] = src[0], src[1], src[2], src[3], src[4], src[5], src[6], src[7]
			}
		}
	}
	return m
}

// InterleaveBF16 is Interleave of the widened BF16 vector w.
func InterleaveBF16(dst []float32, w []uint16) int {
	m := Rounds(len(w)) * Stride
	dst = dst[:m]
	for r := 0; r < m; r += Stride {
		for g := 0; g < Lanes/8; g++ {
			for i := 0; i < 8; i++ {
				src := w[r+(8*g+i)*Chunk : r+(8*g+i)*Chunk+Chunk : r+(8*g+i)*Chunk+Chunk]
				d := dst[r+g*64+i:]
				d[0], d[8], d[16], d[24] = BF16(src[0]), BF16(src[1]), BF16(src[2]), BF16(src[3])
				d[32], d[40], d[48], d[56] = BF16(src[4]), BF16(src[5]), BF16(src[6]), BF16(src[7])
			}
		}
	}
	return m
}

// HasVectorKernels reports whether the *X dot products and DotFP8W,
// DotFP8x4W run vector kernels on this machine (amd64 with AVX2 and F16C);
// elsewhere they fall back to DotBF16, DotF32 and pure Go, with the same
// bits.
func HasVectorKernels() bool { return useVector }

// DotBF16X is DotBF16(w, x) given xT, the Interleave of x.
func DotBF16X(w []uint16, x, xT []float32) float32 {
	if !useVector {
		return DotBF16(w, x)
	}
	n := len(x)
	w = w[:n]
	var acc [Lanes]float32
	k := Rounds(n) * Stride
	if k > 0 {
		_ = xT[k-1]
		dotBF16Rounds(&acc, &w[0], &xT[0], k/Stride)
	}
	tailBF16(&acc, w, x, k)
	return CombineN(&acc, LanesUsed(n))
}

// DotBF16T is DotBF16(w, x) given wT = InterleaveBF16(w) and xT =
// Interleave(x): for a weight row reused by several tokens.
func DotBF16T(w []uint16, x, wT, xT []float32) float32 {
	if !useVector {
		return DotBF16(w, x)
	}
	var acc [Lanes]float32
	k := laneMajorRounds(&acc, wT, xT, len(x))
	tailBF16(&acc, w[:len(x)], x, k)
	return CombineN(&acc, LanesUsed(len(x)))
}

// DotF32X is DotF32(w, x) given wT and xT, the Interleave of w and x.
func DotF32X(w, x, wT, xT []float32) float32 {
	if !useVector {
		return DotF32(w, x)
	}
	var acc [Lanes]float32
	k := laneMajorRounds(&acc, wT, xT, len(x))
	tailF32(&acc, w[:len(x)], x, k)
	return CombineN(&acc, LanesUsed(len(x)))
}

// laneMajorRounds adds the full rounds of an n-term product of interleaved
// wT and xT into acc and returns where the partial round starts.
func laneMajorRounds(acc *[Lanes]float32, wT, xT []float32, n int) int {
	k := Rounds(n) * Stride
	if k > 0 {
		_, _ = wT[k-1], xT[k-1]
		dotF32Rounds(acc, &wT[0], &xT[0], k/Stride)
	}
	return k
}
