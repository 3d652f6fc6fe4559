// Package backend is the seam between Tarfa's model code (package engine)
// and the machines that execute it. The model is written once against
// Backend and Queue; backend/cpu is the reference implementation and
// backend/cuda implements the same operations on a GPU.
//
// Every operation is specified down to the bit by the canonical arithmetic
// of package canon (EXACTNESS.md): an implementation must return exactly the
// bits of backend/cpu for every input, whatever its thread count, tiling or
// batch size. Package backendtest checks that.
//
// # Memory, queues and synchronisation
//
// Activations, caches and recurrent state live in Bufs: ranges of float32
// values in a backend's memory (device memory for a GPU). Operations are
// enqueued on a Queue and may run later; host slices an operation reads
// (Write's source, index lists, token ids) are read before the call
// returns, and host slices it writes (Read's destination, Route's expert
// ids) hold their values once Sync returns. Sync is the only point where
// the host waits for the backend; the engine syncs once per MoE layer (the
// router's choices come back to the host, which decides what to stream) and
// once per step for the logits. Errors (a size mismatch, a device fault,
// memory exhausted) are sticky: the first one is returned by Sync, and the
// operations after it do nothing.
//
// Weights are backend-resident objects identified by the verified digest of
// the record their bytes came from (Key), never by a pointer: a recycled
// buffer at the same address holding another expert is another weight.
package backend

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Backend owns a machine's memory and weights and makes queues. Its
// methods are safe for concurrent use.
type Backend interface {
	// Name identifies the backend: "cpu" or "cuda".
	Name() string
	// Threads is the degree of host parallelism (results never depend on it).
	Threads() int

	// Alloc returns a new zeroed buffer of n float32 values.
	Alloc(n int) (Buf, error)
	// Free releases the allocation b was made by (b from Alloc). Every
	// queue that used it must have been synced, and none may use it again.
	Free(b Buf)

	// Upload makes the rows×cols matrix of verified bytes v usable as w by
	// this backend's queues, identified by key (the same key gives the same
	// resident copy), and records in w where it resides. use says how the
	// model uses it, so that a backend short of device memory can choose
	// what stays on the host.
	Upload(w *Weight, key Key, l weights.Linear, rows, cols int, use Use) error
	// Drop releases what Upload made for w (once no queue uses it).
	Drop(w *Weight)

	// NewQueue returns a queue for one sequence of work (one session).
	NewQueue() (Queue, error)
	// Residency reports what is where (for banners and reports).
	Residency() Residency
	// Close releases the backend's resources; nothing may use it after.
	Close() error
}

// Queue is an ordered stream of operations on Bufs. A Queue is used by one
// goroutine at a time. Sizes are implied by the Bufs where the operation
// says so (elementwise operations work on the length of their output); a
// Buf shorter than an operation needs is an error reported by Sync.
type Queue interface {
	// Write copies src into dst (len(src) == dst.Len()).
	Write(dst Buf, src []float32)
	// Read copies src into dst (len(dst) == src.Len()); dst holds the values
	// once Sync returns.
	Read(dst []float32, src Buf)
	// Zero sets dst to +0.
	Zero(dst Buf)
	// Copy copies rows×cols values: row r of dst (at r·dstStride) gets row r
	// of src (at r·srcStride). dst and src do not overlap.
	Copy(dst Buf, dstStride int, src Buf, srcStride int, rows, cols int)
	// Gather sets row j of dst to row idx[j] of src, rows of n values.
	Gather(dst, src Buf, idx []int32, n int)
	// Scatter sets row idx[j] of dst to row j of src, rows of n values;
	// idx holds no row twice.
	Scatter(dst, src Buf, idx []int32, n int)
	// Embed sets row t of dst to row ids[t] of table, widened exactly.
	Embed(dst Buf, table *Weight, ids []int32)

	// MatMul computes y[t·N+n] = canon dot(W row n, x[t·K:(t+1)·K]) for
	// t < T, n < N, where W is N×K.
	MatMul(y Buf, w *Weight, x Buf, T int)
	// RMSNorm normalises each row of length n of x:
	// inv = Rsqrt(Sum(x·x)/n + eps) (each step rounded),
	// y = float32(float32(x·inv)·scale). scale is the effective per-element
	// weight: w for Qwen3-style norms, float32(1+w) for zero-centred ones.
	// y may be x.
	RMSNorm(y, x, scale Buf, n int, eps float32)
	// GatedRMSNorm is the Gated DeltaNet output norm over rows of length n:
	// y = float32(float32(w·float32(x·inv))·SiLU(z)). y may be x.
	GatedRMSNorm(y, x, z, w Buf, n int, eps float32)
	// L2Norm: inv = Rsqrt(Sum(x·x) + eps), y = float32(x·inv), then, if
	// scale != 1, y = float32(y·scale); rows of length n. y may be x.
	L2Norm(y, x Buf, n int, eps, scale float32)
	// RoPE rotates, in place, the first 2·h dims of every head of x
	// (T rows of heads×hd) with canon.Rotate; cos/sin are T rows of h.
	RoPE(x Buf, T, heads, hd int, cos, sin Buf)
	// Attention is causal GQA softmax attention for T new query rows at
	// positions pos0..pos0+T−1. q is T×nq×hd; k and v hold the cache
	// for positions 0..pos0+T−1, each row nkv×hd. Query head h uses KV head
	// h/(nq/nkv). For query t: s_u = float32(dot(q,k_u)·scale) for u <= pos0+t,
	// m = max s, e_u = Exp(s_u − m), Z = Sum(e), p_u = e_u/Z,
	// o[c] = Sum_u float32(p_u·v_u[c]). o is T×nq×hd.
	Attention(o, q, k, v Buf, T, pos0, nq, nkv, hd int, scale float32)

	// CausalConv is the Gated DeltaNet depthwise causal conv over C channels
	// with kernel Kc followed by SiLU. state holds, per channel, the Kc−1
	// previous inputs (oldest first; zeros at sequence start) and is
	// updated. w is C×Kc (tap Kc−1 multiplies the current input). For
	// each channel and token: y = SiLU(Sum_j float32(w[j]·in_j)).
	CausalConv(y, x, state, w Buf, T, C, Kc int)
	// GDNGates computes, per token t and value head j (nv = aLog.Len()),
	// beta = Sigmoid(b) and the decay alpha = Exp(g) with
	// g = float32(−Exp(aLog[j])·Softplus(float32(a+dtBias[j]))).
	GDNGates(beta, alpha, b, a, aLog, dtBias Buf)
	// DeltaRule runs the gated delta rule over T tokens for nv value heads
	// (value head j reads key head j/(nv/nk)); S is nv×dk×dv and is updated.
	// q and k (T×nk×dk) are already L2-normalised (q also scaled), v is
	// T×nv×dv, beta and alpha are T×nv. Per token and head:
	//   S ← float32(α·S); m[c] = Sum_r float32(k[r]·S[r,c]);
	//   δ[c] = float32(float32(v[c]−m[c])·β);
	//   S[r,c] ← float32(S[r,c] + float32(k[r]·δ[c]));
	//   o[c] = Sum_r float32(q[r]·S[r,c]).
	// o is T×nv×dv.
	DeltaRule(o, q, k, v, beta, alpha, S Buf, T, nk, nv, dk, dv int)

	// SiLUMul: y = float32(SiLU(g)·u). y may be g or u.
	SiLUMul(y, g, u Buf)
	// SigmoidMul: y = float32(x·Sigmoid(g)). y may be x.
	SigmoidMul(y, x, g Buf)
	// Add: y = float32(a+b). y may be a or b.
	Add(y, a, b Buf)

	// Route turns router logits (T×E) into k experts per token:
	// p = softmax(logits) (m = max, e = Exp(ℓ−m), p = e/Sum(e)), the top-k of
	// p in torch order (canon.TopK), weights p[sel], and, if renorm,
	// w = w/Sum(w). w is T×k; idx (T×k, on the host) holds the experts once
	// Sync returns.
	Route(idx []int32, w, logits Buf, T, E, k int, renorm bool)
	// Combine computes y[t,i] = Sum_s float32(x[t,s,i]·w[t,s]) over the k
	// slots in slot order (canon.Sum); x is T×k×n, w is T×k, y is T×n.
	Combine(y, x, w Buf, T, k, n int)
	// GateAdd: y[t,i] = float32(y[t,i] + float32(Sigmoid(g[t])·x[t,i]));
	// x and y are T×n, g has T entries (the shared-expert gate).
	GateAdd(y, x, g Buf, T, n int)

	// LoadExpert makes a streamed routed expert usable by this queue's
	// MatMuls until ReleaseExpert: gate and up are I×H, down is H×I, the
	// verified bytes of the record with the given digest. The bytes are read
	// before LoadExpert returns (the caller may recycle them). It keeps no
	// copy beyond ReleaseExpert: residency between uses is the expert
	// hierarchy's (package tier), through a SlotPool's slots.
	LoadExpert(x *Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error
	// ReleaseExpert ends x's use by the operations enqueued so far.
	ReleaseExpert(x *Expert)

	// Sync waits for every enqueued operation and returns the first error
	// since the queue was made.
	Sync() error
	// Close releases the queue (after a Sync).
	Close() error
}

// Memory is one allocation of a backend. Each backend defines its own type;
// a Buf of another backend's memory given to an operation is an error.
type Memory interface {
	// Elems is the allocation's length in float32 values.
	Elems() int
}

// Buf is a range of float32 values in a backend's memory. It is a small
// value: Slice and Rows make views without allocating. The zero Buf is
// empty.
type Buf struct {
	mem    Memory
	off, n int
}

// MakeBuf returns the view of n values of m from off (for backends).
func MakeBuf(m Memory, off, n int) Buf {
	if off < 0 || n < 0 || (m == nil && off+n > 0) || (m != nil && off+n > m.Elems()) {
		panic(fmt.Sprintf("backend: view [%d, %d+%d) of an allocation of %d", off, off, n, elems(m)))
	}
	return Buf{mem: m, off: off, n: n}
}

func elems(m Memory) int {
	if m == nil {
		return 0
	}
	return m.Elems()
}

// Mem is the allocation b views (nil for the zero Buf).
func (b Buf) Mem() Memory { return b.mem }

// Off is b's first value within its allocation.
func (b Buf) Off() int { return b.off }

// Len is the number of values b views.
func (b Buf) Len() int { return b.n }

// Slice returns values [lo, hi) of b. It panics unless 0 <= lo <= hi <=
// b.Len() (a programming error, as for Go slices).
func (b Buf) Slice(lo, hi int) Buf {
	if lo < 0 || hi < lo || hi > b.n {
		panic(fmt.Sprintf("backend: slice [%d:%d] of a Buf of %d", lo, hi, b.n))
	}
	return Buf{mem: b.mem, off: b.off + lo, n: hi - lo}
}

// Rows returns rows [r0, r1) of b seen as rows of rowLen values.
func (b Buf) Rows(r0, r1, rowLen int) Buf { return b.Slice(r0*rowLen, r1*rowLen) }

// Key identifies a weight by the verified bytes it was made from: the
// manifest digest of its record and which matrix of the record it is (0
// for a tensor; 0, 1, 2 for an expert's gate, up and down projections).
type Key struct {
	Digest jnf.Digest
	Part   int
	// Scale is the digest of a block-FP8 tensor's weight_scale_inv record
	// (zero otherwise): the codes alone do not make the matrix.
	Scale jnf.Digest
}

// Weight is a weight matrix a backend computes with. Host views the
// verified bytes in place (every backend can compute from them); Dev is the
// backend's resident copy, nil when the weight lives on the host.
type Weight struct {
	Key  Key
	Host Mat
	Dev  any
}

// Rows and Cols are the matrix's shape.
func (w *Weight) Rows() int { return w.Host.Rows }
func (w *Weight) Cols() int { return w.Host.Cols }

// Bytes is the size of the weight's values as a backend holds them: BF16
// or F32 values, or E4M3 codes and their float32 block scales.
func (w *Weight) Bytes() int64 {
	n := int64(w.Host.Rows) * int64(w.Host.Cols)
	switch {
	case w.Host.Quantized():
		return n + 4*int64(len(w.Host.Scale))
	case w.Host.F32 != nil:
		return 4 * n
	}
	return 2 * n
}

// Use says how the model uses a weight.
type Use int

const (
	// UseMatMul: multiplied by activations (MatMul).
	UseMatMul Use = iota
	// UseHead: the LM head, the largest matrix, used once per token: the
	// first matrix to stay on the host when device memory is short.
	UseHead
	// UseGather: the embedding table, whose rows are gathered (Embed): kept
	// on the host when a device budget is set (a row costs nothing to move).
	UseGather
)

// Expert is a routed expert's three projections as a queue computes with
// them (LoadExpert, SlotQueue.BindSlot). Slot is the backend's handle.
type Expert struct {
	ID             weights.ExpertID
	Digest         jnf.Digest
	Gate, Up, Down Weight
	Slot           any
}

// ViewExpert makes x view an expert's verified bytes in place, as host
// matrices: the CPU's LoadExpert, and the host side of other backends.
func ViewExpert(x *Expert, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error {
	x.ID, x.Digest, x.Slot = id, digest, nil
	parts := [3]struct {
		w          *Weight
		l          weights.Linear
		rows, cols int
	}{{&x.Gate, gate, I, H}, {&x.Up, up, I, H}, {&x.Down, down, H, I}}
	for i, p := range parts {
		p.w.Key, p.w.Dev = Key{Digest: digest, Part: i}, nil
		if err := p.w.Host.InitLinear(p.l, p.rows, p.cols); err != nil {
			*x = Expert{}
			return err
		}
	}
	return nil
}

// Host is a backend that computes on host memory the caller owns (the CPU
// reference): the host side of an exact host-plus-device split, which the
// engine opens by name and never by type.
type Host interface {
	Backend
	// Wrap returns a Buf viewing f (no copy): the queue's operations read
	// and write f itself.
	Wrap(f []float32) Buf
}

// Residency says what a backend keeps where.
type Residency struct {
	// Device describes the machine, e.g. "NVIDIA H200 (sm_90, 139.8 GiB)".
	Device string `json:"device"`
	// Budget is the device-memory budget in bytes (0: none).
	Budget int64 `json:"budget_bytes"`
	// InUse is the device memory in use as the driver reports it (total −
	// free), which the budget bounds.
	InUse int64 `json:"in_use_bytes"`
	// DeviceWeights and HostWeights are the bytes of weights resident on
	// the device and kept on the host, with their counts.
	DeviceWeights     int64    `json:"device_weight_bytes"`
	DeviceWeightCount int      `json:"device_weights"`
	HostWeights       int64    `json:"host_weight_bytes"`
	HostWeightCount   int      `json:"host_weights"`
	HostResident      []string `json:"host_resident,omitempty"` // names of the host-resident weights
	// ExpertSlots is how many SlotPool slots are allocated (the device
	// level of the expert hierarchy; 0: none) and ExpertSlotBytes each
	// one's size.
	ExpertSlots     int   `json:"expert_slots"`
	ExpertSlotBytes int64 `json:"expert_slot_bytes"`
	// VerifyCopies says the backend hashes every routed expert it copies
	// into device memory, there, against its digest.
	VerifyCopies bool `json:"verify_copies,omitempty"`
}

// Slot is memory of a SlotPool that holds one routed expert between uses.
// It is opaque: only the pool that allocated it fills, binds and frees it.
type Slot interface {
	// Bytes is the slot's size.
	Bytes() int64
}

// SlotPool is implemented by backends whose memory can keep routed experts
// between uses (a device's memory; the CPU's on request, so that the logic
// above it is tested without a device). The backend exposes raw slots
// only: which expert a slot holds, and when it is replaced, is the expert
// hierarchy's decision (package tier's device level, under the same
// policies as its RAM tier). Its methods are safe for concurrent use.
type SlotPool interface {
	// SlotCapacity is how many slots for experts of up to n bytes (their
	// three matrices) the pool can allocate now: what the device budget
	// leaves after the resident weights and the reserve for sessions
	// (0: none).
	SlotCapacity(n int64) int
	// AllocSlot allocates a slot for an expert of up to n bytes.
	AllocSlot(n int64) (Slot, error)
	// FreeSlot releases s once every queue's use of it is done; no queue
	// may bind it again.
	FreeSlot(s Slot)
	// SlotHolds reports whether s holds a copy of the expert with this
	// digest that no check has found changed: filled by FillSlot with that
	// digest, not filled since, and not found to differ by the device check
	// of the copy (Options.VerifyCopies) or by a scrub (DeviceScrubber).
	SlotHolds(s Slot, digest jnf.Digest) bool
}

// MatMulOp is one product of a MatMuls call: Y = W·X over T rows, as
// Queue.MatMul(Y, W, X, T) computes it.
type MatMulOp struct {
	Y, X Buf
	W    *Weight
	T    int
}

// Grouper is implemented by queues that compute several independent
// products in one call: each op gets the bits Queue.MatMul gives it (the
// same canonical reduction per output element), and no op may write what
// another reads. A device launches them together: one routed expert's
// product of a few rows leaves most of a GPU idle, the experts of a whole
// MoE layer fill it.
type Grouper interface {
	MatMuls(ops []MatMulOp)
}

// DeltaRuler is implemented by queues that run the gated delta rule
// (Queue.DeltaRule) of several sessions in one call: each op gets the bits
// DeltaRule gives it alone, in its own state S. The ops share the head
// counts and dimensions; no op's S may be another's, or be read or written
// by another op. A device launches them together: one session's rule over
// a token keeps a few of its multiprocessors busy, a batch's fill it.
type DeltaRuler interface {
	DeltaRules(ops []DeltaRuleOp, nk, nv, dk, dv int)
}

// DeltaRuleOp is one session's DeltaRule of a DeltaRules call: T tokens'
// o, q, k, v, beta and alpha rows, and the state S they update.
type DeltaRuleOp struct {
	O, Q, K, V, Beta, Alpha, S Buf
	T                          int
}

// Normaliser is implemented by queues that compute a log-softmax's
// normaliser where the values are, so that a device's logits need no pass
// on the host for their logprobs: for each of the rows rows of n values of
// x, out gets the row's canon.Max m and canon.ExpSum(row, m), in that order
// (2·rows values). Their bits are canon's.
type Normaliser interface {
	SoftmaxNorm(out, x Buf, rows, n int)
}

// Argmaxer is implemented by queues that find each row's largest value
// where the values are, so that a greedy pick needs no pass over a
// device's logits on the host: idx[r] gets canon.Argmax of row r of the
// rows rows of n values of x (the lowest index among equal maxima, −0 and
// +0 equal; −1 for a row holding a NaN, or of no values). idx is on the
// host and holds them once Sync returns.
type Argmaxer interface {
	Argmax(idx []int32, x Buf, rows, n int)
}

// SlotQueue is implemented by the queues of a SlotPool backend.
type SlotQueue interface {
	// FillSlot copies the verified bytes of an expert (as LoadExpert takes
	// them) into s, once every queue's last use of s before the call is
	// done (their ReleaseExpert): s is never overwritten while a queue
	// still reads it. The bytes are read before FillSlot returns. A backend
	// that verifies its copies hashes the copy where it lies and checks it
	// at this queue's next Sync: a copy that differs fails the Sync with an
	// error naming the expert and matching jnf.ErrVerification, and s then
	// holds nothing (SlotHolds is false and BindSlot refuses it until it is
	// filled again).
	FillSlot(s Slot, id weights.ExpertID, digest jnf.Digest, gate, up, down weights.Linear, I, H int) error
	// BindSlot makes x use the expert s holds for this queue's MatMuls
	// until ReleaseExpert, after the copy that filled it (on whichever
	// queue). It refuses a slot that does not hold the expert with this
	// digest, or whose copy a check found changed.
	BindSlot(x *Expert, s Slot, id weights.ExpertID, digest jnf.Digest) error
}

// DeviceScrubber is a backend that can re-hash, where they are, the copies
// of routed experts its slots hold (every filled SlotPool slot):
// ScrubDevice returns the bytes hashed and the first copy that differs from
// its digest (an error matching jnf.ErrVerification), and empties the slots
// that differ (SlotHolds is then false).
type DeviceScrubber interface {
	ScrubDevice() (int64, error)
}

// Counters are a backend's cumulative work counters, for benchmarks: a
// figure is the difference of two snapshots. Seconds are device time
// measured with the device's own events; a backend that does not measure
// one reports 0.
type Counters struct {
	// H2DBytes are the bytes queues copied from host to device memory
	// (activations, index lists, streamed experts), H2DCopies the copies
	// and H2DSeconds their device time. ExpertH2DBytes are the part that
	// were streamed routed experts (LoadExpert).
	H2DBytes       int64   `json:"h2d_bytes"`
	H2DCopies      int64   `json:"h2d_copies"`
	H2DSeconds     float64 `json:"h2d_seconds"`
	ExpertH2DBytes int64   `json:"expert_h2d_bytes"`
	// D2HBytes are the bytes queues copied back to the host.
	D2HBytes int64 `json:"d2h_bytes"`
	// Kernels counts the kernels launched and KernelSeconds is their device
	// time (summed: kernels of one queue run one after another).
	Kernels       int64   `json:"kernels"`
	KernelSeconds float64 `json:"kernel_seconds"`
	// ExpertsLoaded counts LoadExpert and FillSlot calls that took the
	// expert's bytes (copied to a device slot, or viewed in place by the
	// CPU), ExpertsCached the BindSlot uses of a slot filled before (not by
	// the same queue's FillSlot just before it), and HostExperts the loaded
	// experts a device backend computed on the host because no device slot
	// could take them.
	ExpertsLoaded int64 `json:"experts_loaded"`
	// ExpertsDirect are the loaded experts copied to the device straight
	// from memory the backend pinned (Pinner), with no staging copy.
	ExpertsDirect int64 `json:"experts_direct"`
	ExpertsCached int64 `json:"experts_cached"`
	HostExperts   int64 `json:"host_experts"`
	// UploadBytes are the bytes of weights Upload put in device memory.
	UploadBytes int64 `json:"upload_bytes"`
	// DeviceVerified counts the copies of routed experts a device backend
	// hashed in device memory against their digest, DeviceVerifiedBytes
	// their bytes, DeviceScrubbedBytes the bytes its scrubs of resident
	// copies hashed, and DeviceVerifyFailures the copies either found
	// changed (cuda: Options.VerifyCopies, ScrubDevice).
	DeviceVerified       int64 `json:"device_verified,omitempty"`
	DeviceVerifiedBytes  int64 `json:"device_verified_bytes,omitempty"`
	DeviceScrubbedBytes  int64 `json:"device_scrubbed_bytes,omitempty"`
	DeviceVerifyFailures int64 `json:"device_verify_failures,omitempty"`
	// WaitSeconds is the host's wall time waiting for its queues' device
	// work to finish (every synchronisation: a caller's Sync, and one a
	// queue makes itself, as when its pinned staging must be reused),
	// Waits their count (a device backend; 0 otherwise).
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
	Waits       int64   `json:"waits,omitempty"`
	// KernelTimes are, with device timing, the kernels' launches and device
	// time by the name of the operation that launched them (a device
	// backend with timing on; nil otherwise). Their seconds sum to
	// KernelSeconds.
	KernelTimes map[string]KernelTime `json:"kernel_times,omitempty"`
}

// KernelTime is the launches and the summed device time of one kind of
// kernel (Counters.KernelTimes).
type KernelTime struct {
	Launches int64   `json:"launches"`
	Seconds  float64 `json:"seconds"`
}

// Sub returns c − o, counter by counter.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		H2DBytes: c.H2DBytes - o.H2DBytes, H2DCopies: c.H2DCopies - o.H2DCopies, H2DSeconds: c.H2DSeconds - o.H2DSeconds,
		ExpertH2DBytes: c.ExpertH2DBytes - o.ExpertH2DBytes, D2HBytes: c.D2HBytes - o.D2HBytes,
		Kernels: c.Kernels - o.Kernels, KernelSeconds: c.KernelSeconds - o.KernelSeconds,
		ExpertsLoaded: c.ExpertsLoaded - o.ExpertsLoaded, ExpertsDirect: c.ExpertsDirect - o.ExpertsDirect, ExpertsCached: c.ExpertsCached - o.ExpertsCached,
		HostExperts: c.HostExperts - o.HostExperts, UploadBytes: c.UploadBytes - o.UploadBytes,
		DeviceVerified: c.DeviceVerified - o.DeviceVerified, DeviceVerifiedBytes: c.DeviceVerifiedBytes - o.DeviceVerifiedBytes,
		DeviceScrubbedBytes: c.DeviceScrubbedBytes - o.DeviceScrubbedBytes, DeviceVerifyFailures: c.DeviceVerifyFailures - o.DeviceVerifyFailures,
		WaitSeconds: c.WaitSeconds - o.WaitSeconds, Waits: c.Waits - o.Waits,
		KernelTimes: subKernelTimes(c.KernelTimes, o.KernelTimes),
	}
}

// subKernelTimes is c − o by name, leaving out the names with no launches
// in between (nil if none is left).
func subKernelTimes(c, o map[string]KernelTime) map[string]KernelTime {
	var d map[string]KernelTime
	for name, k := range c {
		k.Launches -= o[name].Launches
		k.Seconds -= o[name].Seconds
		if k.Launches == 0 {
			continue
		}
		if d == nil {
			d = make(map[string]KernelTime)
		}
		d[name] = k
	}
	return d
}

// Pinner is implemented by device backends that can pin host memory for
// their copies: LoadExpert of bytes in memory they pinned (the streaming
// tier's staging buffers, tier.Options.Pinner) copies them to the device
// without a staging copy on the host. Memory they cannot pin is an error
// of Pin, and the caller uses ordinary memory.
type Pinner = weights.Pinner

// Meter is implemented by backends that count their work. Counters is safe
// for concurrent use; its device times include only work a Sync has
// completed.
type Meter interface {
	Counters() Counters
}

// CheckRows checks that every index of idx names one of a buffer's rows
// rows (the row indices of Gather and Scatter), naming the
// first that does not.
func CheckRows(op string, idx []int32, rows int) error {
	for j, r := range idx {
		if r < 0 || int(r) >= rows {
			return fmt.Errorf("%s: index %d is row %d of %d", op, j, r, rows)
		}
	}
	return nil
}
