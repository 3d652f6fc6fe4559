package engine

import "github.com/tarfa-ai/tarfa/backend"

// l2Eps is the fixed epsilon of the Gated DeltaNet L2 norm (added to the
// sum of squares).
const l2Eps = float32(1e-6)

// deltaNet is the Qwen3.5 Gated DeltaNet (linear attention) layer. The
// projections, norms and gates run over all rows of the step; the causal
// conv and the delta rule per segment (each session has its own state).
func (w *work) deltaNet(L *layer, segs []segment, x, out backend.Buf, T int) {
	m, c, q := w.m, w.m.cfg, w.q
	g := L.gdn
	nk, nv, dk, dv, Kc := c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim, c.ConvKernel
	C := c.ConvDim()
	raw := w.buf(&w.c, T*C)
	conv := w.buf(&w.cc, T*C)
	z := w.buf(&w.z, T*nv*dv)
	b := w.buf(&w.b, T*nv)
	a := w.buf(&w.a, T*nv)
	q.MatMul(raw, g.qkv, x, T)
	q.MatMul(z, g.z, x, T)
	q.MatMul(b, g.b, x, T)
	q.MatMul(a, g.a, x, T)
	for _, sg := range segs {
		st := &sg.s.st.layers[L.index]
		r0, r1 := sg.row0, sg.row0+sg.n
		q.CausalConv(conv.Rows(r0, r1, C), raw.Rows(r0, r1, C), st.conv, g.conv, r1-r0, C, Kc)
	}
	// Split the conv output per token into q | k | v (head-major each).
	kd, vd := nk*dk, nv*dv
	qn := w.buf(&w.qn, T*kd)
	kn := w.buf(&w.kn, T*kd)
	vv := w.buf(&w.vv, T*vd)
	q.Copy(qn, kd, conv, C, T, kd)
	q.Copy(kn, kd, conv.Slice(kd, conv.Len()), C, T, kd)
	q.Copy(vv, vd, conv.Slice(2*kd, conv.Len()), C, T, vd)
	q.L2Norm(qn, qn, dk, l2Eps, m.qkScale)
	q.L2Norm(kn, kn, dk, l2Eps, 1)
	beta := w.buf(&w.beta, T*nv)
	alpha := w.buf(&w.alpha, T*nv)
	q.GDNGates(beta, alpha, b, a, g.aLog, g.dtBias)
	o := w.buf(&w.o, T*vd)
	dr, group := q.(backend.DeltaRuler)
	group = group && len(segs) > 1
	ops := w.drOps[:0]
	for _, sg := range segs {
		st := &sg.s.st.layers[L.index]
		r0, r1 := sg.row0, sg.row0+sg.n
		op := backend.DeltaRuleOp{O: o.Rows(r0, r1, vd), Q: qn.Rows(r0, r1, kd), K: kn.Rows(r0, r1, kd), V: vv.Rows(r0, r1, vd),
			Beta: beta.Rows(r0, r1, nv), Alpha: alpha.Rows(r0, r1, nv), S: st.state, T: r1 - r0}
		if group {
			ops = append(ops, op)
		} else {
			q.DeltaRule(op.O, op.Q, op.K, op.V, op.Beta, op.Alpha, op.S, op.T, nk, nv, dk, dv)
		}
	}
	if group {
		// One call for the batch's sessions (each its own state): the
		// same bits as one DeltaRule each.
		dr.DeltaRules(ops, nk, nv, dk, dv)
	}
	clear(ops) // keep no session's state alive
	w.drOps = ops[:0]
	q.GatedRMSNorm(o, o, z, g.norm, dv, c.RMSNormEps)
	q.MatMul(out, g.out, o, T)
}

// mlp is a dense SwiGLU MLP: down(silu(gate(x))·up(x)).
func (w *work) mlp(mw *mlpWeights, x, out backend.Buf, T int) {
	q := w.q
	I := mw.gate.Rows()
	g := w.buf(&w.sg, T*I)
	u := w.buf(&w.su, T*I)
	q.MatMul(g, mw.gate, x, T)
	q.MatMul(u, mw.up, x, T)
	q.SiLUMul(g, g, u)
	q.MatMul(out, mw.down, g, T)
}
