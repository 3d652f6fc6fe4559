package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/weights"
)

// ref64 is an independent, deliberately plain float64 implementation of
// MODEL_SPEC §C/§D (whole sequence at once, no cache, float64 library math).
// It shares no code with the engine; it checks configurations the HF
// fixtures do not cover (dense layers, tied embeddings, no top-k
// renormalisation, F32 matrices, odd dimensions).
type ref64 struct {
	cfg *hf.Config
	w   source
}

func decode64(v weights.View) []float64 {
	out := make([]float64, v.Numel())
	d := []byte(v.Data())
	for i := range out {
		switch v.DType() {
		case jnf.BF16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[2*i:])) << 16))
		case jnf.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:])))
		default:
			panic("dtype " + string(v.DType()))
		}
	}
	return out
}

func (r *ref64) t(name string) []float64 {
	vt, err := r.w.Tensor(name)
	if err != nil {
		panic(err)
	}
	return decode64(vt.View())
}

// mat64 is a matrix as ref64 multiplies by it: its values in float64
// (a block-FP8 matrix's code×scale, exact in float64), and for a block-FP8
// one the activation group width bk (0: plain).
type mat64 struct {
	w  []float64
	bk int
}

// m reads a matrix: a float one, or a block-FP8 one with its
// weight_scale_inv.
func (r *ref64) m(name string) mat64 {
	vt, err := r.w.Tensor(name)
	if err != nil {
		panic(err)
	}
	if vt.View().DType() != jnf.F8E4 {
		return mat64{w: decode64(vt.View())}
	}
	st, err := r.w.Tensor(weights.ScaleName(name))
	if err != nil {
		panic(err)
	}
	q := r.cfg.Quant
	return mat64{w: dequant64(vt.View(), decode64(st.View()), q.BlockN, q.BlockK), bk: q.BlockK}
}

// lin64 is m for an expert's matrix.
func (r *ref64) lin64(l weights.Linear) mat64 {
	if !l.Quantized() {
		return mat64{w: decode64(l.Values())}
	}
	s, bn, bk := l.Scales()
	return mat64{w: dequant64(l.Values(), decode64(s), bn, bk), bk: bk}
}

// e4m3Value64 is the value of an E4M3 code, from the format's definition.
func e4m3Value64(b byte) float64 {
	e, m := int(b>>3&15), float64(b&7)
	v := math.Ldexp(1+m/8, e-7)
	if e == 0 {
		v = math.Ldexp(m/8, -6)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

func dequant64(v weights.View, scale []float64, bn, bk int) []float64 {
	rows, cols := int(v.Dim(0)), int(v.Dim(1))
	sc := (cols + bk - 1) / bk
	d := v.Data()
	out := make([]float64, rows*cols)
	for i := range rows {
		for j := range cols {
			out[i*cols+j] = e4m3Value64(d[i*cols+j]) * scale[(i/bn)*sc+j/bk]
		}
	}
	return out
}

// quantAct64 is the dynamic activation quantisation of transformers'
// FP8Linear, in float64: per group of bk values, s = max|x|/448 and each
// value becomes s times the E4M3 value nearest x/s (ties to the even code,
// found by search over the finite codes).
func quantAct64(x []float64, bk int) []float64 {
	out := make([]float64, len(x))
	for g := 0; g < len(x); g += bk {
		grp := x[g:min(g+bk, len(x))]
		a := 0.0
		for _, v := range grp {
			a = math.Max(a, math.Abs(v))
		}
		if a == 0 {
			continue
		}
		s := a / 448
		for i, v := range grp {
			best, bd := 0.0, math.Inf(1)
			for b := range 0x7F {
				c := e4m3Value64(byte(b))
				if d := math.Abs(c - math.Abs(v/s)); d < bd || d == bd && b&1 == 0 {
					best, bd = c, d
				}
			}
			out[g+i] = math.Copysign(best, v) * s
		}
	}
	return out
}

func mv(m mat64, rows, cols int, x []float64) []float64 {
	W := m.w
	if m.bk > 0 {
		x = quantAct64(x, m.bk)
	}
	y := make([]float64, rows)
	for i := range y {
		s := 0.0
		for j := 0; j < cols; j++ {
			s += W[i*cols+j] * x[j]
		}
		y[i] = s
	}
	return y
}

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func silu64(x float64) float64    { return x * sigmoid64(x) }

func (r *ref64) norm(x, w []float64) []float64 {
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	inv := 1 / math.Sqrt(ms/float64(len(x))+float64(r.cfg.RMSNormEps))
	y := make([]float64, len(x))
	for i, v := range x {
		if r.cfg.Arch == hf.Qwen35MoE {
			y[i] = v * inv * (1 + w[i])
		} else {
			y[i] = v * inv * w[i]
		}
	}
	return y
}

func (r *ref64) forward(ids []int) [][]float64 {
	c := r.cfg
	H := c.Hidden
	emb := r.t("model.embed_tokens.weight")
	h := make([][]float64, len(ids))
	for t, id := range ids {
		h[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		in, post := r.t(p+"input_layernorm.weight"), r.t(p+"post_attention_layernorm.weight")
		a := make([][]float64, len(ids))
		for t := range h {
			a[t] = r.norm(h[t], in)
		}
		var mix [][]float64
		if c.LayerTypes[l] == hf.FullAttention {
			mix = r.attention(p+"self_attn.", a)
		} else {
			mix = r.deltaNet(p+"linear_attn.", a)
		}
		for t := range h {
			for i := range h[t] {
				h[t][i] += mix[t][i]
			}
			m := r.norm(h[t], post)
			var f []float64
			if c.Sparse[l] {
				f = r.moe(l, m)
			} else {
				f = r.mlp(p+"mlp.", c.DenseIntermediate, m)
			}
			for i := range h[t] {
				h[t][i] += f[i]
			}
		}
	}
	head := mat64{w: emb}
	if !c.Tied {
		head = r.m("lm_head.weight")
	}
	fn := r.t("model.norm.weight")
	out := make([][]float64, len(ids))
	for t := range h {
		out[t] = mv(head, c.Vocab, H, r.norm(h[t], fn))
	}
	return out
}

func (r *ref64) rope(x []float64, pos int) {
	R := r.cfg.RotaryDim
	half := R / 2
	for i := 0; i < half; i++ {
		ang := float64(pos) * math.Pow(r.cfg.RopeTheta, -float64(2*i)/float64(R))
		c, s := math.Cos(ang), math.Sin(ang)
		a, b := x[i], x[i+half]
		x[i], x[i+half] = a*c-b*s, b*c+a*s
	}
}

func (r *ref64) attention(p string, a [][]float64) [][]float64 {
	c := r.cfg
	H, nq, nkv, hd := c.Hidden, c.Heads, c.KVHeads, c.HeadDim
	gated := c.Arch == hf.Qwen35MoE
	qRows := nq * hd
	if gated {
		qRows *= 2
	}
	Wq, Wk, Wv, Wo := r.m(p+"q_proj.weight"), r.m(p+"k_proj.weight"), r.m(p+"v_proj.weight"), r.m(p+"o_proj.weight")
	qn, kn := r.t(p+"q_norm.weight"), r.t(p+"k_norm.weight")
	T := len(a)
	q, g, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T), make([][]float64, T)
	for t := range a {
		y := mv(Wq, qRows, H, a[t])
		q[t], g[t] = make([]float64, nq*hd), make([]float64, nq*hd)
		for h := 0; h < nq; h++ {
			if gated {
				copy(q[t][h*hd:], y[2*h*hd:(2*h+1)*hd])
				copy(g[t][h*hd:], y[(2*h+1)*hd:(2*h+2)*hd])
			} else {
				copy(q[t][h*hd:], y[h*hd:(h+1)*hd])
			}
			copy(q[t][h*hd:], r.norm(q[t][h*hd:(h+1)*hd], qn))
			r.rope(q[t][h*hd:(h+1)*hd], t)
		}
		k[t], v[t] = mv(Wk, nkv*hd, H, a[t]), mv(Wv, nkv*hd, H, a[t])
		for h := 0; h < nkv; h++ {
			copy(k[t][h*hd:], r.norm(k[t][h*hd:(h+1)*hd], kn))
			r.rope(k[t][h*hd:(h+1)*hd], t)
		}
	}
	out := make([][]float64, T)
	for t := range a {
		o := make([]float64, nq*hd)
		for h := 0; h < nq; h++ {
			kv := h / (nq / nkv)
			s := make([]float64, t+1)
			mx := math.Inf(-1)
			for u := 0; u <= t; u++ {
				d := 0.0
				for i := 0; i < hd; i++ {
					d += q[t][h*hd+i] * k[u][kv*hd+i]
				}
				s[u] = d / math.Sqrt(float64(hd))
				mx = math.Max(mx, s[u])
			}
			z := 0.0
			for u := range s {
				s[u] = math.Exp(s[u] - mx)
				z += s[u]
			}
			for u := range s {
				for i := 0; i < hd; i++ {
					o[h*hd+i] += s[u] / z * v[u][kv*hd+i]
				}
			}
		}
		if gated {
			for i := range o {
				o[i] *= sigmoid64(g[t][i])
			}
		}
		out[t] = mv(Wo, H, nq*hd, o)
	}
	return out
}

func (r *ref64) deltaNet(p string, a [][]float64) [][]float64 {
	c := r.cfg
	H, nk, nv, dk, dv, Kc := c.Hidden, c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim, c.ConvKernel
	C := c.ConvDim()
	Wqkv, Wz, Wb, Wa, Wout := r.m(p+"in_proj_qkv.weight"), r.m(p+"in_proj_z.weight"), r.m(p+"in_proj_b.weight"), r.m(p+"in_proj_a.weight"), r.m(p+"out_proj.weight")
	conv, dt, Alog, nw := r.t(p+"conv1d.weight"), r.t(p+"dt_bias"), r.t(p+"A_log"), r.t(p+"norm.weight")
	T := len(a)
	raw := make([][]float64, T)
	for t := range a {
		raw[t] = mv(Wqkv, C, H, a[t])
	}
	S := make([][]float64, nv)
	for j := range S {
		S[j] = make([]float64, dk*dv)
	}
	out := make([][]float64, T)
	for t := range a {
		cc := make([]float64, C)
		for ch := 0; ch < C; ch++ {
			s := 0.0
			for j := 0; j < Kc; j++ {
				if u := t - (Kc - 1) + j; u >= 0 {
					s += conv[ch*Kc+j] * raw[u][ch]
				}
			}
			cc[ch] = silu64(s)
		}
		z, b, av := mv(Wz, nv*dv, H, a[t]), mv(Wb, nv, H, a[t]), mv(Wa, nv, H, a[t])
		y := make([]float64, nv*dv)
		for j := 0; j < nv; j++ {
			i := j / (nv / nk)
			l2 := func(x []float64) []float64 {
				ss := 0.0
				for _, e := range x {
					ss += e * e
				}
				o := make([]float64, len(x))
				for n, e := range x {
					o[n] = e / math.Sqrt(ss+1e-6)
				}
				return o
			}
			q := l2(cc[i*dk : (i+1)*dk])
			for n := range q {
				q[n] /= math.Sqrt(float64(dk))
			}
			k := l2(cc[nk*dk+i*dk : nk*dk+(i+1)*dk])
			v := cc[2*nk*dk+j*dv : 2*nk*dk+(j+1)*dv]
			beta := sigmoid64(b[j])
			x := av[j] + dt[j]
			sp := x
			if x <= 20 {
				sp = math.Log1p(math.Exp(x))
			}
			alpha := math.Exp(-math.Exp(Alog[j]) * sp)
			Sj := S[j]
			for n := range Sj {
				Sj[n] *= alpha
			}
			o := make([]float64, dv)
			for cI := 0; cI < dv; cI++ {
				m := 0.0
				for rr := 0; rr < dk; rr++ {
					m += k[rr] * Sj[rr*dv+cI]
				}
				d := beta * (v[cI] - m)
				for rr := 0; rr < dk; rr++ {
					Sj[rr*dv+cI] += k[rr] * d
				}
			}
			for cI := 0; cI < dv; cI++ {
				for rr := 0; rr < dk; rr++ {
					o[cI] += q[rr] * Sj[rr*dv+cI]
				}
			}
			ms := 0.0
			for _, e := range o {
				ms += e * e
			}
			inv := 1 / math.Sqrt(ms/float64(dv)+float64(c.RMSNormEps))
			for cI := range o {
				y[j*dv+cI] = nw[cI] * o[cI] * inv * silu64(z[j*dv+cI])
			}
		}
		out[t] = mv(Wout, H, nv*dv, y)
	}
	return out
}

func (r *ref64) mlpWith(g, u, d mat64, I int, x []float64) []float64 {
	H := r.cfg.Hidden
	gg, uu := mv(g, I, H, x), mv(u, I, H, x)
	for i := range gg {
		gg[i] = silu64(gg[i]) * uu[i]
	}
	return mv(d, H, I, gg)
}

func (r *ref64) mlp(p string, I int, x []float64) []float64 {
	return r.mlpWith(r.m(p+"gate_proj.weight"), r.m(p+"up_proj.weight"), r.m(p+"down_proj.weight"), I, x)
}

func (r *ref64) moe(l int, x []float64) []float64 {
	c := r.cfg
	H, E := c.Hidden, c.Experts
	p := fmt.Sprintf("model.layers.%d.mlp.", l)
	lg := mv(r.m(p+"gate.weight"), E, H, x)
	mx := math.Inf(-1)
	for _, v := range lg {
		mx = math.Max(mx, v)
	}
	z := 0.0
	pr := make([]float64, E)
	for e, v := range lg {
		pr[e] = math.Exp(v - mx)
		z += pr[e]
	}
	idx := make([]int, E)
	for e := range idx {
		pr[e] /= z
		idx[e] = e
	}
	sort.SliceStable(idx, func(i, j int) bool { return pr[idx[i]] > pr[idx[j]] })
	sel := idx[:c.TopK]
	wsum := 0.0
	for _, e := range sel {
		wsum += pr[e]
	}
	out := make([]float64, H)
	for _, e := range sel {
		w := pr[e]
		if c.NormTopKProb {
			w /= wsum
		}
		ve, err := r.w.Expert(l, e)
		if err != nil {
			panic(err)
		}
		y := r.mlpWith(r.lin64(ve.Gate()), r.lin64(ve.Up()), r.lin64(ve.Down()), c.MoEIntermediate, x)
		for i := range out {
			out[i] += w * y[i]
		}
	}
	if c.SharedIntermediate > 0 {
		s := r.mlp(p+"shared_expert.", c.SharedIntermediate, x)
		g := sigmoid64(mv(r.m(p+"shared_expert_gate.weight"), 1, H, x)[0])
		for i := range out {
			out[i] += g * s[i]
		}
	}
	return out
}
