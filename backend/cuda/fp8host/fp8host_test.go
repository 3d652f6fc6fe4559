//go:build cgo

package fp8host

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
)

// TestCodecMatchesCanon: the kernels' E4M3 encoding agrees with
// canon.EncodeE4M3 on every float32 near the E4M3 values' boundaries and
// on a sweep of the rest, their integer decoding with canon.E4M3Int on
// every code, and their half-precision widening with backend.F16 on
// every half.
func TestCodecMatchesCanon(t *testing.T) {
	check := func(b uint32) {
		x := math.Float32frombits(b)
		if got, want := Encode(x), canon.EncodeE4M3(x); got != want {
			t.Fatalf("encode %g (%08x): %#02x, want %#02x", x, b, got, want)
		}
	}
	for b := uint64(0); b < 1<<32; b += 4093 {
		check(uint32(b))
	}
	// Around every E4M3 value and the midpoints between neighbours (the
	// ties), both signs.
	for c := range 256 {
		v := canon.DecodeE4M3(byte(c))
		if v != v {
			continue
		}
		next := canon.DecodeE4M3(byte(c + 1))
		for _, m := range []float32{v, (v + next) / 2} {
			if m != m {
				continue
			}
			b := math.Float32bits(m)
			for d := uint32(0); d < 5; d++ {
				check(b + d)
				check(b - d)
			}
		}
	}
	for c := range 256 {
		if got, want := Int(byte(c)), canon.E4M3Int(byte(c)); got != want {
			t.Errorf("E4M3Int(%#02x) = %d, want %d", c, got, want)
		}
	}
	for h := range 1 << 16 {
		if got, want := F16(uint16(h)), backend.F16(uint16(h)); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("F16(%#04x) = %08x, want %08x", h, math.Float32bits(got), math.Float32bits(want))
		}
	}
}

// aligned returns n int32 whose first is 16-byte aligned (the kernel's
// four-at-a-time path), or, with off, 4 bytes past such a boundary.
func aligned(n int, off bool) []int32 {
	b := make([]int32, n+8)
	i := 0
	for uintptr(unsafe.Pointer(&b[i]))%16 != 0 {
		i++
	}
	if off {
		i++
	}
	return b[i : i+n]
}

// activations are T rows of K values: normal values with specials mixed
// in (±0, subnormals, ±3e38), some groups all zero or all tiny, and some
// rows with a NaN or an infinity.
func activations(r *rand.Rand, T, K, bk int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, math.SmallestNonzeroFloat32, 3e38, -3e38, 448, -448, 1}
	x := make([]float32, T*K)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(20)-10))
		if r.IntN(40) == 0 {
			x[i] = specials[r.IntN(len(specials))]
		}
	}
	for t := range T {
		for g := 0; g*bk < K; g++ {
			k0, k1 := t*K+g*bk, t*K+min(K, (g+1)*bk)
			switch r.IntN(8) {
			case 0:
				clear(x[k0:k1])
			case 1:
				for k := k0; k < k1; k++ {
					x[k] = math.Float32frombits(r.Uint32() & 0x801FFFFF)
				}
			}
		}
		if r.IntN(5) == 0 {
			x[t*K+r.IntN(K)] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[r.IntN(3)]
		}
	}
	return x
}

// reference is canon's quantisation of x: each row's E4M3 integers and
// group scales, and whether it was finite.
func reference(x []float32, T, K, bk int) (xi []int32, s []float32, finite []bool) {
	G := (K + bk - 1) / bk
	q := make([]byte, K)
	xi, s, finite = make([]int32, T*K), make([]float32, T*G), make([]bool, T)
	for t := range T {
		finite[t] = canon.QuantizeFP8(q, s[t*G:(t+1)*G], x[t*K:(t+1)*K], bk)
		canon.FP8Ints(xi[t*K:(t+1)*K], q)
	}
	return xi, s, finite
}

var shapes = []struct{ N, K, bn, bk int }{
	{1, 1, 1, 1}, {5, 7, 3, 16}, {33, 50, 3, 16}, {4, 16, 3, 16}, {7, 2049, 3, 128},
	{5, 1, 128, 128}, {33, 129, 128, 128}, {30, 300, 128, 128}, {1, 520, 128, 128}, {130, 256, 128, 128},
	{24, 256, 16, 128}, {40, 24, 16, 16}, {9, 96, 2, 12}, {3, 12, 5, 6},
}

// TestQuantizeMatchesCanon: fp8_quantize writes canon's E4M3 integers and
// group scales for every finite row, and flags a group of every row canon
// found non-finite (and none of a finite one).
func TestQuantizeMatchesCanon(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range shapes {
		K, bk := sh.K, sh.bk
		G := (K + bk - 1) / bk
		for _, T := range []int{1, 3, 8, 9, 17} {
			x := activations(r, T, K, bk)
			xi, s, bad := make([]int32, T*K), make([]float32, T*G), make([]int32, T*G)
			if err := Quantize(xi, s, bad, x, T, K, bk); err != nil {
				t.Fatal(err)
			}
			wxi, ws, finite := reference(x, T, K, bk)
			for tt := range T {
				flagged := false
				for g := range G {
					flagged = flagged || bad[tt*G+g] != 0
				}
				if flagged == finite[tt] {
					t.Fatalf("K=%d bk=%d T=%d row %d: flagged %v, canon finite %v", K, bk, T, tt, flagged, finite[tt])
				}
				if !finite[tt] {
					continue
				}
				for g := range G {
					if math.Float32bits(s[tt*G+g]) != math.Float32bits(ws[tt*G+g]) {
						t.Fatalf("K=%d bk=%d T=%d row %d group %d: scale %g, want %g", K, bk, T, tt, g, s[tt*G+g], ws[tt*G+g])
					}
				}
				for k := range K {
					if xi[tt*K+k] != wxi[tt*K+k] {
						t.Fatalf("K=%d bk=%d T=%d row %d column %d (x %g): %d, want %d", K, bk, T, tt, k, x[tt*K+k], xi[tt*K+k], wxi[tt*K+k])
					}
				}
			}
		}
	}
}

// scales are rows×cols positive finite block scales stored as sdt (as
// bytes), subnormal ones among them, and their float32 values.
func scales(r *rand.Rand, sdt, n int) ([]byte, []float32) {
	var b []byte
	v := make([]float32, n)
	for i := range n {
		f := float32(r.Float64() * math.Ldexp(1, -r.IntN(14)))
		switch sdt {
		case ScaleF32:
			if r.IntN(10) == 0 {
				f = math.Float32frombits(r.Uint32() & 0x7FFFFF)
			}
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
			v[i] = f
		case ScaleBF16:
			h := uint16(math.Float32bits(f) >> 16)
			b = binary.LittleEndian.AppendUint16(b, h)
			v[i] = math.Float32frombits(uint32(h) << 16)
		default:
			e := uint16(1 + r.IntN(30))
			if r.IntN(10) == 0 {
				e = 0
			}
			h := e<<10 | uint16(r.IntN(1024))
			b = binary.LittleEndian.AppendUint16(b, h)
			v[i] = backend.F16(h)
		}
	}
	return b, v
}

// TestMatMulMatchesCanon: matmul_fp8 gives canon.DotFP8's bits for every
// output (NaN for a non-finite row), for scales stored as F32, BF16 and
// F16, on its four-at-a-time path and on its byte path (codes or
// activations misaligned, or K or bk not a multiple of 4).
func TestMatMulMatchesCanon(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for si, sh := range shapes {
		N, K, bn, bk := sh.N, sh.K, sh.bn, sh.bk
		G := (K + bk - 1) / bk
		// Every scale dtype on both paths with one row; 9 rows (a block of
		// tokens and one more) on both paths; 17 rows with one dtype and
		// path a shape (the host warp is slow: a coroutine switch per lane
		// and exchange).
		type run struct {
			T, sdt int
			mis    bool
		}
		var runs []run
		for sdt := range 3 {
			runs = append(runs, run{1, sdt, false}, run{1, sdt, true})
		}
		runs = append(runs, run{9, ScaleF32, false}, run{9, ScaleBF16, true}, run{17, si % 3, si%2 == 1})
		for _, c := range runs {
			T, sdt, mis := c.T, c.sdt, c.mis
			name := fmt.Sprintf("%dx%d blocks %dx%d T=%d sdt=%d misaligned=%v", N, K, bn, bk, T, sdt, mis)
			x := activations(r, T, K, bk)
			xi, s, bad := aligned(T*K, mis), make([]float32, T*G), make([]int32, T*G)
			if err := Quantize(xi, s, bad, x, T, K, bk); err != nil {
				t.Fatal(err)
			}
			wb := make([]byte, N*K+1)
			W := wb[:N*K]
			if mis {
				W = wb[1:]
			}
			for i := range W {
				for W[i] = byte(r.Uint32()); canon.E4M3IsNaN(W[i]); W[i] = byte(r.Uint32()) {
				}
			}
			sb, sv := scales(r, sdt, ((N+bn-1)/bn)*G)
			y := make([]float32, T*N)
			if err := MatMul(y, W, sb, sdt, xi, s, bad, N, K, T, bn, bk); err != nil {
				t.Fatal(err)
			}
			wxi, ws, finite := reference(x, T, K, bk)
			for tt := range T {
				for n := range N {
					got := y[tt*N+n]
					if !finite[tt] {
						if got == got {
							t.Fatalf("%s: row %d is not finite, output %d is %g, want NaN", name, tt, n, got)
						}
						continue
					}
					want := canon.DotFP8(W[n*K:(n+1)*K], sv[(n/bn)*G:(n/bn+1)*G], wxi[tt*K:(tt+1)*K], ws[tt*G:(tt+1)*G], bk)
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s: output (%d, %d) is %g (%08x), want %g (%08x)", name, tt, n, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

// TestShortBuffers: a launch whose buffers are shorter than its shape says
// is refused before the C code runs (it would read or write past them).
func TestShortBuffers(t *testing.T) {
	x := make([]float32, 2*16)
	if err := Quantize(make([]int32, 2*16), make([]float32, 1), make([]int32, 2), x, 2, 16, 8); err == nil {
		t.Error("Quantize with 1 group scale for 2 rows of 2 groups: no error")
	}
	xi, s, bad := make([]int32, 16), make([]float32, 2), make([]int32, 2)
	if err := MatMul(make([]float32, 4), make([]byte, 4*16), make([]byte, 4), ScaleF32, xi, s, bad, 4, 16, 1, 2, 8); err == nil {
		t.Error("MatMul with 1 F32 scale for 2×2 blocks: no error")
	}
	if err := MatMul(make([]float32, 3), make([]byte, 4*16), make([]byte, 16), ScaleF32, xi, s, bad, 4, 16, 1, 2, 8); err == nil {
		t.Error("MatMul with 3 outputs for 4: no error")
	}
}
