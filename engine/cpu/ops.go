package cpu

import (
	"math"

	"github.com/tarfa-ai/tarfa/engine/backend"
	"github.com/tarfa-ai/tarfa/engine/canon"
)

func (c *CPU) MatMul(y []float32, w *backend.Mat, x []float32, T int) {
	N, K := w.Rows, w.Cols
	need("MatMul y", len(y), T*N)
	need("MatMul x", len(x), T*K)
	if T == 1 {
		c.par(N, K, func(lo, hi int) {
			if w.BF16 != nil {
				for n := lo; n < hi; n++ {
					y[n] = canon.DotBF16(w.BF16[n*K:(n+1)*K], x[:K])
				}
			} else {
				for n := lo; n < hi; n++ {
					y[n] = canon.DotF32(w.F32[n*K:(n+1)*K], x[:K])
				}
			}
		})
		return
	}
	// Several tokens: widen each weight row once and reuse it for every token.
	rows := func(lo, hi, t0, t1 int) {
		var buf *[]float32
		if w.BF16 != nil {
			buf = getScratch(K)
			defer putScratch(buf)
		}
		for n := lo; n < hi; n++ {
			var row []float32
			if w.BF16 != nil {
				row = *buf
				for i, u := range w.BF16[n*K : (n+1)*K] {
					row[i] = canon.BF16(u)
				}
			} else {
				row = w.F32[n*K : (n+1)*K]
			}
			t := t0
			for ; t+4 <= t1; t += 4 {
				y[t*N+n], y[(t+1)*N+n], y[(t+2)*N+n], y[(t+3)*N+n] = canon.DotF32x4(row,
					x[t*K:(t+1)*K], x[(t+1)*K:(t+2)*K], x[(t+2)*K:(t+3)*K], x[(t+3)*K:(t+4)*K])
			}
			for ; t < t1; t++ {
				y[t*N+n] = canon.DotF32(row, x[t*K:(t+1)*K])
			}
		}
	}
	if N >= 2*c.threads {
		c.par(N, T*K, func(lo, hi int) { rows(lo, hi, 0, T) })
	} else {
		c.par(T, N*K, func(lo, hi int) { rows(0, N, lo, hi) })
	}
}

func (c *CPU) RMSNorm(y, x, scale []float32, n int, eps float32) {
	rows := len(x) / n
	need("RMSNorm y", len(y), rows*n)
	need("RMSNorm scale", len(scale), n)
	c.par(rows, 3*n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
			inv := canon.Rsqrt(canon.SumSquares(xr)/float32(n) + eps)
			for i, v := range xr {
				yr[i] = float32(float32(v*inv) * scale[i])
			}
		}
	})
}

func (c *CPU) GatedRMSNorm(y, x, z, w []float32, n int, eps float32) {
	rows := len(x) / n
	need("GatedRMSNorm y", len(y), rows*n)
	need("GatedRMSNorm z", len(z), rows*n)
	need("GatedRMSNorm w", len(w), n)
	c.par(rows, 8*n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr, zr := x[r*n:(r+1)*n], y[r*n:(r+1)*n], z[r*n:(r+1)*n]
			inv := canon.Rsqrt(canon.SumSquares(xr)/float32(n) + eps)
			for i, v := range xr {
				yr[i] = float32(float32(w[i]*float32(v*inv)) * canon.SiLU(zr[i]))
			}
		}
	})
}

func (c *CPU) L2Norm(y, x []float32, n int, eps, scale float32) {
	rows := len(x) / n
	need("L2Norm y", len(y), rows*n)
	c.par(rows, 3*n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
			inv := canon.Rsqrt(canon.SumSquares(xr) + eps)
			for i, v := range xr {
				yr[i] = float32(v * inv)
			}
			if scale != 1 {
				for i, v := range yr {
					yr[i] = float32(v * scale)
				}
			}
		}
	})
}

func (c *CPU) RoPE(x []float32, T, heads, hd int, cos, sin []float32) {
	h := len(cos) / max(T, 1)
	need("RoPE x", len(x), T*heads*hd)
	need("RoPE sin", len(sin), T*h)
	if 2*h > hd {
		panic("cpu: RoPE: rotary dim exceeds head dim")
	}
	c.par(T*heads, 4*h, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := i / heads
			canon.Rotate(x[i*hd:(i+1)*hd], cos[t*h:(t+1)*h], sin[t*h:(t+1)*h])
		}
	})
}

func (c *CPU) Attention(o, q, k, v []float32, T, pos0, nq, nkv, hd int, scale float32) {
	total := pos0 + T
	row := nkv * hd
	need("Attention o", len(o), T*nq*hd)
	need("Attention q", len(q), T*nq*hd)
	need("Attention k", len(k), total*row)
	need("Attention v", len(v), total*row)
	grp := nq / nkv
	c.par(T*nq, 2*total*hd, func(lo, hi int) {
		buf := getScratch(total + canon.Lanes*hd)
		defer putScratch(buf)
		s := (*buf)[:total]
		acc := (*buf)[total:]
		var lanes [canon.Lanes]float32
		for it := lo; it < hi; it++ {
			t, h := it/nq, it%nq
			kv := (h / grp) * hd
			qv := q[it*hd : (it+1)*hd]
			n := pos0 + t + 1
			m := float32(math.Inf(-1))
			for u := 0; u < n; u++ {
				x := float32(canon.DotF32(k[u*row+kv:u*row+kv+hd], qv) * scale)
				s[u] = x
				if x > m {
					m = x
				}
			}
			lanes = [canon.Lanes]float32{}
			for u := 0; u < n; u++ {
				e := canon.Exp(s[u] - m)
				s[u] = e
				l := canon.Lane(u)
				lanes[l] = lanes[l] + e
			}
			nl := canon.LanesUsed(n)
			z := canon.CombineN(&lanes, nl)
			for u := 0; u < n; u++ {
				s[u] = s[u] / z
			}
			a := acc[:nl*hd]
			clear(a)
			for u := 0; u < n; u++ {
				l := canon.Lane(u)
				al := a[l*hd : (l+1)*hd]
				p := s[u]
				vu := v[u*row+kv : u*row+kv+hd]
				for c, x := range vu {
					al[c] = al[c] + float32(p*x)
				}
			}
			out := o[it*hd : (it+1)*hd]
			for c := range out {
				for l := 0; l < nl; l++ {
					lanes[l] = a[l*hd+c]
				}
				out[c] = canon.CombineN(&lanes, nl)
			}
		}
	})
}

func (c *CPU) CausalConv(y, x, state, w []float32, T, C, Kc int) {
	need("CausalConv y", len(y), T*C)
	need("CausalConv x", len(x), T*C)
	need("CausalConv state", len(state), C*(Kc-1))
	need("CausalConv w", len(w), C*Kc)
	nl := canon.LanesUsed(Kc)
	c.par(C, T*Kc*4, func(lo, hi int) {
		var acc [canon.Lanes]float32
		for ch := lo; ch < hi; ch++ {
			st := state[ch*(Kc-1) : (ch+1)*(Kc-1)]
			ww := w[ch*Kc : (ch+1)*Kc]
			for t := 0; t < T; t++ {
				in := x[t*C+ch]
				acc = [canon.Lanes]float32{}
				for j, s := range st {
					l := canon.Lane(j)
					acc[l] = acc[l] + float32(ww[j]*s)
				}
				l := canon.Lane(Kc - 1)
				acc[l] = acc[l] + float32(ww[Kc-1]*in)
				y[t*C+ch] = canon.SiLU(canon.CombineN(&acc, nl))
				if Kc > 1 {
					copy(st, st[1:])
					st[Kc-2] = in
				}
			}
		}
	})
}

func (c *CPU) GDNGates(beta, alpha, b, a, aLog, dtBias []float32) {
	nv := len(aLog)
	need("GDNGates dtBias", len(dtBias), nv)
	n := len(b)
	need("GDNGates a", len(a), n)
	need("GDNGates beta", len(beta), n)
	need("GDNGates alpha", len(alpha), n)
	for i := 0; i < n; i++ {
		j := i % nv
		beta[i] = canon.Sigmoid(b[i])
		g := float32(-canon.Exp(aLog[j]) * canon.Softplus(a[i]+dtBias[j]))
		alpha[i] = canon.Exp(g)
	}
}

func (c *CPU) DeltaRule(o, q, k, v, beta, alpha, S []float32, T, nk, nv, dk, dv int) {
	need("DeltaRule o", len(o), T*nv*dv)
	need("DeltaRule q", len(q), T*nk*dk)
	need("DeltaRule k", len(k), T*nk*dk)
	need("DeltaRule v", len(v), T*nv*dv)
	need("DeltaRule beta", len(beta), T*nv)
	need("DeltaRule alpha", len(alpha), T*nv)
	need("DeltaRule S", len(S), nv*dk*dv)
	r := nv / nk
	nl := canon.LanesUsed(dk)
	c.par(nv, T*dk*dv*4, func(lo, hi int) {
		buf := getScratch(nl*dv + dv)
		defer putScratch(buf)
		acc := (*buf)[:nl*dv]
		delta := (*buf)[nl*dv:]
		var lanes [canon.Lanes]float32
		combine := func(c int) float32 {
			for l := 0; l < nl; l++ {
				lanes[l] = acc[l*dv+c]
			}
			return canon.CombineN(&lanes, nl)
		}
		for j := lo; j < hi; j++ {
			i := j / r
			Sj := S[j*dk*dv : (j+1)*dk*dv]
			for t := 0; t < T; t++ {
				kk := k[(t*nk+i)*dk : (t*nk+i+1)*dk]
				qq := q[(t*nk+i)*dk : (t*nk+i+1)*dk]
				vv := v[(t*nv+j)*dv : (t*nv+j+1)*dv]
				al, be := alpha[t*nv+j], beta[t*nv+j]
				// Decay the state and read what it predicts for the key.
				clear(acc)
				for rr, kr := range kk {
					row := Sj[rr*dv : (rr+1)*dv]
					a := acc[canon.Lane(rr)*dv:][:dv]
					for c, s := range row {
						s = float32(al * s)
						row[c] = s
						a[c] = a[c] + float32(kr*s)
					}
				}
				for c := range delta {
					delta[c] = float32((vv[c] - combine(c)) * be)
				}
				// Write the delta and read the output with the updated state.
				clear(acc)
				for rr, kr := range kk {
					qr := qq[rr]
					row := Sj[rr*dv : (rr+1)*dv]
					a := acc[canon.Lane(rr)*dv:][:dv]
					for c, s := range row {
						s = s + float32(kr*delta[c])
						row[c] = s
						a[c] = a[c] + float32(qr*s)
					}
				}
				out := o[(t*nv+j)*dv : (t*nv+j+1)*dv]
				for c := range out {
					out[c] = combine(c)
				}
			}
		}
	})
}

func (c *CPU) SiLUMul(y, g, u []float32) {
	n := len(g)
	need("SiLUMul y", len(y), n)
	need("SiLUMul u", len(u), n)
	c.par(n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = float32(canon.SiLU(g[i]) * u[i])
		}
	})
}

func (c *CPU) SigmoidMul(y, x, g []float32) {
	n := len(x)
	need("SigmoidMul y", len(y), n)
	need("SigmoidMul g", len(g), n)
	c.par(n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = float32(x[i] * canon.Sigmoid(g[i]))
		}
	})
}

func (c *CPU) Add(y, a, b []float32) {
	n := len(a)
	need("Add y", len(y), n)
	need("Add b", len(b), n)
	for i := 0; i < n; i++ {
		y[i] = a[i] + b[i]
	}
}

func (c *CPU) Route(idx []int32, w []float32, logits []float32, T, E, k int, renorm bool) {
	need("Route logits", len(logits), T*E)
	need("Route idx", len(idx), T*k)
	need("Route w", len(w), T*k)
	buf := getScratch(E)
	defer putScratch(buf)
	p := *buf
	var sel canon.TopK
	for t := 0; t < T; t++ {
		l := logits[t*E : (t+1)*E]
		m := float32(math.Inf(-1))
		for _, x := range l {
			if x > m {
				m = x
			}
		}
		for e, x := range l {
			p[e] = canon.Exp(x - m)
		}
		z := canon.Sum(p)
		for e := range p {
			p[e] = p[e] / z
		}
		ti, tw := idx[t*k:(t+1)*k], w[t*k:(t+1)*k]
		sel.Select(p, k, ti)
		for s, e := range ti {
			tw[s] = p[e]
		}
		if renorm {
			sum := canon.Sum(tw)
			for s := range tw {
				tw[s] = tw[s] / sum
			}
		}
	}
}

func (c *CPU) Combine(y, x, w []float32, T, k, n int) {
	need("Combine y", len(y), T*n)
	need("Combine x", len(x), T*k*n)
	need("Combine w", len(w), T*k)
	nl := canon.LanesUsed(k)
	c.par(T, k*n, func(lo, hi int) {
		var acc [canon.Lanes]float32
		for t := lo; t < hi; t++ {
			wt := w[t*k : (t+1)*k]
			for i := 0; i < n; i++ {
				acc = [canon.Lanes]float32{}
				for s, ws := range wt {
					l := canon.Lane(s)
					acc[l] = acc[l] + float32(x[(t*k+s)*n+i]*ws)
				}
				y[t*n+i] = canon.CombineN(&acc, nl)
			}
		}
	})
}

func (c *CPU) GateAdd(y, x, g []float32, T, n int) {
	need("GateAdd y", len(y), T*n)
	need("GateAdd x", len(x), T*n)
	need("GateAdd g", len(g), T)
	for t := 0; t < T; t++ {
		s := canon.Sigmoid(g[t])
		xt, yt := x[t*n:(t+1)*n], y[t*n:(t+1)*n]
		for i, v := range xt {
			yt[i] = yt[i] + float32(s*v)
		}
	}
}
