package canon

// The float64 form of the block-FP8 group dot, for vector kernels
// (blockfp8_amd64.s; EXACTNESS.md, "Block-FP8 linear layers"). DotFP8W and
// DotFP8x4W give the bits of DotFP8 and DotFP8x4: they compute the same
// group sums P exactly, in float64 instead of int64.
//
// A weight code w is taken as W(w) = its E4M3 value·2^-8 = E4M3Int(w)·2^-17
// (the binary16 number whose pattern is w's low 7 bits shifted left by 7,
// with w's sign: the kernels decode it with VCVTPH2PS), and an activation
// code q as X(q) = E4M3Int(q)·2^17 (FP8Wide). Each has at most 4
// significant bits, so W(w)·X(q) = E4M3Int(w)·E4M3Int(q) is exact in
// float64; every partial sum of a group is an integer of magnitude at most
// FP8MaxGroup·229376² < 2^52, so every float64 addition is exact, in any
// order, and the group's float64 sum is P itself.

// fp8WideScale is 2^17, the factor of FP8Wide.
const fp8WideScale = 1 << 17

// FP8Wide writes X(q[k]) = E4M3Int(q[k])·2^17 (exact in float64) to dst: the
// form of an activation row that DotFP8W and DotFP8x4W take.
func FP8Wide(dst []float64, q []byte) {
	dst = dst[:len(q)]
	for i, b := range q {
		dst[i] = float64(e4m3Int[b]) * fp8WideScale
	}
}

// fp8W is W(b) = E4M3Int(b)·2^-17, exact.
func fp8W(b byte) float64 { return float64(e4m3Int[b]) * (1.0 / fp8WideScale) }

// fp8Tail adds Σ W(w[k])·x[k] to S in pure Go. Each product is exact, and
// float64() keeps it a separate operation (no FMA); the sums are exact.
func fp8Tail(S float64, w []byte, x []float64) float64 {
	x = x[:len(w)]
	for i, b := range w {
		S += float64(fp8W(b) * x[i])
	}
	return S
}

// fp8TermF is fp8Term of the group sum P given as the float64 S == P.
func fp8TermF(S float64, s, sw float32) float32 {
	p := float32(S) * fp8Scale2m18
	return float32(float32(p*s) * sw)
}

// fp8Chunk is how many groups' sums DotFP8W collects per kernel call (on
// the stack).
const fp8Chunk = 32

// DotFP8W is DotFP8(w, ws, xi, s, bk) given xw = FP8Wide of the row's codes
// instead of their FP8Ints: the same bits. w must hold no NaN code (as for
// DotFP8, whose weights are refused if they do).
func DotFP8W(w []byte, ws []float32, xw []float64, s []float32, bk int) float32 {
	K := len(w)
	xw = xw[:K]
	G := FP8Groups(K, bk)
	ws, s = ws[:G], s[:G]
	var sums [fp8Chunk]float64
	var acc float32
	for g0 := 0; g0 < G; g0 += fp8Chunk {
		n := min(fp8Chunk, G-g0)
		fp8GroupSums(sums[:n], w, xw, g0, bk)
		for i, S := range sums[:n] {
			acc = acc + fp8TermF(S, s[g0+i], ws[g0+i])
		}
	}
	return acc
}

// fp8GroupSums writes the sums P of groups g0 … g0+len(sums)−1 of w·xw:
// with the vector kernel, the multiples of 8 terms at the start of each
// group, then the rest of it in Go.
func fp8GroupSums(sums []float64, w []byte, xw []float64, g0, bk int) {
	K := len(w)
	xw = xw[:K]
	n := len(sums)
	if useVector && bk >= 8 {
		full := n // groups with bk terms
		if (g0+n)*bk > K {
			full--
		}
		if m := bk &^ 7; full > 0 {
			k0 := g0 * bk
			fp8Sums(&sums[0], &w[k0], &xw[k0], full, m, bk)
		}
		if full < n {
			k0 := (g0 + full) * bk
			fp8Sums(&sums[full], &w[k0], &xw[k0], 1, (K-k0)&^7, bk)
		}
		for i := range sums {
			k0 := (g0 + i) * bk
			k1 := min(k0+bk, K)
			k := k0 + (k1-k0)&^7
			sums[i] = fp8Tail(sums[i], w[k:k1], xw[k:k1])
		}
		return
	}
	for i := range sums {
		k0 := (g0 + i) * bk
		k1 := min(k0+bk, K)
		sums[i] = fp8Tail(0, w[k0:k1], xw[k0:k1])
	}
}

// DotFP8x4W is DotFP8W of one weight row against four activation rows
// x0…x3 (FP8Wide forms, each of len(w)) with group scales s0…s3: the
// weight codes are decoded once for all four, and the results are the bits
// of four DotFP8 calls.
func DotFP8x4W(w []byte, ws []float32, x0, x1, x2, x3 []float64, s0, s1, s2, s3 []float32, bk int) (y0, y1, y2, y3 float32) {
	K := len(w)
	x0, x1, x2, x3 = x0[:K], x1[:K], x2[:K], x3[:K]
	G := FP8Groups(K, bk)
	ws = ws[:G]
	s0, s1, s2, s3 = s0[:G], s1[:G], s2[:G], s3[:G]
	var sums [4 * fp8Chunk]float64
	for g0 := 0; g0 < G; g0 += fp8Chunk {
		n := min(fp8Chunk, G-g0)
		fp8GroupSums4(sums[:4*n], w, x0, x1, x2, x3, g0, bk)
		for i := range n {
			g := g0 + i
			S := sums[4*i : 4*i+4 : 4*i+4]
			sw := ws[g]
			y0 = y0 + fp8TermF(S[0], s0[g], sw)
			y1 = y1 + fp8TermF(S[1], s1[g], sw)
			y2 = y2 + fp8TermF(S[2], s2[g], sw)
			y3 = y3 + fp8TermF(S[3], s3[g], sw)
		}
	}
	return
}

// fp8GroupSums4 is fp8GroupSums of four rows: sums[4i+j] for row xj.
func fp8GroupSums4(sums []float64, w []byte, x0, x1, x2, x3 []float64, g0, bk int) {
	K := len(w)
	x0, x1, x2, x3 = x0[:K], x1[:K], x2[:K], x3[:K]
	n := len(sums) / 4
	vec := useVector && bk >= 8
	if vec {
		full := n
		if (g0+n)*bk > K {
			full--
		}
		if m := bk &^ 7; full > 0 {
			k0 := g0 * bk
			fp8Sums4(&sums[0], &w[k0], &x0[k0], &x1[k0], &x2[k0], &x3[k0], full, m, bk)
		}
		if full < n {
			k0 := (g0 + full) * bk
			fp8Sums4(&sums[4*full], &w[k0], &x0[k0], &x1[k0], &x2[k0], &x3[k0], 1, (K-k0)&^7, bk)
		}
	}
	for i := range n {
		k0 := (g0 + i) * bk
		k1 := min(k0+bk, K)
		k := k0
		if vec {
			k += (k1 - k0) &^ 7
		} else {
			clear(sums[4*i : 4*i+4])
		}
		S := sums[4*i : 4*i+4 : 4*i+4]
		wk := w[k:k1]
		S[0] = fp8Tail(S[0], wk, x0[k:k1])
		S[1] = fp8Tail(S[1], wk, x1[k:k1])
		S[2] = fp8Tail(S[2], wk, x2[k:k1])
		S[3] = fp8Tail(S[3], wk, x3[k:k1])
	}
}
