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
// The *X and *T dot products below give bit-identical results to DotBF16
// and DotF32 (tests check every length, with tails, against Dot): only the
// order in which independent lanes, rows and tokens are visited changes,
// never the order of the additions inside a lane. The Dots* forms compute
// several outputs at once, for weight rows reused by several tokens: the
// kernel loads (or transposes) a weight vector once for up to four tokens,
// each with its own accumulators.

// Rounds is the number of full rounds in a reduction of n terms.
func Rounds(n int) int { return n / Stride }

// Interleave writes the full rounds of x into dst in lane-major order and
// returns the number of terms written (Rounds(len(x))*Stride).
func Interleave(dst, x []float32) int {
	m := Rounds(len(x)) * Stride
	dst = dst[:m]
	if useVector {
		if m > 0 {
			interleaveF32Rounds(&dst[0], &x[0], m/Stride)
		}
		return m
	}
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
	if useVector {
		if m > 0 {
			interleaveBF16Rounds(&dst[0], &w[0], m/Stride)
		}
		return m
	}
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
	return combine(&acc)
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
	return combine(&acc)
}

// DotF32X is DotF32(w, x) given wT and xT, the Interleave of w and x.
func DotF32X(w, x, wT, xT []float32) float32 {
	if !useVector {
		return DotF32(w, x)
	}
	var acc [Lanes]float32
	k := laneMajorRounds(&acc, wT, xT, len(x))
	tailF32(&acc, w[:len(x)], x, k)
	return combine(&acc)
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

// combine is CombineN(acc, LanesUsed(n)) for the vector kernels, whatever
// the n: the butterfly in vector registers (combineLanes). Skipping the
// steps that add untouched lanes (+0) is what CombineN does, and it is
// bit-identical to the whole butterfly.
func combine(acc *[Lanes]float32) float32 {
	var y float32
	combineLanes(acc, 1, &y, 1)
	return y
}

// combineInto sets y[i*ys] = Combine(acc[i]) for every accumulator.
func combineInto(acc [][Lanes]float32, y []float32, ys int) {
	_ = y[(len(acc)-1)*ys]
	combineLanes(&acc[0], len(acc), &y[0], ys)
}

// DotsBF16X sets y[t*ys] = DotBF16(w, x[t*n:(t+1)*n]) for t < T, n =
// len(w), given xT with the Interleave of each token at xT[t*n:]: DotBF16X
// for T tokens, each lane group of the row transposed and widened in
// registers once for up to four tokens. For a few tokens, when widening the
// whole row first (DotsBF16T) does not pay.
func DotsBF16X(y []float32, ys int, w []uint16, x, xT []float32, T int) {
	n := len(w)
	if !useVector {
		for t := range T {
			y[t*ys] = DotBF16(w, x[t*n:(t+1)*n])
		}
		return
	}
	var accs [4][Lanes]float32
	k := Rounds(n) * Stride
	for t0 := 0; t0 < T; t0 += 4 {
		acc := accs[:min(4, T-t0)]
		clear(acc)
		if k > 0 {
			_ = xT[(t0+len(acc)-1)*n+k-1]
			tokensBF16Rounds(acc, &w[0], &xT[t0*n], n, k/Stride)
		}
		if k < n {
			for i := range acc {
				tailBF16(&acc[i], w, x[(t0+i)*n:(t0+i+1)*n], k)
			}
		}
		combineInto(acc, y[t0*ys:], ys)
	}
}

// TileRows and TileTokens are the tile of DotsBF16T and DotsF32X: the
// rows and tokens whose accumulators stay in registers together.
const (
	TileRows   = 3
	TileTokens = 4
)

// DotsBF16T sets y[r*yr+t*yt] = DotBF16(w[r*n:(r+1)*n], x[t*n:(t+1)*n])
// for the R = len(w)/n rows and T = len(x)/n tokens (n > 0), given wT with
// the InterleaveBF16 of each row at wT[r*n:] and xT with the Interleave of
// each token at xT[t*n:]. Tiles of 3 rows by 4 tokens stay in registers:
// each weight vector is loaded once for 4 tokens, each token vector once
// for 3 rows.
func DotsBF16T(y []float32, yr, yt int, w []uint16, wT, x, xT []float32, n int) {
	dotsTiled(y, yr, yt, w, wT, x, xT, n)
}

// DotsF32X is DotsBF16T for float32 rows w, wT holding the Interleave of
// each (DotF32X for a tile of rows and tokens).
func DotsF32X(y []float32, yr, yt int, w, wT, x, xT []float32, n int) {
	dotsTiled(y, yr, yt, w, wT, x, xT, n)
}

// dotsTiled is DotsBF16T and DotsF32X (W the rows' type).
func dotsTiled[W uint16 | float32](y []float32, yr, yt int, w []W, wT, x, xT []float32, n int) {
	R, T := len(w)/n, len(x)/n
	if !useVector {
		for r := range R {
			for t := range T {
				y[r*yr+t*yt] = dotRow(w[r*n:(r+1)*n], x[t*n:(t+1)*n])
			}
		}
		return
	}
	var accs [TileRows * TileTokens][Lanes]float32
	k := Rounds(n) * Stride
	for r0 := 0; r0 < R; r0 += TileRows {
		rr := min(TileRows, R-r0)
		for t0 := 0; t0 < T; t0 += TileTokens {
			tt := min(TileTokens, T-t0)
			acc := accs[:rr*tt]
			tile(acc, wT[r0*n:], xT[t0*n:], n, rr, tt, k)
			for i := 0; i < rr && k < n; i++ {
				wr := w[(r0+i)*n : (r0+i+1)*n]
				for j := range tt {
					tailRow(&acc[i*tt+j], wr, x[(t0+j)*n:(t0+j+1)*n], k)
				}
			}
			for i := range rr {
				combineInto(acc[i*tt:(i+1)*tt], y[(r0+i)*yr+t0*yt:], yt)
			}
		}
	}
}

// dotRow is DotBF16 or DotF32 by w's type (static calls: nothing escapes).
func dotRow[W uint16 | float32](w []W, x []float32) float32 {
	switch w := any(w).(type) {
	case []uint16:
		return DotBF16(w, x)
	case []float32:
		return DotF32(w, x)
	}
	panic("unreachable")
}

// tailRow is tailBF16 or tailF32 by w's type.
func tailRow[W uint16 | float32](acc *[Lanes]float32, w []W, x []float32, k int) {
	switch w := any(w).(type) {
	case []uint16:
		tailBF16(acc, w, x, k)
	case []float32:
		tailF32(acc, w, x, k)
	}
}

// tile clears acc and adds the first k terms (full rounds) of rows
// wT[r*n:] (r < R) times tokens xT[t*n:] (t < T) into acc[r*T+t].
func tile(acc [][Lanes]float32, wT, xT []float32, n, R, T, k int) {
	clear(acc)
	if k == 0 {
		return
	}
	_, _ = wT[(R-1)*n+k-1], xT[(T-1)*n+k-1]
	tileRounds(acc, &wT[0], &xT[0], n, R, T, k/Stride)
}
