// Package backend is the seam between Tarfa's model code (package engine)
// and the machines that execute it. The model is written once against
// Backend; engine/cpu is the reference implementation and a CUDA backend
// implements the same operations.
//
// Every operation is specified down to the bit by the canonical arithmetic
// of package canon (EXACTNESS.md): an implementation must return exactly the
// bits of engine/cpu for every input, whatever its thread count, tiling or
// batch size. Activations are row-major float32 slices; T is the number of
// token rows an operation processes. Output slices may alias inputs only
// where an operation says so.
package backend

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Backend executes the model's operations. Methods panic on inconsistent
// sizes (a programming error of the caller, never a data error).
type Backend interface {
	// Name identifies the backend, e.g. "cpu".
	Name() string
	// Threads is the degree of parallelism (results never depend on it).
	Threads() int

	// MatMul computes y[t·N+n] = canon dot(W row n, x[t·K:(t+1)·K]) for
	// t < T, n < N, where W is N×K.
	MatMul(y []float32, w *Mat, x []float32, T int)

	// RMSNorm normalises each row of length n of x:
	// inv = Rsqrt(Sum(x·x)/n + eps) (each step rounded),
	// y = float32(float32(x·inv)·scale). scale is the effective per-element
	// weight: w for Qwen3-style norms, float32(1+w) for zero-centred ones.
	// y may alias x.
	RMSNorm(y, x, scale []float32, n int, eps float32)
	// GatedRMSNorm is the Gated DeltaNet output norm over rows of length n:
	// y = float32(float32(w·float32(x·inv))·SiLU(z)). y may alias x.
	GatedRMSNorm(y, x, z, w []float32, n int, eps float32)
	// L2Norm: inv = Rsqrt(Sum(x·x) + eps), y = float32(x·inv), then, if
	// scale != 1, y = float32(y·scale); rows of length n. y may alias x.
	L2Norm(y, x []float32, n int, eps, scale float32)
	// RoPE rotates, in place, the first 2·h dims of every head of x
	// (T rows of heads×hd) with canon.Rotate; cos/sin are T rows of h.
	RoPE(x []float32, T, heads, hd int, cos, sin []float32)
	// Attention is causal GQA softmax attention for T new query rows at
	// positions pos0..pos0+T−1. q is T×nq×hd; k and v hold the cache
	// for positions 0..pos0+T−1, each row nkv×hd. Query head h uses KV head
	// h/(nq/nkv). For query t: s_u = float32(dot(q,k_u)·scale) for u <= pos0+t,
	// m = max s, e_u = Exp(s_u − m), Z = Sum(e), p_u = e_u/Z,
	// o[c] = Sum_u float32(p_u·v_u[c]). o is T×nq×hd.
	Attention(o, q, k, v []float32, T, pos0, nq, nkv, hd int, scale float32)

	// CausalConv is the Gated DeltaNet depthwise causal conv over C channels
	// with kernel Kc followed by SiLU. state holds, per channel, the Kc−1
	// previous inputs (oldest first; zeros at sequence start) and is
	// updated. w is C×Kc (tap Kc−1 multiplies the current input). For
	// each channel and token: y = SiLU(Sum_j float32(w[j]·in_j)).
	CausalConv(y, x, state, w []float32, T, C, Kc int)
	// GDNGates computes, per token t and value head j (nv = len(aLog)),
	// beta = Sigmoid(b) and the decay alpha = Exp(g) with
	// g = float32(−Exp(aLog[j])·Softplus(float32(a+dtBias[j]))).
	GDNGates(beta, alpha, b, a, aLog, dtBias []float32)
	// DeltaRule runs the gated delta rule over T tokens for nv value heads
	// (value head j reads key head j/(nv/nk)); S is nv×dk×dv and is updated.
	// q and k (T×nk×dk) are already L2-normalised (q also scaled), v is
	// T×nv×dv, beta and alpha are T×nv. Per token and head:
	//   S ← float32(α·S); m[c] = Sum_r float32(k[r]·S[r,c]);
	//   δ[c] = float32(float32(v[c]−m[c])·β);
	//   S[r,c] ← float32(S[r,c] + float32(k[r]·δ[c]));
	//   o[c] = Sum_r float32(q[r]·S[r,c]).
	// o is T×nv×dv.
	DeltaRule(o, q, k, v, beta, alpha, S []float32, T, nk, nv, dk, dv int)

	// SiLUMul: y = float32(SiLU(g)·u). y may alias g or u.
	SiLUMul(y, g, u []float32)
	// SigmoidMul: y = float32(x·Sigmoid(g)). y may alias x.
	SigmoidMul(y, x, g []float32)
	// Add: y = float32(a+b). y may alias a or b.
	Add(y, a, b []float32)

	// Route turns router logits (T×E) into k experts per token:
	// p = softmax(logits) (m = max, e = Exp(ℓ−m), p = e/Sum(e)), the top-k of
	// p in torch order (canon.TopK), weights p[sel], and, if renorm,
	// w = w/Sum(w). idx and w are T×k.
	Route(idx []int32, w []float32, logits []float32, T, E, k int, renorm bool)
	// Combine computes y[t,i] = Sum_s float32(x[t,s,i]·w[t,s]) over the k
	// slots in slot order (canon.Sum); x is T×k×n, w is T×k, y is T×n.
	Combine(y, x, w []float32, T, k, n int)
	// GateAdd: y[t,i] = float32(y[t,i] + float32(Sigmoid(g[t])·x[t,i]));
	// x and y are T×n, g has T entries (the shared-expert gate).
	GateAdd(y, x, g []float32, T, n int)
}

// Mat is a weight matrix of Rows×Cols exact values, row-major, stored as
// BF16 bit patterns or F32 (exactly one of the two is set). It views the
// verified bytes it was made from in place whenever their alignment allows:
// those bytes are immutable (weights.View), so nothing may write through
// BF16 or F32.
type Mat struct {
	Name       string
	Rows, Cols int
	BF16       []uint16
	F32        []float32
}

// Init makes m view t as a Rows×Cols matrix (t may be 2-D [rows, cols] or
// 3-D [rows, 1, cols]-like with the same element count; the caller checks
// shapes). Only BF16 and F32 are accepted. It does not allocate when the
// data is suitably aligned on a little-endian machine.
func (m *Mat) Init(t weights.View, rows, cols int) error {
	if rows < 0 || cols < 0 || (cols != 0 && rows > math.MaxInt/cols) {
		return fmt.Errorf("tensor %s: %d×%d overflows", t.Name(), rows, cols)
	}
	if n := rows * cols; int64(n) != t.Numel() {
		return fmt.Errorf("tensor %s: shape %v has %d elements, want %d×%d", t.Name(), t.Shape(), t.Numel(), rows, cols)
	}
	*m = Mat{Name: t.Name(), Rows: rows, Cols: cols}
	var err error
	switch t.DType() {
	case jnf.BF16:
		m.BF16, err = U16s(t)
	case jnf.F32:
		m.F32, err = F32s(t)
	default:
		return fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", t.Name(), t.DType())
	}
	return err
}

// Row widens row r of m to float32 (exact) into dst.
func (m *Mat) Row(r int, dst []float32) {
	dst = dst[:m.Cols]
	if m.F32 != nil {
		copy(dst, m.F32[r*m.Cols:(r+1)*m.Cols])
		return
	}
	src := m.BF16[r*m.Cols : (r+1)*m.Cols]
	for i, u := range src {
		dst[i] = bf16(u)
	}
}

func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// elements checks t's byte length against its element count of size-byte
// elements and returns the count.
func elements(t weights.View, dt jnf.DType) (int, error) {
	if t.DType() != dt {
		return 0, fmt.Errorf("tensor %s: dtype %s, want %s", t.Name(), t.DType(), dt)
	}
	n := t.Numel()
	if n < 0 || n > math.MaxInt/int64(dt.Size()) || int64(len(t.Data())) != n*dt.Size() {
		return 0, fmt.Errorf("tensor %s: %d bytes, want %d elements of %s", t.Name(), len(t.Data()), n, dt)
	}
	return int(n), nil
}

// U16s returns the BF16 bit patterns of t, viewing its verified bytes in
// place when possible (read-only: never write the result).
func U16s(t weights.View) ([]uint16, error) {
	n, err := elements(t, jnf.BF16)
	if err != nil || n == 0 {
		return []uint16{}, err
	}
	d := t.Data()
	p := unsafe.StringData(d)
	if littleEndian && uintptr(unsafe.Pointer(p))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(p)), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(d[2*i]) | uint16(d[2*i+1])<<8
	}
	return out, nil
}

// F32s returns the float32 values of t, viewing its verified bytes in place
// when possible (read-only: never write the result).
func F32s(t weights.View) ([]float32, error) {
	n, err := elements(t, jnf.F32)
	if err != nil || n == 0 {
		return []float32{}, err
	}
	d := t.Data()
	p := unsafe.StringData(d)
	if littleEndian && uintptr(unsafe.Pointer(p))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(p)), n), nil
	}
	out := make([]float32, n)
	for i := range out {
		u := uint32(d[4*i]) | uint32(d[4*i+1])<<8 | uint32(d[4*i+2])<<16 | uint32(d[4*i+3])<<24
		out[i] = math.Float32frombits(u)
	}
	return out, nil
}

// Vector returns t (BF16 or F32, any shape) widened to a new float32 slice.
func Vector(t weights.View) ([]float32, error) {
	switch t.DType() {
	case jnf.F32:
		v, err := F32s(t)
		if err != nil {
			return nil, err
		}
		return append([]float32(nil), v...), nil
	case jnf.BF16:
		u, err := U16s(t)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(u))
		for i, x := range u {
			out[i] = bf16(x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", t.Name(), t.DType())
}
