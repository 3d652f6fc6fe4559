package canon

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFP8SumsDecode: the decoding of every code that is not NaN, at each of
// the 8 positions of a vector chunk, against E4M3Int: with the activation
// 1.0 (E4M3Int 512) the group sum is E4M3Int(c)·512 exactly. One group of 8
// is all vector kernel where there is one (HasVectorKernels), all Go where
// there is not.
func TestFP8SumsDecode(t *testing.T) {
	xw := make([]float64, 8)
	FP8Wide(xw, []byte{0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38})
	for c := range 256 {
		if E4M3IsNaN(byte(c)) {
			continue
		}
		for pos := range 8 {
			w := make([]byte, 8)
			w[pos] = byte(c)
			var s [1]float64
			var s4 [4]float64
			fp8GroupSums(s[:], w, xw, 0, 8)
			fp8GroupSums4(s4[:], w, xw, xw, xw, xw, 0, 8)
			want := float64(E4M3Int(byte(c))) * 512
			for j, got := range append(s[:], s4[:]...) {
				if got != want || got == 0 && math.Signbit(got) {
					t.Fatalf("code %#02x at position %d (sum %d): %g, want %g", c, pos, j, got, want)
				}
			}
		}
	}
	t.Logf("vector kernels: %v", HasVectorKernels())
}

// fp8IntSums is the exact group sums P of w against codes q in int64 (the
// definition DotFP8 uses).
func fp8IntSums(w, q []byte, bk int) []int64 {
	var P []int64
	for g := 0; g*bk < len(w); g++ {
		var p int64
		for k := g * bk; k < min(len(w), (g+1)*bk); k++ {
			p += int64(E4M3Int(w[k])) * int64(E4M3Int(q[k]))
		}
		P = append(P, p)
	}
	return P
}

// TestFP8GroupSums: the float64 group sums (kernel and Go tails) equal the
// int64 sums P exactly, over lengths with and without partial groups and
// tails, more groups than one chunk, and codes of every kind (−0 and
// subnormal often, the largest magnitudes often so that the sums are big).
func TestFP8GroupSums(t *testing.T) {
	r := fp8Rand{rand.New(rand.NewPCG(5, 7))}
	for _, bk := range []int{1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 64, 100, 128, 129, 136, 1000} {
		for _, K := range []int{1, 7, 8, 9, 63, 128, 257, 300, bk*40 + 5, bk * 33} {
			G := FP8Groups(K, bk)
			w, q := r.codes(K), r.codes(K)
			if r.IntN(3) == 0 { // the largest products everywhere, one sign
				for k := range w {
					w[k], q[k] = 0x7E, 0xFE
				}
			}
			want := fp8IntSums(w, q, bk)
			var xw [4][]float64
			for j := range xw {
				xw[j] = make([]float64, K)
				FP8Wide(xw[j], q)
			}
			for g0 := 0; g0 < G; g0 += fp8Chunk {
				n := min(fp8Chunk, G-g0)
				sums := make([]float64, n)
				sums4 := make([]float64, 4*n)
				fp8GroupSums(sums, w, xw[0], g0, bk)
				fp8GroupSums4(sums4, w, xw[0], xw[1], xw[2], xw[3], g0, bk)
				for i := range n {
					P := want[g0+i]
					for j, S := range []float64{sums[i], sums4[4*i], sums4[4*i+1], sums4[4*i+2], sums4[4*i+3]} {
						if S != float64(P) || S == 0 && math.Signbit(S) || int64(S) != P {
							t.Fatalf("bk=%d K=%d group %d (sum %d): %v, want %d", bk, K, g0+i, j, S, P)
						}
					}
				}
			}
		}
	}
}

// TestDotFP8W: DotFP8W and DotFP8x4W against DotFP8 and DotFP8x4 (and the
// exact-rational reference on the shorter rows), with bk from 1 to past
// 128, K not a multiple of 8 nor of bk, and the activations of TestDotFP8
// (all-zero groups, underflowing and subnormal s, −0, saturated codes).
func TestDotFP8W(t *testing.T) {
	r := fp8Rand{rand.New(rand.NewPCG(3, 9))}
	bks := []int{1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 23, 24, 31, 32, 33, 48, 63, 64, 65, 100, 127, 128, 129, 136, 200, 256}
	checked, ref := 0, 0
	for _, bk := range bks {
		for _, K := range []int{0, 1, 5, 8, 13, 64, 127, 128, 129, 250, 300, 513, 1031, 4100} {
			G := FP8Groups(K, bk)
			for range 2 {
				w := r.codes(K)
				ws := r.scales(G)
				var xi [4][]int32
				var xw [4][]float64
				var ss [4][]float32
				var qs [4][]byte
				for j := range 4 {
					x := r.x(K, bk)
					qs[j] = make([]byte, K)
					ss[j] = make([]float32, G)
					if !QuantizeFP8(qs[j], ss[j], x, bk) {
						t.Fatal("not finite")
					}
					xi[j] = make([]int32, K)
					FP8Ints(xi[j], qs[j])
					xw[j] = make([]float64, K)
					FP8Wide(xw[j], qs[j])
				}
				x4 := make([]int32, 4*K)
				FP8Ints4(x4, qs[0], qs[1], qs[2], qs[3])
				v0, v1, v2, v3 := DotFP8x4(w, ws, x4, ss[0], ss[1], ss[2], ss[3], bk)
				u0, u1, u2, u3 := DotFP8x4W(w, ws, xw[0], xw[1], xw[2], xw[3], ss[0], ss[1], ss[2], ss[3], bk)
				vs, us := []float32{v0, v1, v2, v3}, []float32{u0, u1, u2, u3}
				for j := range 4 {
					want := DotFP8(w, ws, xi[j], ss[j], bk)
					if K <= 300 && j == 0 {
						if rw := refDotFP8(w, ws, qs[j], ss[j], bk); !sameBits(rw, want) {
							t.Fatalf("K=%d bk=%d: DotFP8 = %g, reference %g", K, bk, want, rw)
						}
						ref++
					}
					got := DotFP8W(w, ws, xw[j], ss[j], bk)
					if !sameBits(got, want) || !sameBits(us[j], want) || !sameBits(vs[j], want) {
						t.Fatalf("K=%d bk=%d row %d: DotFP8W = %g (%#x), DotFP8x4W = %g (%#x), DotFP8x4 = %g, want DotFP8 = %g (%#x)",
							K, bk, j, got, math.Float32bits(got), us[j], math.Float32bits(us[j]), vs[j], want, math.Float32bits(want))
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d outputs checked against DotFP8 (%d also against the exact reference); vector kernels: %v", checked, ref, HasVectorKernels())
}
