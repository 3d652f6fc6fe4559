package engine

import "github.com/tarfa-ai/tarfa/backend"

// attention is full (GQA, causal) attention; Qwen3.5's variant has the
// per-head interleaved query|gate projection and a sigmoid output gate. The
// projections, norms and RoPE run over all rows of the step; the KV append
// and the attention itself per segment (each session has its own cache).
func (w *work) attention(L *layer, segs []segment, x, out backend.Buf, T int) {
	m, c, q := w.m, w.m.cfg, w.q
	a := L.attn
	nq, nkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qb := w.buf(&w.q0, T*nq*hd)
	var gate backend.Buf
	if a.gated {
		qg := w.buf(&w.qg, T*2*nq*hd)
		q.MatMul(qg, a.q, x, T)
		gate = w.buf(&w.gate, T*nq*hd)
		// row i = (token, head): [query hd | gate hd]
		q.Copy(qb, hd, qg, 2*hd, T*nq, hd)
		q.Copy(gate, hd, qg.Slice(hd, qg.Len()), 2*hd, T*nq, hd)
	} else {
		q.MatMul(qb, a.q, x, T)
	}
	kvRow := nkv * hd
	k := w.buf(&w.k, T*kvRow)
	v := w.buf(&w.v, T*kvRow)
	q.MatMul(k, a.k, x, T)
	q.MatMul(v, a.v, x, T)
	q.RMSNorm(qb, qb, a.qNorm, hd, c.RMSNormEps)
	q.RMSNorm(k, k, a.kNorm, hd, c.RMSNormEps)
	n := len(m.invFreq)
	cos, sin := w.cos.Slice(0, T*n), w.sin.Slice(0, T*n)
	q.RoPE(qb, T, nq, hd, cos, sin)
	q.RoPE(k, T, nkv, hd, cos, sin)
	o := w.buf(&w.o, T*nq*hd)
	for _, sg := range segs {
		st := &sg.s.st.layers[L.index]
		pos, nt := sg.s.pos, sg.n
		r0, r1 := sg.row0, sg.row0+nt
		q.Copy(st.k.Slice(pos*kvRow, (pos+nt)*kvRow), nt*kvRow, k.Rows(r0, r1, kvRow), nt*kvRow, 1, nt*kvRow)
		q.Copy(st.v.Slice(pos*kvRow, (pos+nt)*kvRow), nt*kvRow, v.Rows(r0, r1, kvRow), nt*kvRow, 1, nt*kvRow)
		q.Attention(o.Rows(r0, r1, nq*hd), qb.Rows(r0, r1, nq*hd), st.k.Slice(0, (pos+nt)*kvRow), st.v.Slice(0, (pos+nt)*kvRow), nt, pos, nq, nkv, hd, m.attnScale)
	}
	if a.gated {
		q.SigmoidMul(o, o, gate)
	}
	q.MatMul(out, a.o, o, T)
}
