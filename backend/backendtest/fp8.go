package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// fp8Checkpoints are the block sizes of the block-FP8 checkpoints the
// MatMulFP8 case writes, each with its matrices (N×K): partial groups
// (K not a multiple of bk), partial row blocks (N not a multiple of bn),
// a single column, a single row.
var fp8Checkpoints = []struct {
	bn, bk int
	shapes [][2]int
}{
	{128, 128, [][2]int{{5, 1}, {33, 129}, {300, 300}, {1, 520}, {130, 256}}},
	{3, 16, [][2]int{{5, 7}, {33, 50}, {4, 16}, {7, 2049}}},
}

// fp8Codes are n random E4M3 codes, no NaN code, subnormal ones and ±0
// often.
func (s *suite) fp8Codes(n int) []byte {
	w := make([]byte, n)
	for i := range w {
		b := byte(s.r.Uint32())
		if s.r.IntN(6) == 0 {
			b &= 0x87
		}
		for canon.E4M3IsNaN(b) {
			b = byte(s.r.Uint32())
		}
		w[i] = b
	}
	return w
}

// fp8Checkpoint writes a block-FP8 checkpoint with blocks bn×bk and opens
// it; it skips the case while the configuration parser does not read
// quantization_config.
func (s *suite) fp8Checkpoint(bn, bk int, shapes [][2]int) *weights.Checkpoint {
	cfg := strings.TrimSuffix(strings.TrimSpace(configJSON), "}") + fmt.Sprintf(`,
"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[%d,%d]}}`, bn, bk)
	m := &weightstest.Model{Config: []byte(cfg), Tensors: map[string]jnf.TensorView{}, Experts: map[weights.ExpertID][3]jnf.TensorView{}}
	for _, sh := range shapes {
		N, K := sh[0], sh[1]
		name := fp8Name(N, K)
		m.Tensors[name] = jnf.TensorView{DType: jnf.F8E4, Shape: []int64{int64(N), int64(K)}, Data: s.fp8Codes(N * K)}
		rows, cols := canon.FP8Groups(N, bn), canon.FP8Groups(K, bk)
		sc := make([]byte, 4*rows*cols)
		for i := range rows * cols {
			v := float32(s.r.Float64() * math.Ldexp(1, -s.r.IntN(14)))
			if s.r.IntN(10) == 0 {
				v = math.Float32frombits(s.r.Uint32() & 0x7FFFFF) // subnormal
			}
			binary.LittleEndian.PutUint32(sc[4*i:], math.Float32bits(v))
		}
		m.Tensors[weights.ScaleName(name)] = jnf.TensorView{DType: jnf.F32, Shape: []int64{int64(rows), int64(cols)}, Data: sc}
	}
	for e := range expertN {
		m.Experts[weights.ExpertID{Layer: 0, Expert: e}] = [3]jnf.TensorView{
			tensor(s.r, jnf.BF16, expertI, expertH), tensor(s.r, jnf.BF16, expertI, expertH), tensor(s.r, jnf.BF16, expertH, expertI)}
	}
	ck := weightstest.Open(s.t, m)
	if ck.Config().Quant == nil {
		s.t.Fatal("the block-FP8 checkpoint's config parsed without its quantization_config")
	}
	return ck
}

func fp8Name(N, K int) string { return fmt.Sprintf("w8.%dx%d.weight", N, K) }

// fp8Weight uploads a block-FP8 matrix to the backend and to the
// reference; it skips the case on a backend without the block-FP8 kernel.
func (s *suite) fp8Weight(ck *weights.Checkpoint, name string, rows, cols int) (got, want *backend.Weight) {
	s.t.Helper()
	w, err := ck.Tensor(name)
	if err != nil {
		s.t.Fatal(err)
	}
	sc, err := ck.Tensor(weights.ScaleName(name))
	if err != nil {
		s.t.Fatal(err)
	}
	lin, err := weights.BlockLinear(w, sc)
	if err != nil {
		s.t.Fatal(err)
	}
	got, want = new(backend.Weight), new(backend.Weight)
	key := backend.Key{Digest: w.Digest(), Scale: sc.Digest()}
	if err := s.be.Upload(got, key, lin, rows, cols, backend.UseMatMul); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.be.Drop(got) })
	if err := s.ref.Upload(want, key, lin, rows, cols, backend.UseMatMul); err != nil {
		s.t.Fatal(err)
	}
	return got, want
}

// fp8Activations are T rows of K values: the suite's values (±0,
// subnormals, ±3e38 mixed in), some groups all zero or all tiny, and some
// rows with a NaN or an infinity (the whole output row is then NaN).
func (s *suite) fp8Activations(T, K, bk int) []float32 {
	x := s.values(T*K, 1)
	for t := range T {
		for g := 0; g*bk < K; g++ {
			k0, k1 := t*K+g*bk, t*K+min(K, (g+1)*bk)
			switch s.r.IntN(8) {
			case 0:
				clear(x[k0:k1])
			case 1:
				for k := k0; k < k1; k++ {
					x[k] = math.Float32frombits(s.r.Uint32() & 0x801FFFFF)
				}
			}
		}
		if s.r.IntN(6) == 0 {
			x[t*K+s.r.IntN(K)] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[s.r.IntN(3)]
		}
	}
	return x
}

// matMulFP8: block-FP8 MatMul (EXACTNESS.md, "Block-FP8 linear layers")
// of every matrix of two checkpoints (blocks 128×128 and 3×16) for 1 to 17
// rows, against the reference's bits (NaN-ness for NaN).
func (s *suite) matMulFP8() {
	Ts := []int{1, 2, 3, 4, 5, 8, 16, 17}
	if s.o.Short {
		Ts = []int{1, 4, 9}
	}
	for _, c := range fp8Checkpoints {
		ck := s.fp8Checkpoint(c.bn, c.bk, c.shapes)
		for _, sh := range c.shapes {
			N, K := sh[0], sh[1]
			name := fp8Name(N, K)
			g, w := s.fp8Weight(ck, name, N, K)
			for _, T := range Ts {
				x := s.pair(s.fp8Activations(T, K, c.bk))
				y := s.zeros(T * N)
				s.run("MatMul FP8", func(q backend.Queue, b func(pair) backend.Buf) {
					ww := g
					if b(y) == y.want {
						ww = w
					}
					q.MatMul(b(y), ww, b(x), T)
				})
				s.same(fmt.Sprintf("MatMul %s (blocks %d×%d) T=%d", name, c.bn, c.bk, T), y)
			}
		}
	}
}

// fp8ExpertCheckpoint writes a checkpoint whose routed experts are
// block-FP8 with blocks bn×bk, their scales stored as dt, and returns it
// with its longest expert record.
func (s *suite) fp8ExpertCheckpoint(bn, bk int, dt jnf.DType) (*weights.Checkpoint, int64) {
	cfg := strings.TrimSuffix(strings.TrimSpace(configJSON), "}") + fmt.Sprintf(`,
"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[%d,%d]}}`, bn, bk)
	m := &weightstest.Model{Config: []byte(cfg), Tensors: map[string]jnf.TensorView{},
		Experts: map[weights.ExpertID][3]jnf.TensorView{}, ExpertScales: map[weights.ExpertID][3]jnf.TensorView{}}
	m.Tensors["w.bf16.1x8"] = tensor(s.r, jnf.BF16, 1, 8) // a global file
	for e := range expertN {
		id := weights.ExpertID{Layer: 0, Expert: e}
		var codes, scales [3]jnf.TensorView
		for j, sh := range [3][2]int{{expertI, expertH}, {expertI, expertH}, {expertH, expertI}} {
			N, K := sh[0], sh[1]
			codes[j] = jnf.TensorView{DType: jnf.F8E4, Shape: []int64{int64(N), int64(K)}, Data: s.fp8Codes(N * K)}
			scales[j] = s.fp8Scales(dt, canon.FP8Groups(N, bn), canon.FP8Groups(K, bk))
		}
		m.Experts[id], m.ExpertScales[id] = codes, scales
	}
	ck := weightstest.Open(s.t, m)
	var longest int64
	for e := range expertN {
		longest = max(longest, ck.ExpertBytes(0, e))
	}
	return ck, longest
}

// fp8Scales are rows×cols positive finite block scales stored as dt
// (subnormal ones among them), exact in dt.
func (s *suite) fp8Scales(dt jnf.DType, rows, cols int) jnf.TensorView {
	v := jnf.TensorView{DType: dt, Shape: []int64{int64(rows), int64(cols)}}
	for range rows * cols {
		f := float32(s.r.Float64() * math.Ldexp(1, -s.r.IntN(12)))
		switch dt {
		case jnf.F32:
			if s.r.IntN(10) == 0 {
				f = math.Float32frombits(s.r.Uint32() & 0x7FFFFF) // subnormal
			}
			v.Data = binary.LittleEndian.AppendUint32(v.Data, math.Float32bits(f))
		case jnf.BF16:
			v.Data = binary.LittleEndian.AppendUint16(v.Data, uint16(math.Float32bits(f)>>16))
		case jnf.F16:
			// Positive, finite: exponent 0 (subnormal, one in ten) to 30.
			e := uint16(1 + s.r.IntN(30))
			if s.r.IntN(10) == 0 {
				e = 0
			}
			v.Data = binary.LittleEndian.AppendUint16(v.Data, e<<10|uint16(s.r.IntN(1024)))
		}
	}
	return v
}

// expertsFP8: the experts case over block-FP8 routed experts (blocks 16×16
// and 3×7: partial groups and row blocks in every matrix), their scales
// stored as F32, BF16 or F16 (the releases use each; a checkpoint uses
// one, so its slots are sized by those records), against the reference's
// bits.
func (s *suite) expertsFP8() {
	for _, c := range []struct {
		bn, bk int
		dt     jnf.DType
	}{{16, 16, jnf.F32}, {16, 16, jnf.BF16}, {3, 7, jnf.F16}, {3, 7, jnf.BF16}} {
		ck, n := s.fp8ExpertCheckpoint(c.bn, c.bk, c.dt)
		s.expertRounds(ck, n)
	}
}
