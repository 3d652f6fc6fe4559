package cpu

import (
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
)

// sliceOps runs the queue's operations on host slices, one queue per call,
// failing the test on an error (the tests' calling convention).
type sliceOps struct {
	t testing.TB
	c *CPU
}

func on(t testing.TB, c *CPU) sliceOps { return sliceOps{t, c} }

func (o sliceOps) do(f func(q *Queue)) {
	o.t.Helper()
	q := o.c.NewHostQueue()
	f(q)
	if err := q.Sync(); err != nil {
		o.t.Fatal(err)
	}
}

func W(f []float32) backend.Buf { return Wrap(f) }

func (o sliceOps) MatMul(y []float32, w *backend.Mat, x []float32, T int) {
	o.do(func(q *Queue) { q.MatMul(W(y), &backend.Weight{Host: *w}, W(x), T) })
}
func (o sliceOps) RMSNorm(y, x, scale []float32, n int, eps float32) {
	o.do(func(q *Queue) { q.RMSNorm(W(y), W(x), W(scale), n, eps) })
}
func (o sliceOps) GatedRMSNorm(y, x, z, w []float32, n int, eps float32) {
	o.do(func(q *Queue) { q.GatedRMSNorm(W(y), W(x), W(z), W(w), n, eps) })
}
func (o sliceOps) L2Norm(y, x []float32, n int, eps, scale float32) {
	o.do(func(q *Queue) { q.L2Norm(W(y), W(x), n, eps, scale) })
}
func (o sliceOps) RoPE(x []float32, T, heads, hd int, cos, sin []float32) {
	o.do(func(q *Queue) { q.RoPE(W(x), T, heads, hd, W(cos), W(sin)) })
}
func (o sliceOps) Attention(out, qv, k, v []float32, T, pos0, nq, nkv, hd int, scale float32) {
	o.do(func(q *Queue) { q.Attention(W(out), W(qv), W(k), W(v), T, pos0, nq, nkv, hd, scale) })
}
func (o sliceOps) CausalConv(y, x, state, w []float32, T, C, Kc int) {
	o.do(func(q *Queue) { q.CausalConv(W(y), W(x), W(state), W(w), T, C, Kc) })
}
func (o sliceOps) GDNGates(beta, alpha, b, a, aLog, dtBias []float32) {
	o.do(func(q *Queue) { q.GDNGates(W(beta), W(alpha), W(b), W(a), W(aLog), W(dtBias)) })
}
func (o sliceOps) DeltaRule(out, qv, k, v, beta, alpha, S []float32, T, nk, nv, dk, dv int) {
	o.do(func(q *Queue) { q.DeltaRule(W(out), W(qv), W(k), W(v), W(beta), W(alpha), W(S), T, nk, nv, dk, dv) })
}
func (o sliceOps) SiLUMul(y, g, u []float32) { o.do(func(q *Queue) { q.SiLUMul(W(y), W(g), W(u)) }) }
func (o sliceOps) SigmoidMul(y, x, g []float32) {
	o.do(func(q *Queue) { q.SigmoidMul(W(y), W(x), W(g)) })
}
func (o sliceOps) Route(idx []int32, w []float32, logits []float32, T, E, k int, renorm bool) {
	o.do(func(q *Queue) { q.Route(idx, W(w), W(logits), T, E, k, renorm) })
}
func (o sliceOps) Combine(y, x, w []float32, T, k, n int) {
	o.do(func(q *Queue) { q.Combine(W(y), W(x), W(w), T, k, n) })
}
