package canon

import "math"

// Block-FP8 linear layers (W8A8, what transformers' fine-grained FP8Linear
// computes; EXACTNESS.md, "Block-FP8 linear layers"). For y = W·x with W
// [N,K] stored as E4M3 codes and one float32 scale per bn×bk block:
//
//  1. Each activation row is quantised in groups of bk columns (the last
//     group may be partial): a = max|x_k|, s = RN(a/448), q_k =
//     EncodeE4M3(RN(x_k/s)), or q_k = 0 when s == 0 (QuantizeFP8). A
//     non-finite x_k makes the whole output row NaN.
//  2. For each group g, P = Σ_k E4M3Int(q_k)·E4M3Int(w_k) exactly in int64
//     (order-free), and p = RN(P)·2^-18 (exact scaling).
//  3. y_n = Σ_g, for g = 0, 1, 2, … in order from +0, of
//     RN(RN(p_g·s_g)·S[n/bn][g]): each product and sum rounded to float32, no
//     FMA (DotFP8).

// FP8MaxGroup is the largest group length bk allowed. With it, |P| ≤
// 2^16·229376² < 2^52: P is exact in int64 and in float64, so float32(P) is
// one rounding.
const FP8MaxGroup = 1 << 16

// e4m3Int holds the value of each finite E4M3 code times 2^9, an integer of
// magnitude at most 448·2^9 = 229376. The NaN codes (0x7F, 0xFF) hold 0:
// they are not values. QuantizeFP8 never produces them, and a weight matrix
// holding one must be refused where it is loaded (FirstNaNE4M3).
var e4m3Int = func() (t [256]int32) {
	for b := range 256 {
		if v := DecodeE4M3(byte(b)); v == v {
			t[b] = int32(v * 512) // exact: v is a multiple of 2^-9 below 2^9
		}
	}
	return t
}()

// E4M3Int is the value of E4M3 code b times 2^9, exactly (0 for the NaN
// codes 0x7F and 0xFF).
func E4M3Int(b byte) int32 { return e4m3Int[b] }

// E4M3IsNaN reports whether b is one of the two NaN codes.
func E4M3IsNaN(b byte) bool { return b&0x7F == 0x7F }

// FirstNaNE4M3 returns the index of the first NaN code in w, or −1.
func FirstNaNE4M3(w []byte) int {
	for i, b := range w {
		if b&0x7F == 0x7F {
			return i
		}
	}
	return -1
}

// FP8Groups is the number of groups of bk in a row of k values
// (ceil(k/bk)).
func FP8Groups(k, bk int) int { return (k + bk - 1) / bk }

// QuantizeFP8 quantises the activation row x in groups of bk: for group g
// (columns g·bk … min((g+1)·bk, len(x))−1), s[g] = RN(a/448) with a the
// largest |x_k| of the group, and q[k] = EncodeE4M3(RN(x[k]/s[g])), or 0
// when s[g] == 0 (an all-zero group, or one whose a/448 underflows). It
// returns false, with q and s zeroed, if any x is NaN or infinite: the
// output row is then NaN. q must hold len(x) codes and s FP8Groups(len(x),
// bk) scales.
func QuantizeFP8(q []byte, s []float32, x []float32, bk int) (finite bool) {
	if bk < 1 || bk > FP8MaxGroup {
		panic("canon: QuantizeFP8: group length out of range")
	}
	K := len(x)
	q, s = q[:K], s[:FP8Groups(K, bk)]
	for g := range s {
		xg := x[g*bk : min((g+1)*bk, K)]
		qg := q[g*bk : g*bk+len(xg)]
		var a float32
		for _, v := range xg {
			v = abs32(v)
			if !(v <= math.MaxFloat32) { // NaN or ±Inf
				clear(q)
				clear(s)
				return false
			}
			a = max(a, v)
		}
		sg := a / 448
		s[g] = sg
		if sg == 0 {
			clear(qg)
			continue
		}
		for i, v := range xg {
			qg[i] = EncodeE4M3(v / sg)
		}
	}
	return true
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// FP8Ints writes E4M3Int of each code of q to dst (the form DotFP8 takes).
func FP8Ints(dst []int32, q []byte) {
	dst = dst[:len(q)]
	for i, b := range q {
		dst[i] = e4m3Int[b]
	}
}

// fp8Scale2m18 is 2^-18.
const fp8Scale2m18 = 1.0 / (1 << 18)

// fp8Term is group g's term RN(RN(p·s)·sw) of a block-FP8 output, with p =
// RN(P)·2^-18. |P| < 2^52, so float64(P) is exact and float32 of it is the
// one rounding; RN(P) is 0 or in [1, 2^52], so the scaling by 2^-18 stays
// normal and is exact.
func fp8Term(P int64, s, sw float32) float32 {
	p := float32(float64(P)) * fp8Scale2m18
	return float32(float32(p*s) * sw)
}

// DotFP8 is the output of one weight row against one quantised activation
// row: w the row's E4M3 codes (len K, no NaN code), ws the scales of its
// block row (S[n/bn][0 … FP8Groups(K, bk)−1]), xi = FP8Ints of the row's
// codes and s its group scales from QuantizeFP8. The caller gives NaN for a
// row QuantizeFP8 found non-finite.
func DotFP8(w []byte, ws []float32, xi []int32, s []float32, bk int) float32 {
	K := len(w)
	xi = xi[:K]
	G := FP8Groups(K, bk)
	ws, s = ws[:G], s[:G]
	var acc float32
	for g := range G {
		k0, k1 := g*bk, min((g+1)*bk, K)
		wg, xg := w[k0:k1], xi[k0:k1]
		xg = xg[:len(wg)]
		acc = acc + fp8Term(groupFP8(wg, xg), s[g], ws[g])
	}
	return acc
}

// FP8Ints4 writes the FP8Ints of four code rows of equal length to dst
// interleaved, dst[4k+j] = E4M3Int(qj[k]): the form DotFP8x4 takes.
func FP8Ints4(dst []int32, q0, q1, q2, q3 []byte) {
	K := len(q0)
	dst = dst[:4*K]
	q1, q2, q3 = q1[:K], q2[:K], q3[:K]
	for k, b := range q0 {
		d := dst[4*k : 4*k+4 : 4*k+4]
		d[0], d[1], d[2], d[3] = e4m3Int[b], e4m3Int[q1[k]], e4m3Int[q2[k]], e4m3Int[q3[k]]
	}
}

// DotFP8x4 is DotFP8 of one weight row against four activation rows, their
// integer values interleaved by FP8Ints4 (x4, len 4K) and their group scales
// s0…s3: the weight codes are read once for all four, and the results are
// the bits of four DotFP8 calls.
func DotFP8x4(w []byte, ws []float32, x4 []int32, s0, s1, s2, s3 []float32, bk int) (y0, y1, y2, y3 float32) {
	K := len(w)
	x4 = x4[:4*K]
	G := FP8Groups(K, bk)
	ws = ws[:G]
	s0, s1, s2, s3 = s0[:G], s1[:G], s2[:G], s3[:G]
	for g := range G {
		k0, k1 := g*bk, min((g+1)*bk, K)
		wg := w[k0:k1]
		xg := x4[4*k0 : 4*k1]
		P0, P1, P2, P3 := groupFP8x4(wg, xg)
		sw := ws[g]
		y0 = y0 + fp8Term(P0, s0[g], sw)
		y1 = y1 + fp8Term(P1, s1[g], sw)
		y2 = y2 + fp8Term(P2, s2[g], sw)
		y3 = y3 + fp8Term(P3, s3[g], sw)
	}
	return
}

// groupFP8 and groupFP8x4 are the exact group sums P. They are not inlined
// so that their accumulators stay in registers (inlined into the loop over
// groups, the compiler spilled them to the stack on every term).

//go:noinline
func groupFP8(w []byte, x []int32) int64 {
	x = x[:len(w)]
	var P, Q int64 // two chains; integer addition is exact in any order
	i := 0
	for ; i+2 <= len(w); i += 2 {
		P += int64(e4m3Int[w[i]]) * int64(x[i])
		Q += int64(e4m3Int[w[i+1]]) * int64(x[i+1])
	}
	if i < len(w) {
		P += int64(e4m3Int[w[i]]) * int64(x[i])
	}
	return P + Q
}

//go:noinline
func groupFP8x4(w []byte, x4 []int32) (P0, P1, P2, P3 int64) {
	x4 = x4[:4*len(w)]
	for i, b := range w {
		v := int64(e4m3Int[b])
		x := x4[4*i : 4*i+4 : 4*i+4]
		P0 += v * int64(x[0])
		P1 += v * int64(x[1])
		P2 += v * int64(x[2])
		P3 += v * int64(x[3])
	}
	return
}
