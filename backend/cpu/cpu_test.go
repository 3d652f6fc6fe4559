package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
)

// backends returns the single-threaded backend and several forced-parallel
// ones: every op must give the same bits on all of them.
func backends() []*CPU {
	out := []*CPU{New(1)}
	for _, n := range []int{2, 3, 7} {
		c := New(n)
		c.SetMinParallelWork(0)
		out = append(out, c)
	}
	return out
}

func rnd(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

func bf16Mat(r *rand.Rand, rows, cols int) *backend.Mat {
	m := &backend.Mat{Name: "w", Rows: rows, Cols: cols, BF16: make([]uint16, rows*cols)}
	for i := range m.BF16 {
		m.BF16[i] = uint16(math.Float32bits(float32(r.NormFloat64()*0.1)) >> 16)
	}
	return m
}

func f32Mat(r *rand.Rand, rows, cols int) *backend.Mat {
	return &backend.Mat{Name: "w", Rows: rows, Cols: cols, F32: rnd(r, rows*cols, 0.1)}
}

func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d = %g (%08x), want %g (%08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// sum is the canonical sum of n terms given by f (the definition, slowly).
func sum(n int, f func(i int) float32) float32 {
	terms := make([]float32, n)
	for i := range terms {
		terms[i] = f(i)
	}
	return canon.Sum(terms)
}

// dots is the canonical product of every row of w and token of x (T
// tokens): MatMul's reference.
func dots(w *backend.Mat, x []float32, T int) []float32 {
	N, K := w.Rows, w.Cols
	want := make([]float32, T*N)
	row := make([]float32, K)
	for n := range N {
		w.Row(n, row)
		for t := range T {
			want[t*N+n] = canon.Dot(row, x[t*K:(t+1)*K])
		}
	}
	return want
}

func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sz := range [][3]int{{1, 7, 5}, {1, 300, 33}, {3, 64, 8}, {5, 520, 17}, {1, 2048, 4}, {9, 1, 100}} {
		T, K, N := sz[0], sz[1], sz[2]
		for _, w := range []*backend.Mat{bf16Mat(r, N, K), f32Mat(r, N, K)} {
			x := rnd(r, T*K, 1)
			want := dots(w, x, T)
			for _, c := range backends() {
				y := make([]float32, T*N)
				on(t, c).MatMul(y, w, x, T)
				same(t, fmt.Sprintf("MatMul T=%d K=%d N=%d bf16=%v threads=%d", T, K, N, w.BF16 != nil, c.threads), y, want)
			}
		}
	}
}

// TestMatMulBatched: MatMul of 1 to 17 tokens equals the canonical dot of
// every row and token, for BF16 and F32 weights, K with and without a
// partial last round (one round and less, several rounds), N that is not a
// multiple of the kernels' 3-row tile, at 1, 2, 3 and 7 threads (split by
// rows and, for few rows, by tokens), with each path forced for every T:
// bf16RowTokens 0 (rows interleaved once, tiles of rows by tokens), the
// default, and 64 (each row transposed for every 4 tokens).
func TestMatMulBatched(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	defer func(v int) { bf16RowTokens = v }(bf16RowTokens)
	cs := backends()
	for _, K := range []int{1, 7, 255, 256, 300, 520, 1031} {
		for _, N := range []int{1, 2, 5, 13, 34} {
			for _, w := range []*backend.Mat{bf16Mat(r, N, K), f32Mat(r, N, K)} {
				for _, T := range []int{1, 2, 3, 4, 5, 7, 8, 9, 13, 17} {
					x := rnd(r, T*K, 1)
					want := dots(w, x, T)
					for _, rt := range []int{0, 4, 64} {
						bf16RowTokens = rt
						for _, c := range cs {
							y := make([]float32, T*N)
							for i := range y {
								y[i] = float32(math.NaN())
							}
							on(t, c).MatMul(y, w, x, T)
							same(t, fmt.Sprintf("MatMul T=%d K=%d N=%d bf16=%v threads=%d bf16RowTokens=%d", T, K, N, w.BF16 != nil, c.threads, rt), y, want)
						}
					}
				}
			}
		}
	}
}

func TestNorms(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, n := range []int{16, 100, 2048} {
		rows := 7
		x, z, w := rnd(r, rows*n, 2), rnd(r, rows*n, 2), rnd(r, n, 1)
		eps := float32(1e-6)
		rms, gated, l2 := make([]float32, rows*n), make([]float32, rows*n), make([]float32, rows*n)
		for i := 0; i < rows; i++ {
			xr := x[i*n : (i+1)*n]
			ss := sum(n, func(j int) float32 { return float32(xr[j] * xr[j]) })
			inv := canon.Rsqrt(ss/float32(n) + eps)
			inv2 := canon.Rsqrt(ss + eps)
			for j, v := range xr {
				rms[i*n+j] = float32(float32(v*inv) * w[j])
				gated[i*n+j] = float32(float32(w[j]*float32(v*inv)) * canon.SiLU(z[i*n+j]))
				l2[i*n+j] = float32(float32(v*inv2) * 0.125)
			}
		}
		for _, c := range backends() {
			y := slices.Clone(x)
			on(t, c).RMSNorm(y, y, w, n, eps)
			same(t, "RMSNorm", y, rms)
			y = slices.Clone(x)
			on(t, c).GatedRMSNorm(y, y, z, w, n, eps)
			same(t, "GatedRMSNorm", y, gated)
			y = make([]float32, len(x))
			on(t, c).L2Norm(y, x, n, eps, 0.125)
			same(t, "L2Norm", y, l2)
		}
	}
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	T, heads, hd, R := 5, 3, 40, 10
	inv, _ := canon.RopeInvFreq(1e7, R)
	cos, sin := make([]float32, T*R/2), make([]float32, T*R/2)
	for i := 0; i < T; i++ {
		canon.RopeRow(inv, 100+i, cos[i*R/2:(i+1)*R/2], sin[i*R/2:(i+1)*R/2])
	}
	x := rnd(r, T*heads*hd, 1)
	want := slices.Clone(x)
	for i := 0; i < T*heads; i++ {
		tt := i / heads
		canon.Rotate(want[i*hd:(i+1)*hd], cos[tt*R/2:(tt+1)*R/2], sin[tt*R/2:(tt+1)*R/2])
	}
	for _, c := range backends() {
		y := slices.Clone(x)
		on(t, c).RoPE(y, T, heads, hd, cos, sin)
		same(t, "RoPE", y, want)
	}
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, sz := range [][5]int{{1, 0, 4, 2, 16}, {6, 0, 4, 1, 32}, {3, 270, 8, 2, 64}, {1, 40, 2, 2, 256}} {
		T, pos0, nq, nkv, hd := sz[0], sz[1], sz[2], sz[3], sz[4]
		total := pos0 + T
		q, k, v := rnd(r, T*nq*hd, 1), rnd(r, total*nkv*hd, 1), rnd(r, total*nkv*hd, 1)
		scale := float32(1 / math.Sqrt(float64(hd)))
		want := make([]float32, T*nq*hd)
		for tt := 0; tt < T; tt++ {
			for h := 0; h < nq; h++ {
				kv := h / (nq / nkv)
				qv := q[(tt*nq+h)*hd : (tt*nq+h+1)*hd]
				n := pos0 + tt + 1
				s := make([]float32, n)
				m := float32(math.Inf(-1))
				for u := range s {
					s[u] = float32(canon.Dot(qv, k[(u*nkv+kv)*hd:(u*nkv+kv+1)*hd]) * scale)
					m = max(m, s[u])
				}
				e := make([]float32, n)
				for u := range e {
					e[u] = canon.Exp(s[u] - m)
				}
				z := canon.Sum(e)
				for c := 0; c < hd; c++ {
					want[(tt*nq+h)*hd+c] = sum(n, func(u int) float32 { return float32((e[u] / z) * v[(u*nkv+kv)*hd+c]) })
				}
			}
		}
		for _, c := range backends() {
			o := make([]float32, T*nq*hd)
			on(t, c).Attention(o, q, k, v, T, pos0, nq, nkv, hd, scale)
			same(t, fmt.Sprintf("Attention %v threads=%d", sz, c.threads), o, want)
		}
	}
}

func TestCausalConv(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, Kc := range []int{1, 3, 4, 11} {
		T, C := 6, 37
		x, w := rnd(r, T*C, 1), rnd(r, C*Kc, 0.5)
		state0 := rnd(r, C*(Kc-1), 1)
		want := make([]float32, T*C)
		for ch := 0; ch < C; ch++ {
			hist := slices.Clone(state0[ch*(Kc-1) : (ch+1)*(Kc-1)])
			for tt := 0; tt < T; tt++ {
				hist = append(hist, x[tt*C+ch])
				win := hist[len(hist)-Kc:]
				want[tt*C+ch] = canon.SiLU(sum(Kc, func(j int) float32 { return float32(w[ch*Kc+j] * win[j]) }))
			}
		}
		for _, c := range backends() {
			st := slices.Clone(state0)
			y := make([]float32, T*C)
			on(t, c).CausalConv(y[:2*C], x[:2*C], st, w, 2, C, Kc) // in two calls: the state carries over
			on(t, c).CausalConv(y[2*C:], x[2*C:], st, w, T-2, C, Kc)
			same(t, fmt.Sprintf("CausalConv Kc=%d threads=%d", Kc, c.threads), y, want)
		}
	}
}

func TestDeltaRule(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	T, nk, nv, dk, dv := 5, 2, 6, 24, 20
	q, k, v := rnd(r, T*nk*dk, 0.2), rnd(r, T*nk*dk, 0.2), rnd(r, T*nv*dv, 1)
	beta, alpha := make([]float32, T*nv), make([]float32, T*nv)
	for i := range beta {
		beta[i], alpha[i] = r.Float32(), 0.5+r.Float32()/2
	}
	S0 := rnd(r, nv*dk*dv, 0.3)
	want := make([]float32, T*nv*dv)
	S := slices.Clone(S0)
	for j := 0; j < nv; j++ {
		i := j / (nv / nk)
		Sj := S[j*dk*dv : (j+1)*dk*dv]
		for tt := 0; tt < T; tt++ {
			kk, qq := k[(tt*nk+i)*dk:(tt*nk+i+1)*dk], q[(tt*nk+i)*dk:(tt*nk+i+1)*dk]
			a, b := alpha[tt*nv+j], beta[tt*nv+j]
			for x := range Sj {
				Sj[x] = float32(a * Sj[x])
			}
			delta := make([]float32, dv)
			for c := range delta {
				m := sum(dk, func(rr int) float32 { return float32(kk[rr] * Sj[rr*dv+c]) })
				delta[c] = float32((v[(tt*nv+j)*dv+c] - m) * b)
			}
			for rr := 0; rr < dk; rr++ {
				for c := 0; c < dv; c++ {
					Sj[rr*dv+c] = Sj[rr*dv+c] + float32(kk[rr]*delta[c])
				}
			}
			for c := 0; c < dv; c++ {
				want[(tt*nv+j)*dv+c] = sum(dk, func(rr int) float32 { return float32(qq[rr] * Sj[rr*dv+c]) })
			}
		}
	}
	for _, c := range backends() {
		st := slices.Clone(S0)
		o := make([]float32, T*nv*dv)
		on(t, c).DeltaRule(o, q, k, v, beta, alpha, st, T, nk, nv, dk, dv)
		same(t, fmt.Sprintf("DeltaRule output threads=%d", c.threads), o, want)
		same(t, fmt.Sprintf("DeltaRule state threads=%d", c.threads), st, S)
	}
}

func TestGatesAndElementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	T, nv := 4, 3
	b, a := rnd(r, T*nv, 3), rnd(r, T*nv, 3)
	aLog, dt := rnd(r, nv, 1), rnd(r, nv, 1)
	wb, wa := make([]float32, T*nv), make([]float32, T*nv)
	for i := range wb {
		j := i % nv
		wb[i] = canon.Sigmoid(b[i])
		wa[i] = canon.Exp(float32(-canon.Exp(aLog[j]) * canon.Softplus(a[i]+dt[j])))
	}
	n := 1000
	g, u := rnd(r, n, 4), rnd(r, n, 1)
	for _, c := range backends() {
		beta, alpha := make([]float32, T*nv), make([]float32, T*nv)
		on(t, c).GDNGates(beta, alpha, b, a, aLog, dt)
		same(t, "GDNGates beta", beta, wb)
		same(t, "GDNGates alpha", alpha, wa)
		y := make([]float32, n)
		on(t, c).SiLUMul(y, g, u)
		for i := range y {
			if y[i] != float32(canon.SiLU(g[i])*u[i]) {
				t.Fatalf("SiLUMul %d", i)
			}
		}
		on(t, c).SigmoidMul(y, u, g)
		for i := range y {
			if y[i] != float32(u[i]*canon.Sigmoid(g[i])) {
				t.Fatalf("SigmoidMul %d", i)
			}
		}
	}
}

func TestRouteCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, sz := range [][3]int{{3, 8, 2}, {2, 256, 8}, {2, 640, 10}, {1, 4, 4}} {
		T, E, k := sz[0], sz[1], sz[2]
		logits := rnd(r, T*E, 2)
		for _, renorm := range []bool{false, true} {
			wi, ww := make([]int32, T*k), make([]float32, T*k)
			var sel canon.TopK
			for tt := 0; tt < T; tt++ {
				l := logits[tt*E : (tt+1)*E]
				m := slices.Max(l)
				e := make([]float32, E)
				for i := range e {
					e[i] = canon.Exp(l[i] - m)
				}
				z := canon.Sum(e)
				p := make([]float32, E)
				for i := range p {
					p[i] = e[i] / z
				}
				sel.Select(p, k, wi[tt*k:(tt+1)*k])
				for s := 0; s < k; s++ {
					ww[tt*k+s] = p[wi[tt*k+s]]
				}
				if renorm {
					sw := canon.Sum(ww[tt*k : (tt+1)*k])
					for s := 0; s < k; s++ {
						ww[tt*k+s] = ww[tt*k+s] / sw
					}
				}
			}
			H := 33
			x := rnd(r, T*k*H, 1)
			wy := make([]float32, T*H)
			for tt := 0; tt < T; tt++ {
				for i := 0; i < H; i++ {
					wy[tt*H+i] = sum(k, func(s int) float32 { return float32(x[(tt*k+s)*H+i] * ww[tt*k+s]) })
				}
			}
			for _, c := range backends() {
				idx, w := make([]int32, T*k), make([]float32, T*k)
				on(t, c).Route(idx, w, logits, T, E, k, renorm)
				if !slices.Equal(idx, wi) {
					t.Fatalf("Route %v: experts %v, want %v", sz, idx, wi)
				}
				same(t, "Route weights", w, ww)
				y := make([]float32, T*H)
				on(t, c).Combine(y, x, w, T, k, H)
				same(t, "Combine", y, wy)
			}
		}
	}
}
