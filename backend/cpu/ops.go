package cpu

import (
	"math"
	"sync"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
)

// Each operation is a job type (its arguments) with a run method over a
// range of independent items, executed by exec/par.

// ---- MatMul ----

type matmulJob struct {
	y, x    []float32
	xT      []float32 // the tokens in lane-major order (canon.Interleave), for the vector kernels
	w       *backend.Mat
	T       int
	byToken bool // items are tokens (few rows) instead of rows
}

var matmulJobs sync.Pool

func (c *CPU) matMul(y []float32, w *backend.Mat, x []float32, T int) {
	if w.Quantized() {
		c.matMulFP8(y, w, x, T)
		return
	}
	N, K := w.Rows, w.Cols
	need("MatMul y", len(y), T*N)
	need("MatMul x", len(x), T*K)
	if K == 0 {
		clear(y[:T*N]) // a sum of no terms is +0
		return
	}
	j := matmulJob{y: y, x: x, w: w, T: T}
	if canon.HasVectorKernels() {
		// Interleaved once per call, read by every goroutine.
		xT := getScratch(T * K)
		defer putScratch(xT)
		for t := range T {
			canon.Interleave((*xT)[t*K:], x[t*K:(t+1)*K])
		}
		j.xT = *xT
	}
	switch {
	case T == 1 || N >= 2*c.threads:
		exec(c, &matmulJobs, N, T*K, j)
	default:
		j.byToken = true
		exec(c, &matmulJobs, T, N*K, j)
	}
}

func (j *matmulJob) run(lo, hi int) {
	if j.byToken {
		j.rows(0, j.w.Rows, lo, hi)
	} else {
		j.rows(lo, hi, 0, j.T)
	}
}

// rows computes outputs for weight rows [n0, n1) and tokens [t0, t1).
func (j *matmulJob) rows(n0, n1, t0, t1 int) {
	if canon.HasVectorKernels() {
		j.rowsVector(n0, n1, t0, t1)
		return
	}
	w, x, y := j.w, j.x, j.y
	N, K := w.Rows, w.Cols
	if t1-t0 == 1 {
		t := t0
		xt := x[t*K : (t+1)*K]
		for n := n0; n < n1; n++ {
			if w.BF16 != nil {
				y[t*N+n] = canon.DotBF16(w.BF16[n*K:(n+1)*K], xt)
			} else {
				y[t*N+n] = canon.DotF32(w.F32[n*K:(n+1)*K], xt)
			}
		}
		return
	}
	// Several tokens: widen each weight row once and reuse it for all of them.
	var buf *[]float32
	if w.BF16 != nil {
		buf = getScratch(K)
		defer putScratch(buf)
	}
	for n := n0; n < n1; n++ {
		row := j.row(n, buf)
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

// row returns weight row n as float32: widened into buf for BF16 weights.
func (j *matmulJob) row(n int, buf *[]float32) []float32 {
	w, K := j.w, j.w.Cols
	if w.BF16 == nil {
		return w.F32[n*K : (n+1)*K]
	}
	row := *buf
	for i, u := range w.BF16[n*K : (n+1)*K] {
		row[i] = canon.BF16(u)
	}
	return row
}

// bf16RowTokens is the most tokens for which each BF16 weight row is
// transposed in registers for every 4 tokens (canon.DotsBF16X) rather than
// interleaved once into memory and multiplied by tiles of rows and tokens
// (canon.DotsBF16T); both are canon.DotBF16, the same bits. Measured
// (BenchmarkMatMul shapes, one thread, this 2-vCPU VM, GFLOP/s transposed
// against tiles): 1024×3072 at T = 2: 39.9 against 31.3, 4: 48.7 against
// 46.3, 5: 41.8 against 47.0, 8: 43.8 against 56.3; 2048×2048 and
// 3072×1024 cross over at the same place (BENCHMARKS.md).
var bf16RowTokens = 4

// rowsVector is rows with the vector kernels of canon's lane-major layout
// (same bits), given the tokens interleaved once per call (j.xT).
func (j *matmulJob) rowsVector(n0, n1, t0, t1 int) {
	w := j.w
	N, K := w.Rows, w.Cols
	x, xT, y := j.x[t0*K:t1*K], j.xT[t0*K:t1*K], j.y[t0*N:]
	if w.BF16 != nil && t1-t0 <= bf16RowTokens {
		for n := n0; n < n1; n++ {
			canon.DotsBF16X(y[n:], N, w.BF16[n*K:(n+1)*K], x, xT, t1-t0)
		}
		return
	}
	// Each row interleaved once, then tiles of canon.TileRows rows by up to
	// canon.TileTokens tokens in registers.
	wT := getScratch(canon.TileRows * K)
	defer putScratch(wT)
	for n := n0; n < n1; n += canon.TileRows {
		r := min(canon.TileRows, n1-n)
		if w.BF16 != nil {
			rows := w.BF16[n*K : (n+r)*K]
			for i := range r {
				canon.InterleaveBF16((*wT)[i*K:], rows[i*K:(i+1)*K])
			}
			canon.DotsBF16T(y[n:], 1, N, rows, *wT, x, xT, K)
			continue
		}
		rows := w.F32[n*K : (n+r)*K]
		for i := range r {
			canon.Interleave((*wT)[i*K:], rows[i*K:(i+1)*K])
		}
		canon.DotsF32X(y[n:], 1, N, rows, *wT, x, xT, K)
	}
}

// ---- norms ----

type normJob struct {
	y, x, z, w []float32
	n          int
	eps, scale float32
	kind       int // normRMS, normGated, normL2
}

const (
	normRMS = iota
	normGated
	normL2
)

var normJobs sync.Pool

func (c *CPU) rmsNorm(y, x, scale []float32, n int, eps float32) {
	rows := len(x) / n
	need("RMSNorm y", len(y), rows*n)
	need("RMSNorm scale", len(scale), n)
	exec(c, &normJobs, rows, 3*n, normJob{y: y, x: x, w: scale, n: n, eps: eps, kind: normRMS})
}

func (c *CPU) gatedRMSNorm(y, x, z, w []float32, n int, eps float32) {
	rows := len(x) / n
	need("GatedRMSNorm y", len(y), rows*n)
	need("GatedRMSNorm z", len(z), rows*n)
	need("GatedRMSNorm w", len(w), n)
	exec(c, &normJobs, rows, 8*n, normJob{y: y, x: x, z: z, w: w, n: n, eps: eps, kind: normGated})
}

func (c *CPU) l2Norm(y, x []float32, n int, eps, scale float32) {
	rows := len(x) / n
	need("L2Norm y", len(y), rows*n)
	exec(c, &normJobs, rows, 3*n, normJob{y: y, x: x, n: n, eps: eps, scale: scale, kind: normL2})
}

func (j *normJob) run(lo, hi int) {
	n := j.n
	for r := lo; r < hi; r++ {
		xr, yr := j.x[r*n:(r+1)*n], j.y[r*n:(r+1)*n]
		switch j.kind {
		case normRMS:
			inv := canon.Rsqrt(canon.SumSquares(xr)/float32(n) + j.eps)
			for i, v := range xr {
				yr[i] = float32(float32(v*inv) * j.w[i])
			}
		case normGated:
			zr := j.z[r*n : (r+1)*n]
			inv := canon.Rsqrt(canon.SumSquares(xr)/float32(n) + j.eps)
			for i, v := range xr {
				yr[i] = float32(float32(j.w[i]*float32(v*inv)) * canon.SiLU(zr[i]))
			}
		case normL2:
			inv := canon.Rsqrt(canon.SumSquares(xr) + j.eps)
			for i, v := range xr {
				yr[i] = float32(v * inv)
			}
			if j.scale != 1 {
				for i, v := range yr {
					yr[i] = float32(v * j.scale)
				}
			}
		}
	}
}

// ---- RoPE ----

type ropeJob struct {
	x, cos, sin   []float32
	heads, hd, h2 int
}

var ropeJobs sync.Pool

func (c *CPU) rope(x []float32, T, heads, hd int, cos, sin []float32) {
	h2 := len(cos) / max(T, 1)
	need("RoPE x", len(x), T*heads*hd)
	need("RoPE sin", len(sin), T*h2)
	if 2*h2 > hd {
		panic("cpu: RoPE: rotary dim exceeds head dim")
	}
	exec(c, &ropeJobs, T*heads, 4*h2, ropeJob{x: x, cos: cos, sin: sin, heads: heads, hd: hd, h2: h2})
}

func (j *ropeJob) run(lo, hi int) {
	hd, h2 := j.hd, j.h2
	for i := lo; i < hi; i++ {
		t := i / j.heads
		canon.Rotate(j.x[i*hd:(i+1)*hd], j.cos[t*h2:(t+1)*h2], j.sin[t*h2:(t+1)*h2])
	}
}

// ---- Attention ----

type attnJob struct {
	o, q, k, v             []float32
	pos0, nq, nkv, hd, grp int
	scale                  float32
}

var attnJobs sync.Pool

func (c *CPU) attention(o, q, k, v []float32, T, pos0, nq, nkv, hd int, scale float32) {
	total := pos0 + T
	need("Attention o", len(o), T*nq*hd)
	need("Attention q", len(q), T*nq*hd)
	need("Attention k", len(k), total*nkv*hd)
	need("Attention v", len(v), total*nkv*hd)
	exec(c, &attnJobs, T*nq, 2*total*hd, attnJob{o: o, q: q, k: k, v: v, pos0: pos0, nq: nq, nkv: nkv, hd: hd, grp: nq / nkv, scale: scale})
}

// run computes query rows (token, head) lo..hi−1.
func (j *attnJob) run(lo, hi int) {
	hd, row := j.hd, j.nkv*j.hd
	total := j.pos0 + (hi-1)/j.nq + 1
	buf := getScratch(total + canon.Lanes*hd)
	defer putScratch(buf)
	s := (*buf)[:total]
	acc := (*buf)[total:]
	var lanes [canon.Lanes]float32
	for it := lo; it < hi; it++ {
		t, h := it/j.nq, it%j.nq
		kv := (h / j.grp) * hd
		qv := j.q[it*hd : (it+1)*hd]
		n := j.pos0 + t + 1
		m := float32(math.Inf(-1))
		for u := 0; u < n; u++ {
			x := float32(canon.DotF32(j.k[u*row+kv:u*row+kv+hd], qv) * j.scale)
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
			vu := j.v[u*row+kv : u*row+kv+hd]
			for c, x := range vu {
				al[c] = al[c] + float32(p*x)
			}
		}
		out := j.o[it*hd : (it+1)*hd]
		for c := range out {
			for l := 0; l < nl; l++ {
				lanes[l] = a[l*hd+c]
			}
			out[c] = canon.CombineN(&lanes, nl)
		}
	}
}

// ---- Gated DeltaNet: conv, gates, delta rule ----

type convJob struct {
	y, x, state, w []float32
	T, C, Kc       int
}

var convJobs sync.Pool

func (c *CPU) causalConv(y, x, state, w []float32, T, C, Kc int) {
	need("CausalConv y", len(y), T*C)
	need("CausalConv x", len(x), T*C)
	need("CausalConv state", len(state), C*(Kc-1))
	need("CausalConv w", len(w), C*Kc)
	exec(c, &convJobs, C, T*Kc*4, convJob{y: y, x: x, state: state, w: w, T: T, C: C, Kc: Kc})
}

// run handles channels lo..hi−1 for all tokens.
func (j *convJob) run(lo, hi int) {
	Kc, C := j.Kc, j.C
	nl := canon.LanesUsed(Kc)
	var acc [canon.Lanes]float32
	for ch := lo; ch < hi; ch++ {
		st := j.state[ch*(Kc-1) : (ch+1)*(Kc-1)]
		ww := j.w[ch*Kc : (ch+1)*Kc]
		for t := 0; t < j.T; t++ {
			in := j.x[t*C+ch]
			acc = [canon.Lanes]float32{}
			for i, s := range st {
				l := canon.Lane(i)
				acc[l] = acc[l] + float32(ww[i]*s)
			}
			l := canon.Lane(Kc - 1)
			acc[l] = acc[l] + float32(ww[Kc-1]*in)
			j.y[t*C+ch] = canon.SiLU(canon.CombineN(&acc, nl))
			if Kc > 1 {
				copy(st, st[1:])
				st[Kc-2] = in
			}
		}
	}
}

func (c *CPU) gdnGates(beta, alpha, b, a, aLog, dtBias []float32) {
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

type deltaJob struct {
	o, q, k, v, beta, alpha, S []float32
	T, nk, nv, dk, dv          int
}

var deltaJobs sync.Pool

func (c *CPU) deltaRule(o, q, k, v, beta, alpha, S []float32, T, nk, nv, dk, dv int) {
	need("DeltaRule o", len(o), T*nv*dv)
	need("DeltaRule q", len(q), T*nk*dk)
	need("DeltaRule k", len(k), T*nk*dk)
	need("DeltaRule v", len(v), T*nv*dv)
	need("DeltaRule beta", len(beta), T*nv)
	need("DeltaRule alpha", len(alpha), T*nv)
	need("DeltaRule S", len(S), nv*dk*dv)
	exec(c, &deltaJobs, nv, T*dk*dv*4, deltaJob{o: o, q: q, k: k, v: v, beta: beta, alpha: alpha, S: S, T: T, nk: nk, nv: nv, dk: dk, dv: dv})
}

// run handles value heads lo..hi−1 for all tokens, in token order.
func (j *deltaJob) run(lo, hi int) {
	nk, nv, dk, dv := j.nk, j.nv, j.dk, j.dv
	r := nv / nk
	nl := canon.LanesUsed(dk)
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
	for h := lo; h < hi; h++ {
		i := h / r
		Sh := j.S[h*dk*dv : (h+1)*dk*dv]
		for t := 0; t < j.T; t++ {
			kk := j.k[(t*nk+i)*dk : (t*nk+i+1)*dk]
			qq := j.q[(t*nk+i)*dk : (t*nk+i+1)*dk]
			vv := j.v[(t*nv+h)*dv : (t*nv+h+1)*dv]
			al, be := j.alpha[t*nv+h], j.beta[t*nv+h]
			// Decay the state and read what it predicts for the key.
			clear(acc)
			for rr, kr := range kk {
				row := Sh[rr*dv : (rr+1)*dv]
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
				row := Sh[rr*dv : (rr+1)*dv]
				a := acc[canon.Lane(rr)*dv:][:dv]
				for c, s := range row {
					s = s + float32(kr*delta[c])
					row[c] = s
					a[c] = a[c] + float32(qr*s)
				}
			}
			out := j.o[(t*nv+h)*dv : (t*nv+h+1)*dv]
			for c := range out {
				out[c] = combine(c)
			}
		}
	}
}

// ---- elementwise ----

type ewJob struct {
	y, a, b []float32
	kind    int // ewSiLUMul, ewSigmoidMul
}

const (
	ewSiLUMul = iota
	ewSigmoidMul
)

var ewJobs sync.Pool

func (c *CPU) siluMul(y, g, u []float32) {
	n := len(g)
	need("SiLUMul y", len(y), n)
	need("SiLUMul u", len(u), n)
	exec(c, &ewJobs, n, 16, ewJob{y: y, a: g, b: u, kind: ewSiLUMul})
}

func (c *CPU) sigmoidMul(y, x, g []float32) {
	n := len(x)
	need("SigmoidMul y", len(y), n)
	need("SigmoidMul g", len(g), n)
	exec(c, &ewJobs, n, 16, ewJob{y: y, a: x, b: g, kind: ewSigmoidMul})
}

func (j *ewJob) run(lo, hi int) {
	y, a, b := j.y[lo:hi], j.a[lo:hi], j.b[lo:hi]
	switch j.kind {
	case ewSiLUMul:
		for i := range y {
			y[i] = float32(canon.SiLU(a[i]) * b[i])
		}
	case ewSigmoidMul:
		for i := range y {
			y[i] = float32(a[i] * canon.Sigmoid(b[i]))
		}
	}
}

func (c *CPU) add(y, a, b []float32) {
	n := len(a)
	need("Add y", len(y), n)
	need("Add b", len(b), n)
	for i := 0; i < n; i++ {
		y[i] = a[i] + b[i]
	}
}

// ---- MoE ----

var topkPool = sync.Pool{New: func() any { return new(canon.TopK) }}

func (c *CPU) route(idx []int32, w []float32, logits []float32, T, E, k int, renorm bool) {
	need("Route logits", len(logits), T*E)
	need("Route idx", len(idx), T*k)
	need("Route w", len(w), T*k)
	buf := getScratch(E)
	defer putScratch(buf)
	p := *buf
	sel := topkPool.Get().(*canon.TopK)
	defer topkPool.Put(sel)
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

type combineJob struct {
	y, x, w []float32
	k, n    int
}

var combineJobs sync.Pool

func (c *CPU) combine(y, x, w []float32, T, k, n int) {
	need("Combine y", len(y), T*n)
	need("Combine x", len(x), T*k*n)
	need("Combine w", len(w), T*k)
	exec(c, &combineJobs, T, k*n, combineJob{y: y, x: x, w: w, k: k, n: n})
}

// run handles tokens lo..hi−1.
func (j *combineJob) run(lo, hi int) {
	k, n := j.k, j.n
	nl := canon.LanesUsed(k)
	var acc [canon.Lanes]float32
	for t := lo; t < hi; t++ {
		wt := j.w[t*k : (t+1)*k]
		for i := 0; i < n; i++ {
			acc = [canon.Lanes]float32{}
			for s, ws := range wt {
				l := canon.Lane(s)
				acc[l] = acc[l] + float32(j.x[(t*k+s)*n+i]*ws)
			}
			j.y[t*n+i] = canon.CombineN(&acc, nl)
		}
	}
}

func (c *CPU) gateAdd(y, x, g []float32, T, n int) {
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
