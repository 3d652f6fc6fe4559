// Package backendtest is the conformance suite every backend must pass:
// each operation of backend.Queue against the CPU reference (backend/cpu
// with one thread) on random inputs, edge sizes and special values
// included, compared bit for bit (NaN-ness for NaN: payloads are not
// canonical, EXACTNESS.md). It is a test helper; production code must not
// import it.
package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// Options tunes Run.
type Options struct {
	// Short runs fewer and smaller cases (for slow backends, such as an
	// emulated device).
	Short bool
	// Slots requires the backend to be a backend.SlotPool with room for
	// the two slots the Experts case fills and binds.
	Slots bool
}

// Run checks every operation of be against the CPU reference.
func Run(t *testing.T, be backend.Backend, o Options) {
	s := newSuite(t, be, o)
	for _, c := range []struct {
		name string
		f    func(*suite)
	}{
		{"Transfer", (*suite).transfer},
		{"Copy", (*suite).copyRows},
		{"GatherScatter", (*suite).gatherScatter},
		{"Embed", (*suite).embed},
		{"MatMul", (*suite).matMul},
		{"MatMuls", (*suite).matMuls},
		{"MatMulFP8", (*suite).matMulFP8},
		{"Norms", (*suite).norms},
		{"RoPE", (*suite).rope},
		{"Attention", (*suite).attention},
		{"CausalConv", (*suite).causalConv},
		{"GDNGates", (*suite).gdnGates},
		{"DeltaRule", (*suite).deltaRule},
		{"DeltaRules", (*suite).deltaRules},
		{"Elementwise", (*suite).elementwise},
		{"SoftmaxNorm", (*suite).softmaxNorm},
		{"Argmax", (*suite).argmax},
		{"Route", (*suite).route},
		{"Combine", (*suite).combine},
		{"GateAdd", (*suite).gateAdd},
		{"SignedZeros", (*suite).signedZeros},
		{"Experts", (*suite).experts},
		{"ExpertsFP8", (*suite).expertsFP8},
		{"Errors", (*suite).errors},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			c.f(s)
		})
	}
}

// suite holds the backend under test, the reference, and the weights of a
// checkpoint written for the run.
type suite struct {
	t    *testing.T
	be   backend.Backend
	ref  *cpu.CPU
	o    Options
	r    *rand.Rand
	ck   *weights.Checkpoint
	mats map[string]matSpec
}

type matSpec struct {
	rows, cols int
	dt         jnf.DType
}

// matShapes are the matrices of the suite's checkpoint: ragged and round
// lengths around the canonical chunk (8) and round (256), both dtypes, and
// 1160 (145 chunks: a lane of a kernel that loads four chunks at once
// goes round twice, the second time short).
func matShapes(short bool) []matSpec {
	ks := []int{1, 7, 8, 9, 13, 64, 255, 256, 257, 300, 520, 1160, 2049}
	ns := []int{1, 5, 33, 300}
	if short {
		ks = []int{1, 7, 9, 256, 257, 520}
		ns = []int{1, 5, 33}
	}
	var out []matSpec
	for _, k := range ks {
		for _, n := range ns {
			out = append(out, matSpec{n, k, jnf.BF16})
		}
		out = append(out, matSpec{ns[len(ns)-1], k, jnf.F32})
	}
	return out
}

func matName(m matSpec) string {
	return fmt.Sprintf("w.%s.%dx%d", strings.ToLower(string(m.dt)), m.rows, m.cols)
}

// Expert shapes of the checkpoint: layer 0, experts 0..3, I×H.
const (
	expertI, expertH, expertN = 24, 40, 4
)

const configJSON = `{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","hidden_size":40,
"intermediate_size":48,"moe_intermediate_size":24,"num_hidden_layers":1,"num_attention_heads":2,
"num_key_value_heads":1,"head_dim":20,"num_experts":4,"num_experts_per_tok":2,"vocab_size":300,
"rms_norm_eps":1e-06,"rope_theta":10000.0,"norm_topk_prob":true,"decoder_sparse_step":1,
"mlp_only_layers":[],"tie_word_embeddings":false,"max_position_embeddings":512}`

func newSuite(t *testing.T, be backend.Backend, o Options) *suite {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 11))
	m := &weightstest.Model{Config: []byte(configJSON), Tensors: map[string]jnf.TensorView{}, Experts: map[weights.ExpertID][3]jnf.TensorView{}}
	s := &suite{be: be, ref: cpu.New(1), o: o, r: r, mats: map[string]matSpec{}}
	for _, ms := range matShapes(o.Short) {
		m.Tensors[matName(ms)] = tensor(r, ms.dt, ms.rows, ms.cols)
		s.mats[matName(ms)] = ms
	}
	for e := range expertN {
		m.Experts[weights.ExpertID{Layer: 0, Expert: e}] = [3]jnf.TensorView{
			tensor(r, jnf.BF16, expertI, expertH), tensor(r, jnf.BF16, expertI, expertH), tensor(r, jnf.BF16, expertH, expertI)}
	}
	s.ck = weightstest.Open(t, m)
	return s
}

// tensor makes a rows×cols tensor of normally distributed values, a few of
// them special (±0, subnormals, large).
func tensor(r *rand.Rand, dt jnf.DType, rows, cols int) jnf.TensorView {
	n := rows * cols
	v := jnf.TensorView{DType: dt, Shape: []int64{int64(rows), int64(cols)}}
	switch dt {
	case jnf.BF16:
		v.Data = make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(v.Data[2*i:], uint16(math.Float32bits(value(r, 0.2))>>16))
		}
	case jnf.F32:
		v.Data = make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(v.Data[4*i:], math.Float32bits(value(r, 0.2)))
		}
	}
	return v
}

// specials are the values value mixes in.
var specials = []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, math.SmallestNonzeroFloat32, 3e38, -3e38, 1, -1}

// value draws a normal value of the given scale, or one of specials with
// probability 1/64.
func value(r *rand.Rand, scale float64) float32 {
	if r.IntN(64) == 0 {
		return specials[r.IntN(len(specials))]
	}
	return float32(r.NormFloat64() * scale)
}

func (s *suite) values(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = value(s.r, scale)
	}
	return x
}

// normals are values without specials (for operations whose inputs never
// hold them in a model, where an overflow would only test inf arithmetic).
func (s *suite) normals(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(s.r.NormFloat64() * scale)
	}
	return x
}

// softmaxNorm checks a backend.Normaliser against canon's Max and ExpSum:
// rows of lengths around a chunk, a round of lanes and a vocabulary, with
// the suite's specials (±Inf, NaN, ±0, subnormals) in some, rows of only
// −Inf, of equal maxima of both zero signs, and rows of 0 values. A backend
// without one skips nothing: the runner then sums on the host.
func (s *suite) softmaxNorm() {
	if _, ok := s.queue().(backend.Normaliser); !ok {
		return
	}
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		rows, n int
		fill    func(i int) float32
	}{
		{1, 1, nil}, {3, 7, nil}, {2, 8, nil}, {2, 9, nil}, {4, 255, nil}, {3, 256, nil}, {5, 257, nil},
		{2, 4099, nil}, {2, 4100, nil}, {3, 2050, nil}, {3, 151936, nil}, {16, 248320, nil},
		{2, 4095, nil}, {2, 4096, nil}, {2, 4097, nil}, {2, 8191, nil}, {2, 8192, nil}, {1, 8193, nil}, {1, 12293, nil},
		{3, 300, func(i int) float32 { return float32(s.r.NormFloat64() * 30) }}, // logits' scale
		{2, 40, func(int) float32 { return float32(math.Inf(-1)) }},
		{2, 64, func(i int) float32 { return [2]float32{negZero, 0}[i%2] }},
		{2, 33, func(i int) float32 { return negZero }},
		{3, 0, nil},
	} {
		x := s.values(c.rows*c.n, 4)
		if c.fill != nil {
			for i := range x {
				x[i] = c.fill(i)
			}
		}
		xp := s.pair(x)
		out, err := s.be.Alloc(2 * c.rows)
		if err != nil {
			s.t.Fatal(err)
		}
		q := s.queue()
		q.(backend.Normaliser).SoftmaxNorm(out, xp.got, c.rows, c.n)
		if err := q.Sync(); err != nil {
			s.t.Fatalf("SoftmaxNorm %d×%d: %v", c.rows, c.n, err)
		}
		want := make([]float32, 2*c.rows)
		for r := range c.rows {
			row := x[r*c.n : (r+1)*c.n]
			want[2*r] = canon.Max(row)
			want[2*r+1] = canon.ExpSum(row, want[2*r])
		}
		if err := Same(s.read(out), want); err != nil {
			s.t.Fatalf("SoftmaxNorm %d rows of %d: %v", c.rows, c.n, err)
		}
		s.be.Free(out)
	}
}

// argmax checks a backend.Argmaxer against canon.Argmax: rows of lengths
// around a block's threads and a vocabulary, with the maximum repeated
// (the lowest index wins), maxima of both zero signs, +Inf and −Inf, only
// −Inf, a NaN first, last or alone, subnormals, and rows of 0 values.
func (s *suite) argmax() {
	if _, ok := s.queue().(backend.Argmaxer); !ok {
		return
	}
	negZero := float32(math.Copysign(0, -1))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, c := range []struct {
		name    string
		rows, n int
		fill    func(r, i int, x float32) float32
	}{
		{"random", 4, 7, nil}, {"random", 3, 8, nil}, {"random", 3, 255, nil}, {"random", 2, 256, nil},
		{"random", 5, 257, nil}, {"random", 2, 4099, nil}, {"random", 3, 151936, nil}, {"random", 16, 248320, nil},
		{"repeated maximum", 4, 2050, func(r, i int, x float32) float32 {
			if (i*7+r)%513 == 0 {
				return 9
			}
			return x
		}},
		{"equal everywhere", 3, 1000, func(r, i int, x float32) float32 { return float32(r) }},
		{"zeros of both signs", 4, 300, func(r, i int, x float32) float32 {
			if i < 299-r {
				return -1
			}
			return [2]float32{negZero, 0}[(i+r)%2]
		}},
		{"+Inf twice", 2, 700, func(r, i int, x float32) float32 {
			if i == 650-r || i == 699 {
				return inf
			}
			return x
		}},
		{"only -Inf", 2, 40, func(r, i int, x float32) float32 { return -inf }},
		{"a NaN", 4, 5000, func(r, i int, x float32) float32 {
			if i == [4]int{0, 4999, 2500, 257}[r] {
				return nan
			}
			return x
		}},
		{"a NaN alone", 1, 1, func(r, i int, x float32) float32 { return nan }},
		{"subnormals", 3, 600, func(r, i int, x float32) float32 {
			return math.Float32frombits(uint32(1 + (i*37+r)%97))
		}},
		{"no values", 3, 0, nil},
	} {
		x := s.normals(c.rows*c.n, 30)
		if c.fill != nil {
			for i := range x {
				x[i] = c.fill(i/c.n, i%c.n, x[i])
			}
		}
		xp := s.pair(x)
		got := make([]int32, c.rows)
		for r := range got {
			got[r] = -7 // every row must be written
		}
		q := s.queue()
		q.(backend.Argmaxer).Argmax(got, xp.got, c.rows, c.n)
		if err := q.Sync(); err != nil {
			s.t.Fatalf("Argmax %s, %d×%d: %v", c.name, c.rows, c.n, err)
		}
		for r := range c.rows {
			if want := int32(canon.Argmax(x[r*c.n : (r+1)*c.n])); got[r] != want {
				s.t.Errorf("Argmax %s, row %d of %d×%d: %d, want %d", c.name, r, c.rows, c.n, got[r], want)
			}
		}
	}
}

// pair is one value on the backend under test and on the reference.
type pair struct{ got, want backend.Buf }

func (s *suite) pair(x []float32) pair {
	s.t.Helper()
	b, err := s.be.Alloc(len(x))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.be.Free(b) })
	q := s.queue()
	q.Write(b, x)
	if err := q.Sync(); err != nil {
		s.t.Fatal(err)
	}
	return pair{got: b, want: cpu.Wrap(append([]float32(nil), x...))}
}

func (s *suite) zeros(n int) pair { return s.pair(make([]float32, n)) }

// queue returns a new queue of the backend under test.
func (s *suite) queue() backend.Queue {
	s.t.Helper()
	q, err := s.be.NewQueue()
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { q.Close() })
	return q
}

// run enqueues the same operation on a queue of the backend and on the
// reference, syncs both and fails the test on an error.
func (s *suite) run(what string, f func(q backend.Queue, side func(p pair) backend.Buf)) {
	s.t.Helper()
	q := s.queue()
	f(q, func(p pair) backend.Buf { return p.got })
	if err := q.Sync(); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
	rq := s.ref.NewHostQueue()
	f(rq, func(p pair) backend.Buf { return p.want })
	if err := rq.Sync(); err != nil {
		s.t.Fatalf("%s (reference): %v", what, err)
	}
}

// read returns the backend's values of b.
func (s *suite) read(b backend.Buf) []float32 {
	s.t.Helper()
	out := make([]float32, b.Len())
	q := s.queue()
	q.Read(out, b)
	if err := q.Sync(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// same compares the backend's p.got with the reference's p.want.
func (s *suite) same(what string, p pair) {
	s.t.Helper()
	if err := Same(s.read(p.got), cpu.Floats(p.want)); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// Same compares two float32 vectors bit for bit, NaN equal to any NaN.
func Same(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g != g && w != w {
			continue
		}
		if math.Float32bits(g) != math.Float32bits(w) {
			return fmt.Errorf("value %d of %d is %g (%08x), want %g (%08x)", i, len(got), g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
	return nil
}

// weight uploads a matrix of the suite's checkpoint to the backend and
// views it for the reference.
func (s *suite) weight(name string, use backend.Use) (got, want *backend.Weight) {
	s.t.Helper()
	ms, ok := s.mats[name]
	if !ok {
		s.t.Fatalf("no matrix %s", name)
	}
	vt, err := s.ck.Tensor(name)
	if err != nil {
		s.t.Fatal(err)
	}
	got, want = new(backend.Weight), new(backend.Weight)
	key := backend.Key{Digest: vt.Digest()}
	lin, err := weights.PlainLinear(vt.View())
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.be.Upload(got, key, lin, ms.rows, ms.cols, use); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.be.Drop(got) })
	if err := s.ref.Upload(want, key, lin, ms.rows, ms.cols, use); err != nil {
		s.t.Fatal(err)
	}
	return got, want
}

func (s *suite) transfer() {
	for _, n := range []int{0, 1, 7, 1000, 65537} {
		x := s.values(n, 1)
		p := s.pair(x)
		if err := Same(s.read(p.got), x); err != nil {
			s.t.Fatalf("Write then Read of %d values: %v", n, err)
		}
		if n > 2 {
			z := s.pair(x)
			q := s.queue()
			q.Zero(z.got.Slice(1, n-1))
			if err := q.Sync(); err != nil {
				s.t.Fatal(err)
			}
			want := append([]float32(nil), x...)
			clear(want[1 : n-1])
			if err := Same(s.read(z.got), want); err != nil {
				s.t.Fatalf("Zero of [1, %d): %v", n-1, err)
			}
		}
	}
	// Several writes and reads in one queue, before one Sync: each read
	// sees the writes enqueued before it, and a host source may be reused
	// as soon as Write returns.
	p := s.zeros(64)
	q := s.queue()
	src := make([]float32, 64)
	outs := make([][]float32, 4)
	for i := range outs {
		for j := range src {
			src[j] = float32(i*100 + j)
		}
		q.Write(p.got, src)
		outs[i] = make([]float32, 64)
		q.Read(outs[i], p.got)
	}
	if err := q.Sync(); err != nil {
		s.t.Fatal(err)
	}
	for i, o := range outs {
		for j, v := range o {
			if v != float32(i*100+j) {
				s.t.Fatalf("read %d value %d = %g, want %d: writes and reads out of order", i, j, v, i*100+j)
			}
		}
	}
}

func (s *suite) copyRows() {
	for _, c := range []struct{ rows, cols, ds, ss int }{{1, 1, 1, 1}, {5, 7, 7, 16}, {9, 32, 40, 64}, {300, 20, 20, 60}, {1, 1000, 1000, 1000}} {
		src := s.pair(s.values(c.rows*c.ss, 1))
		dst := s.pair(s.values(c.rows*c.ds, 1))
		s.run("Copy", func(q backend.Queue, b func(pair) backend.Buf) {
			q.Copy(b(dst), c.ds, b(src).Slice(c.ss-c.cols, b(src).Len()), c.ss, c.rows, c.cols)
		})
		s.same(fmt.Sprintf("Copy %+v", c), dst)
	}
}

func (s *suite) gatherScatter() {
	for _, c := range []struct{ rows, n, m int }{{1, 1, 1}, {7, 13, 20}, {64, 40, 128}, {3, 3072, 8}} {
		src := s.pair(s.values(c.rows*c.n, 1))
		idx := make([]int32, c.m)
		for j := range idx {
			idx[j] = int32(s.r.IntN(c.rows))
		}
		dst := s.zeros(c.m * c.n)
		s.run("Gather", func(q backend.Queue, b func(pair) backend.Buf) { q.Gather(b(dst), b(src), idx, c.n) })
		s.same(fmt.Sprintf("Gather %+v", c), dst)
		// Scatter a permutation of distinct rows.
		perm := s.r.Perm(c.m)
		sidx := make([]int32, c.m)
		for j, p := range perm {
			sidx[j] = int32(p)
		}
		out := s.pair(s.values(c.m*c.n, 1))
		s.run("Scatter", func(q backend.Queue, b func(pair) backend.Buf) { q.Scatter(b(out), b(dst), sidx, c.n) })
		s.same(fmt.Sprintf("Scatter %+v", c), out)
	}
}

func (s *suite) embed() {
	for _, name := range []string{"w.bf16.300x257", "w.f32.300x9", "w.f32.33x520", "w.bf16.33x520"} {
		if _, ok := s.mats[name]; !ok {
			continue
		}
		for _, use := range []backend.Use{backend.UseGather, backend.UseMatMul} {
			g, w := s.weight(name, use)
			ids := make([]int32, 17)
			for i := range ids {
				ids[i] = int32(s.r.IntN(g.Rows()))
			}
			dst := s.zeros(len(ids) * g.Cols())
			q := s.queue()
			q.Embed(dst.got, g, ids)
			if err := q.Sync(); err != nil {
				s.t.Fatal(err)
			}
			rq := s.ref.NewHostQueue()
			rq.Embed(dst.want, w, ids)
			s.same("Embed "+name, dst)
		}
	}
}

func (s *suite) matMul() {
	Ts := []int{1, 2, 3, 5, 8, 17, 64}
	if s.o.Short {
		Ts = []int{1, 3, 9}
	}
	for _, ms := range matShapes(s.o.Short) {
		name := matName(ms)
		g, w := s.weight(name, backend.UseMatMul)
		for _, T := range Ts {
			if s.o.Short && T*ms.rows*ms.cols > 1<<20 {
				continue
			}
			x := s.pair(s.values(T*ms.cols, 1))
			y := s.zeros(T * ms.rows)
			s.run("MatMul", func(q backend.Queue, b func(pair) backend.Buf) {
				ww := g
				if b(y) == y.want {
					ww = w
				}
				q.MatMul(b(y), ww, b(x), T)
			})
			s.same(fmt.Sprintf("MatMul %s T=%d", name, T), y)
		}
	}
	// The LM head kind of weight (a backend may keep it on the host).
	for _, name := range []string{"w.bf16.300x520", "w.bf16.300x257", "w.bf16.33x520"} {
		if _, ok := s.mats[name]; !ok {
			continue
		}
		g, w := s.weight(name, backend.UseHead)
		x := s.pair(s.values(3*g.Cols(), 1))
		y := s.zeros(3 * g.Rows())
		s.run("MatMul head", func(q backend.Queue, b func(pair) backend.Buf) {
			ww := g
			if b(y) == y.want {
				ww = w
			}
			q.MatMul(b(y), ww, b(x), 3)
		})
		s.same("MatMul head "+name, y)
	}
}

// matMuls checks a backend.Grouper's MatMuls: every shape of the suite
// at several token counts, in one call (ragged rows and columns, more
// tokens than one block's group, outputs that share a buffer), each
// against the reference's MatMul. A backend without one skips nothing:
// the engine then computes each product with MatMul.
func (s *suite) matMuls() {
	q := s.queue()
	if _, ok := q.(backend.Grouper); !ok {
		s.t.Logf("%s: no grouped products (backend.Grouper)", s.be.Name())
		return
	}
	Ts := []int{1, 3, 9, 17}
	if s.o.Short {
		Ts = []int{1, 9}
	}
	type op struct {
		g, w  *backend.Weight
		x     pair
		T, at int
	}
	var ops []op
	total := 0
	for _, ms := range matShapes(s.o.Short) {
		g, w := s.weight(matName(ms), backend.UseMatMul)
		for i, T := range Ts {
			if (i+ms.rows)%2 == 1 && len(ops) > 0 {
				continue // not every shape at every count: vary the mix
			}
			ops = append(ops, op{g: g, w: w, x: s.pair(s.values(T*ms.cols, 1)), T: T, at: total})
			total += T * ms.rows
		}
	}
	// All outputs in one buffer, each op its own range of it.
	y := s.zeros(total)
	s.run("MatMuls", func(q backend.Queue, b func(pair) backend.Buf) {
		if b(y) == y.want {
			for _, o := range ops {
				q.MatMul(y.want.Slice(o.at, o.at+o.T*o.w.Rows()), o.w, o.x.want, o.T)
			}
			return
		}
		mm := make([]backend.MatMulOp, len(ops))
		for i, o := range ops {
			mm[i] = backend.MatMulOp{Y: y.got.Slice(o.at, o.at+o.T*o.g.Rows()), W: o.g, X: o.x.got, T: o.T}
		}
		q.(backend.Grouper).MatMuls(mm)
	})
	s.same(fmt.Sprintf("MatMuls of %d products", len(ops)), y)
}

func (s *suite) norms() {
	for _, n := range []int{1, 8, 16, 100, 128, 256, 257, 1023, 1024, 1025, 2048, 3072, 4097, 8192, 8193} {
		rows := 7
		if n >= 2048 {
			rows = 3
		}
		x, z, w := s.values(rows*n, 2), s.values(rows*n, 2), s.values(n, 1)
		for _, eps := range []float32{1e-6, 1e-5} {
			y := s.pair(x)
			s.run("RMSNorm", func(q backend.Queue, b func(pair) backend.Buf) { q.RMSNorm(b(y), b(y), b(s.pair(w)), n, eps) })
			s.same(fmt.Sprintf("RMSNorm n=%d (in place)", n), y)
			xx, y2 := s.pair(x), s.zeros(rows*n)
			ws := s.pair(w)
			s.run("RMSNorm", func(q backend.Queue, b func(pair) backend.Buf) { q.RMSNorm(b(y2), b(xx), b(ws), n, eps) })
			s.same(fmt.Sprintf("RMSNorm n=%d", n), y2)
			g, zz := s.pair(x), s.pair(z)
			s.run("GatedRMSNorm", func(q backend.Queue, b func(pair) backend.Buf) { q.GatedRMSNorm(b(g), b(g), b(zz), b(ws), n, eps) })
			s.same(fmt.Sprintf("GatedRMSNorm n=%d", n), g)
		}
		for _, scale := range []float32{1, 0.125, float32(1 / math.Sqrt(128))} {
			y := s.zeros(rows * n)
			xx := s.pair(x)
			s.run("L2Norm", func(q backend.Queue, b func(pair) backend.Buf) { q.L2Norm(b(y), b(xx), n, 1e-6, scale) })
			s.same(fmt.Sprintf("L2Norm n=%d scale=%g", n, scale), y)
		}
	}
}

func (s *suite) rope() {
	for _, c := range []struct{ T, heads, hd, h int }{{1, 1, 2, 1}, {3, 4, 16, 2}, {5, 2, 32, 16}, {7, 3, 256, 32}, {2, 16, 256, 128}} {
		cos, sin := make([]float32, c.T*c.h), make([]float32, c.T*c.h)
		inv := make([]float32, c.h)
		for j := range inv {
			inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(2*c.h)))
		}
		for t := range c.T {
			canon.RopeRow(inv, 1000+37*t, cos[t*c.h:(t+1)*c.h], sin[t*c.h:(t+1)*c.h])
		}
		x := s.pair(s.values(c.T*c.heads*c.hd, 1))
		cb, sb := s.pair(cos), s.pair(sin)
		s.run("RoPE", func(q backend.Queue, b func(pair) backend.Buf) { q.RoPE(b(x), c.T, c.heads, c.hd, b(cb), b(sb)) })
		s.same(fmt.Sprintf("RoPE %+v", c), x)
	}
}

func (s *suite) attention() {
	cases := []struct{ T, pos0, nq, nkv, hd int }{
		{1, 0, 1, 1, 8}, {1, 5, 2, 1, 16}, {4, 0, 4, 2, 32}, {3, 7, 4, 4, 13}, {1, 300, 2, 1, 256}, {9, 250, 8, 2, 64}, {2, 1030, 4, 1, 128}}
	if s.o.Short {
		cases = cases[:6]
	}
	for _, c := range cases {
		total := c.pos0 + c.T
		q := s.pair(s.normals(c.T*c.nq*c.hd, 1))
		k := s.pair(s.normals((total+3)*c.nkv*c.hd, 1)) // a cache longer than in use
		v := s.pair(s.values((total+3)*c.nkv*c.hd, 1))
		o := s.zeros(c.T * c.nq * c.hd)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		s.run("Attention", func(qq backend.Queue, b func(pair) backend.Buf) {
			qq.Attention(b(o), b(q), b(k), b(v), c.T, c.pos0, c.nq, c.nkv, c.hd, scale)
		})
		s.same(fmt.Sprintf("Attention %+v", c), o)
	}
}

func (s *suite) causalConv() {
	for _, c := range []struct{ T, C, Kc int }{{1, 1, 1}, {5, 8, 4}, {9, 100, 4}, {3, 33, 2}, {4, 70, 9}} {
		x := s.pair(s.values(c.T*c.C, 1))
		w := s.pair(s.values(c.C*c.Kc, 0.5))
		st := s.pair(s.values(c.C*(c.Kc-1), 1))
		y := s.zeros(c.T * c.C)
		t1 := c.T / 2
		s.run("CausalConv", func(q backend.Queue, b func(pair) backend.Buf) {
			if t1 > 0 { // in two calls: the state carries over
				q.CausalConv(b(y).Slice(0, t1*c.C), b(x).Slice(0, t1*c.C), b(st), b(w), t1, c.C, c.Kc)
			}
			q.CausalConv(b(y).Slice(t1*c.C, c.T*c.C), b(x).Slice(t1*c.C, c.T*c.C), b(st), b(w), c.T-t1, c.C, c.Kc)
		})
		s.same(fmt.Sprintf("CausalConv %+v output", c), y)
		s.same(fmt.Sprintf("CausalConv %+v state", c), st)
	}
}

func (s *suite) gdnGates() {
	for _, c := range []struct{ T, nv int }{{1, 1}, {3, 4}, {7, 64}} {
		n := c.T * c.nv
		bb, aa := s.pair(s.values(n, 3)), s.pair(s.values(n, 3))
		aLog, dt := s.pair(s.normals(c.nv, 1)), s.pair(s.values(c.nv, 1))
		beta, alpha := s.zeros(n), s.zeros(n)
		s.run("GDNGates", func(q backend.Queue, b func(pair) backend.Buf) {
			q.GDNGates(b(beta), b(alpha), b(bb), b(aa), b(aLog), b(dt))
		})
		s.same("GDNGates beta", beta)
		s.same("GDNGates alpha", alpha)
	}
}

func (s *suite) deltaRule() {
	for _, c := range []struct{ T, nk, nv, dk, dv int }{{1, 1, 1, 8, 8}, {3, 2, 4, 16, 16}, {4, 1, 3, 13, 5}, {2, 2, 4, 128, 128}, {5, 1, 2, 264, 7}} {
		qn := s.pair(s.normals(c.T*c.nk*c.dk, 0.3))
		kn := s.pair(s.normals(c.T*c.nk*c.dk, 0.3))
		v := s.pair(s.values(c.T*c.nv*c.dv, 1))
		beta := s.pair(s.normals(c.T*c.nv, 0.3))
		alpha := s.pair(s.normals(c.T*c.nv, 0.3))
		S := s.pair(s.normals(c.nv*c.dk*c.dv, 0.1))
		o := s.zeros(c.T * c.nv * c.dv)
		t1 := c.T / 2
		s.run("DeltaRule", func(q backend.Queue, b func(pair) backend.Buf) {
			kd, vd := c.nk*c.dk, c.nv*c.dv
			if t1 > 0 {
				q.DeltaRule(b(o).Slice(0, t1*vd), b(qn).Slice(0, t1*kd), b(kn).Slice(0, t1*kd), b(v).Slice(0, t1*vd),
					b(beta).Slice(0, t1*c.nv), b(alpha).Slice(0, t1*c.nv), b(S), t1, c.nk, c.nv, c.dk, c.dv)
			}
			q.DeltaRule(b(o).Slice(t1*vd, c.T*vd), b(qn).Slice(t1*kd, c.T*kd), b(kn).Slice(t1*kd, c.T*kd), b(v).Slice(t1*vd, c.T*vd),
				b(beta).Slice(t1*c.nv, c.T*c.nv), b(alpha).Slice(t1*c.nv, c.T*c.nv), b(S), c.T-t1, c.nk, c.nv, c.dk, c.dv)
		})
		s.same(fmt.Sprintf("DeltaRule %+v output", c), o)
		s.same(fmt.Sprintf("DeltaRule %+v state", c), S)
	}
}

// deltaRules checks a backend.DeltaRuler: several sessions' rules of
// different token counts in one call, against each op's DeltaRule on the
// reference (outputs and states). A backend without one skips nothing: the
// engine then calls DeltaRule once a session.
func (s *suite) deltaRules() {
	if _, ok := s.queue().(backend.DeltaRuler); !ok {
		return
	}
	for _, c := range []struct{ nk, nv, dk, dv int }{{1, 1, 8, 8}, {2, 4, 16, 16}, {1, 3, 13, 5}, {2, 4, 128, 128}, {16, 64, 128, 128}} {
		kd, vd := c.nk*c.dk, c.nv*c.dv
		type op struct{ o, q, k, v, beta, alpha, S pair }
		Ts := []int{1, 3, 1, 2, 5}
		ops := make([]op, len(Ts))
		for i, T := range Ts {
			ops[i] = op{s.zeros(T * vd), s.pair(s.normals(T*kd, 0.3)), s.pair(s.normals(T*kd, 0.3)), s.pair(s.values(T*vd, 1)),
				s.pair(s.normals(T*c.nv, 0.3)), s.pair(s.normals(T*c.nv, 0.3)), s.pair(s.normals(c.nv*c.dk*c.dv, 0.1))}
		}
		q := s.queue()
		dr := make([]backend.DeltaRuleOp, len(ops))
		for i, o := range ops {
			dr[i] = backend.DeltaRuleOp{O: o.o.got, Q: o.q.got, K: o.k.got, V: o.v.got, Beta: o.beta.got, Alpha: o.alpha.got, S: o.S.got, T: Ts[i]}
		}
		q.(backend.DeltaRuler).DeltaRules(dr, c.nk, c.nv, c.dk, c.dv)
		if err := q.Sync(); err != nil {
			s.t.Fatalf("DeltaRules %+v: %v", c, err)
		}
		rq := s.ref.NewHostQueue()
		for i, o := range ops {
			rq.DeltaRule(o.o.want, o.q.want, o.k.want, o.v.want, o.beta.want, o.alpha.want, o.S.want, Ts[i], c.nk, c.nv, c.dk, c.dv)
		}
		if err := rq.Sync(); err != nil {
			s.t.Fatal(err)
		}
		for i, o := range ops {
			s.same(fmt.Sprintf("DeltaRules %+v op %d output", c, i), o.o)
			s.same(fmt.Sprintf("DeltaRules %+v op %d state", c, i), o.S)
		}
	}
}

func (s *suite) elementwise() {
	for _, n := range []int{1, 31, 1000, 4097} {
		g, u := s.values(n, 4), s.values(n, 4)
		y := s.zeros(n)
		gp, up := s.pair(g), s.pair(u)
		s.run("SiLUMul", func(q backend.Queue, b func(pair) backend.Buf) { q.SiLUMul(b(y), b(gp), b(up)) })
		s.same("SiLUMul", y)
		s.run("SiLUMul in place", func(q backend.Queue, b func(pair) backend.Buf) { q.SiLUMul(b(gp), b(gp), b(up)) })
		s.same("SiLUMul in place", gp)
		xp, gg := s.pair(s.values(n, 4)), s.pair(g)
		s.run("SigmoidMul", func(q backend.Queue, b func(pair) backend.Buf) { q.SigmoidMul(b(xp), b(xp), b(gg)) })
		s.same("SigmoidMul", xp)
		ap, bp := s.pair(s.values(n, 1)), s.pair(s.values(n, 1))
		s.run("Add", func(q backend.Queue, b func(pair) backend.Buf) { q.Add(b(ap), b(ap), b(bp)) })
		s.same("Add", ap)
	}
}

func (s *suite) route() {
	// E up to 1024 and beyond (cuda: one warp a token up to 1024, one
	// thread a token above), E not a multiple of 8 (a lane's partial chunk),
	// and rows whose maximum is a zero of either sign (zeroMax).
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		T, E, k int
		zeroMax bool
	}{{1, 1, 1, false}, {3, 8, 2, false}, {5, 16, 4, false}, {2, 256, 8, false}, {4, 128, 2, false}, {3, 64, 1, false},
		{2, 256, 4, false}, {1, 512, 10, false}, {3, 13, 3, false}, {2, 300, 8, false}, {2, 1024, 8, false},
		{2, 1100, 8, false}, {3, 256, 8, true}, {2, 40, 3, true}} {
		for _, renorm := range []bool{true, false} {
			lg := s.normals(c.T*c.E, 2)
			if c.E >= 8 { // ties: torch's order must be reproduced exactly
				for i := 0; i < len(lg); i += 3 {
					lg[i] = float32(math.Round(float64(lg[i])))
				}
			}
			if c.zeroMax { // every logit ≤ 0, the maximum +0 or −0, first in either order
				for i := range lg {
					lg[i] = -float32(math.Abs(float64(lg[i])))
					switch i % 7 {
					case 2:
						lg[i] = negZero
					case 5:
						lg[i] = 0
					}
				}
			}
			lp := s.pair(lg)
			w := s.zeros(c.T * c.k)
			gotIdx, wantIdx := make([]int32, c.T*c.k), make([]int32, c.T*c.k)
			s.run("Route", func(q backend.Queue, b func(pair) backend.Buf) {
				idx := gotIdx
				if b(w) == w.want {
					idx = wantIdx
				}
				q.Route(idx, b(w), b(lp), c.T, c.E, c.k, renorm)
			})
			for i := range gotIdx {
				if gotIdx[i] != wantIdx[i] {
					s.t.Fatalf("Route %+v renorm=%v: id %d is %d, want %d", c, renorm, i, gotIdx[i], wantIdx[i])
				}
			}
			s.same(fmt.Sprintf("Route %+v renorm=%v weights", c, renorm), w)
		}
	}
}

func (s *suite) combine() {
	for _, c := range []struct{ T, k, n int }{{1, 1, 1}, {3, 2, 64}, {5, 8, 100}, {2, 10, 300}, {1, 40, 9}} {
		x := s.pair(s.values(c.T*c.k*c.n, 1))
		w := s.pair(s.normals(c.T*c.k, 0.5))
		y := s.zeros(c.T * c.n)
		s.run("Combine", func(q backend.Queue, b func(pair) backend.Buf) { q.Combine(b(y), b(x), b(w), c.T, c.k, c.n) })
		s.same(fmt.Sprintf("Combine %+v", c), y)
	}
}

func (s *suite) gateAdd() {
	for _, c := range []struct{ T, n int }{{1, 1}, {3, 64}, {7, 3072}} {
		x := s.pair(s.values(c.T*c.n, 1))
		y := s.pair(s.values(c.T*c.n, 1))
		g := s.pair(s.values(c.T, 3))
		s.run("GateAdd", func(q backend.Queue, b func(pair) backend.Buf) { q.GateAdd(b(y), b(x), b(g), c.T, c.n) })
		s.same(fmt.Sprintf("GateAdd %+v", c), y)
	}
}

// signedZeros pins the sign of a zero canonical sum in the reductions that
// combine lanes (EXACTNESS.md, "The one reduction order"): every lane
// starts at +0, so a sum whose terms are all ±0 is +0 — also when every
// term is −0, where a lane started at −0 (or at its first term) would make
// it −0. The inputs make every product ±0: a row's products all −0, all
// inputs −0, all +0, mixed signs; batched over up to 17 tokens (a GPU
// kernel's token groups) and every matrix shape. Each result must be +0
// itself, not only equal to the reference's.
func (s *suite) signedZeros() {
	negZero := float32(math.Copysign(0, -1))
	plusZero := func(what string, p pair) {
		s.t.Helper()
		s.same(what, p)
		for i, v := range s.read(p.got) {
			if math.Float32bits(v) != 0 {
				s.t.Fatalf("%s: value %d of %d is %g (%08x), want +0: lanes start at +0", what, i, p.got.Len(), v, math.Float32bits(v))
			}
		}
	}
	// zeros returns n signed zeros: negative where neg(i).
	zeros := func(n int, neg func(i int) bool) []float32 {
		x := make([]float32, n)
		for i := range x {
			if neg(i) {
				x[i] = negZero
			}
		}
		return x
	}
	Ts := []int{1, 4, 8, 9, 17}
	if s.o.Short {
		Ts = []int{1, 9}
	}
	for _, ms := range matShapes(s.o.Short) {
		name := matName(ms)
		vt, err := s.ck.Tensor(name)
		if err != nil {
			s.t.Fatal(err)
		}
		// The sign of weight k of row 0.
		d, size := vt.View().Data(), ms.dt.Size()
		wneg := func(k int) bool { return d[k*int(size)+int(size)-1]&0x80 != 0 }
		g, w := s.weight(name, backend.UseMatMul)
		for _, T := range Ts {
			if s.o.Short && T*ms.rows*ms.cols > 1<<20 {
				continue
			}
			K := ms.cols
			x := zeros(T*K, func(i int) bool {
				t, k := i/K, i%K
				switch t % 4 {
				case 0: // row 0's products all −0
					return !wneg(k)
				case 1:
					return true
				case 2:
					return false
				}
				return s.r.IntN(2) == 0
			})
			xp, y := s.pair(x), s.zeros(T*ms.rows)
			s.run("MatMul", func(q backend.Queue, b func(pair) backend.Buf) {
				ww := g
				if b(y) == y.want {
					ww = w
				}
				q.MatMul(b(y), ww, b(xp), T)
			})
			plusZero(fmt.Sprintf("MatMul %s T=%d of ±0 inputs", name, T), y)
		}
	}
	for _, c := range []struct{ T, k, n int }{{1, 1, 1}, {3, 2, 64}, {5, 8, 100}, {2, 10, 300}, {1, 40, 9}} {
		wv := s.normals(c.T*c.k, 0.5)
		// x[t,s,i] of the opposite sign to w[t,s]: every product −0.
		x := zeros(c.T*c.k*c.n, func(i int) bool { return wv[i/c.n] >= 0 })
		xp, w, y := s.pair(x), s.pair(wv), s.zeros(c.T*c.n)
		s.run("Combine", func(q backend.Queue, b func(pair) backend.Buf) { q.Combine(b(y), b(xp), b(w), c.T, c.k, c.n) })
		plusZero(fmt.Sprintf("Combine %+v of −0 products", c), y)
	}
	for _, c := range []struct{ T, pos0, nq, nkv, hd int }{{1, 0, 1, 1, 8}, {4, 0, 4, 2, 32}, {1, 300, 2, 1, 256}, {9, 250, 8, 2, 64}} {
		total := c.pos0 + c.T
		q := s.pair(s.normals(c.T*c.nq*c.hd, 1))
		k := s.pair(s.normals(total*c.nkv*c.hd, 1))
		// p_u > 0, so every product p_u·v_u[c] is −0.
		v := s.pair(zeros(total*c.nkv*c.hd, func(int) bool { return true }))
		o := s.zeros(c.T * c.nq * c.hd)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		s.run("Attention", func(qq backend.Queue, b func(pair) backend.Buf) {
			qq.Attention(b(o), b(q), b(k), b(v), c.T, c.pos0, c.nq, c.nkv, c.hd, scale)
		})
		plusZero(fmt.Sprintf("Attention %+v of −0 values", c), o)
	}
}

// experts computes routed experts through LoadExpert, and, on a backend
// that is a backend.SlotPool, through slots (FillSlot, then BindSlot on the
// same and on another queue, rounds later), against the reference's views.
func (s *suite) experts() { s.expertRounds(s.ck, int64(2*3*expertI*expertH)) }

// expertRounds is the experts case over the routed experts (layer 0, expertN
// of them, I×H) of ck, whose records are at most expertBytes long.
func (s *suite) expertRounds(ck *weights.Checkpoint, expertBytes int64) {
	s.t.Helper()
	pool, _ := s.be.(backend.SlotPool)
	var slots []backend.Slot
	if pool != nil && pool.SlotCapacity(expertBytes) >= 2 {
		for range 2 {
			sl, err := pool.AllocSlot(expertBytes)
			if err != nil {
				s.t.Fatal(err)
			}
			slots = append(slots, sl)
		}
		defer func() {
			for _, sl := range slots {
				pool.FreeSlot(sl)
			}
		}()
	}
	// held[i] is the expert slot i holds (−1: none).
	held := []int{-1, -1}
	for round := range 3 {
		for e := range expertN {
			ve, err := ck.Expert(0, e)
			if err != nil {
				s.t.Fatal(err)
			}
			id := weights.ExpertID{Layer: 0, Expert: e}
			n := 1 + s.r.IntN(5)
			x := s.pair(s.values(n*expertH, 1))
			gu, uu, y := s.zeros(n*expertI), s.zeros(n*expertI), s.zeros(n*expertH)
			var gx, wx backend.Expert
			q := s.queue()
			how := "loaded"
			if len(slots) > 0 && e < 2*len(slots) {
				// Experts 0..3 share the two slots: e and e+2 take turns in
				// slot e%2, so a slot is refilled with another expert.
				i := e % 2
				sq := q.(backend.SlotQueue)
				if held[i] != e || round == 2 {
					if err := sq.FillSlot(slots[i], id, ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), expertI, expertH); err != nil {
						s.t.Fatal(err)
					}
					held[i] = e
					how = "filled"
				} else {
					how = "bound again"
					if !pool.SlotHolds(slots[i], ve.Digest()) {
						s.t.Fatalf("slot %d does not hold expert %d, filled the round before", i, e)
					}
				}
				if err := sq.BindSlot(&gx, slots[i], id, ve.Digest()); err != nil {
					s.t.Fatal(err)
				}
				other, _ := ck.Expert(0, (e+2)%expertN)
				if pool.SlotHolds(slots[i], other.Digest()) {
					s.t.Errorf("slot %d holds expert %d and claims expert %d", i, e, (e+2)%expertN)
				}
				var bad backend.Expert
				if err := sq.BindSlot(&bad, slots[i], other.ID(), other.Digest()); err == nil {
					s.t.Errorf("slot %d holds expert %d and bound as expert %d", i, e, (e+2)%expertN)
					q.ReleaseExpert(&bad)
				}
			} else if err := q.LoadExpert(&gx, id, ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), expertI, expertH); err != nil {
				s.t.Fatal(err)
			}
			for _, p := range []struct {
				q backend.Queue
				x *backend.Expert
				b func(pair) backend.Buf
			}{{q, &gx, func(p pair) backend.Buf { return p.got }}, {s.ref.NewHostQueue(), &wx, func(p pair) backend.Buf { return p.want }}} {
				if p.x == &wx {
					if err := backend.ViewExpert(&wx, id, ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), expertI, expertH); err != nil {
						s.t.Fatal(err)
					}
				}
				p.q.MatMul(p.b(gu), &p.x.Gate, p.b(x), n)
				p.q.MatMul(p.b(uu), &p.x.Up, p.b(x), n)
				p.q.SiLUMul(p.b(gu), p.b(gu), p.b(uu))
				p.q.MatMul(p.b(y), &p.x.Down, p.b(gu), n)
				p.q.ReleaseExpert(p.x)
				if err := p.q.Sync(); err != nil {
					s.t.Fatal(err)
				}
			}
			s.same(fmt.Sprintf("expert %d (round %d, %s)", e, round, how), y)
		}
	}
	if len(slots) == 0 && pool != nil && s.o.Slots {
		s.t.Errorf("the backend is a SlotPool with room for %d slots: want at least 2 for the suite", pool.SlotCapacity(expertBytes))
	}
}

// errors: a size mismatch is reported by Sync, and the operations after it
// do nothing.
func (s *suite) errors() {
	x := s.pair([]float32{1, 2, 3, 4})
	y := s.pair([]float32{5, 6, 7})
	q := s.queue()
	q.Add(x.got, x.got, y.got)
	q.Write(x.got, []float32{9, 9, 9, 9})
	if err := q.Sync(); err == nil {
		s.t.Fatal("Add of 4 and 3 values: no error from Sync")
	}
	if err := Same(s.read(x.got), []float32{1, 2, 3, 4}); err != nil {
		s.t.Fatalf("a Write after an error ran: %v", err)
	}
	g, _ := s.weight(matName(matShapes(s.o.Short)[0]), backend.UseMatMul)
	q = s.queue()
	q.MatMul(y.got, g, x.got, 1)
	if err := q.Sync(); err == nil {
		s.t.Fatalf("MatMul of a %d×%d weight by 4 values into 3: no error", g.Rows(), g.Cols())
	}
	q = s.queue()
	q.Gather(y.got, x.got, []int32{7}, 3)
	if err := q.Sync(); err == nil {
		s.t.Fatal("Gather of row 7 of 1: no error")
	}
	if _, ok := s.queue().(backend.Argmaxer); ok {
		for _, c := range []struct {
			ids     int
			rows, n int
		}{{1, 2, 2}, {2, 2, 3}, {0, -1, 4}} { // ids for 2 rows, rows beyond x, negative rows
			q = s.queue()
			q.(backend.Argmaxer).Argmax(make([]int32, c.ids), x.got, c.rows, c.n)
			if err := q.Sync(); err == nil {
				s.t.Fatalf("Argmax of %d rows of %d from 4 values into %d ids: no error", c.rows, c.n, c.ids)
			}
		}
	}
}
