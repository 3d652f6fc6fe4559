package weights_test

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// fp8Config is a one-layer qwen3_moe config (hidden 40, experts of 24)
// quantised in 16×16 blocks.
const fp8Config = `{"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe","hidden_size":40,
"intermediate_size":48,"moe_intermediate_size":24,"num_hidden_layers":1,"num_attention_heads":2,
"num_key_value_heads":1,"head_dim":20,"num_experts":2,"num_experts_per_tok":2,"vocab_size":300,
"rms_norm_eps":1e-06,"rope_theta":10000.0,"norm_topk_prob":true,"decoder_sparse_step":1,
"mlp_only_layers":[],"tie_word_embeddings":false,"max_position_embeddings":512,
"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[16,16]}}`

func codes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = (byte(i)*37 + seed) & 0x7E // never a NaN code
	}
	return b
}

func scales(rows, cols int) jnf.TensorView {
	d := make([]byte, 4*rows*cols)
	for i := range rows * cols {
		binary.LittleEndian.PutUint32(d[4*i:], math.Float32bits(float32(i+1)/64))
	}
	return jnf.TensorView{DType: jnf.F32, Shape: []int64{int64(rows), int64(cols)}, Data: d}
}

func f8(rows, cols int, seed byte) jnf.TensorView {
	return jnf.TensorView{DType: jnf.F8E4, Shape: []int64{int64(rows), int64(cols)}, Data: codes(rows*cols, seed)}
}

// fp8Model is a block-FP8 model with one quantised tensor (q, 24×40) and
// two block-FP8 experts; edit changes it before it is written.
func fp8Model(t *testing.T, edit func(m *weightstest.Model)) *weights.Checkpoint {
	t.Helper()
	const I, H = 24, 40
	m := &weightstest.Model{Config: []byte(fp8Config), Tensors: map[string]jnf.TensorView{
		"q.weight": f8(I, H, 1), "q.weight_scale_inv": scales(2, 3),
	}, Experts: map[weights.ExpertID][3]jnf.TensorView{}, ExpertScales: map[weights.ExpertID][3]jnf.TensorView{}}
	for e := range 2 {
		id := weights.ExpertID{Layer: 0, Expert: e}
		m.Experts[id] = [3]jnf.TensorView{f8(I, H, byte(e)), f8(I, H, byte(e+3)), f8(H, I, byte(e+5))}
		m.ExpertScales[id] = [3]jnf.TensorView{scales(2, 3), scales(2, 3), scales(3, 2)}
	}
	if edit != nil {
		edit(m)
	}
	return weightstest.Open(t, m)
}

func TestFP8Linears(t *testing.T) {
	ck := fp8Model(t, nil)
	q, err := ck.Tensor("q.weight")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := ck.Tensor("q.weight_scale_inv")
	if err != nil {
		t.Fatal(err)
	}
	l, err := weights.BlockLinear(q, qs)
	if s, bn, bk := l.Scales(); err != nil || !l.Quantized() || bn != 16 || bk != 16 || s.Dim(0) != 2 || s.Dim(1) != 3 {
		t.Fatalf("BlockLinear: %v, quantised %v, blocks %d×%d", err, l.Quantized(), bn, bk)
	}
	if _, err := weights.BlockLinear(qs, q); err == nil {
		t.Error("BlockLinear with the roles swapped: no error")
	}
	if _, err := weights.PlainLinear(q.View()); err == nil {
		t.Error("PlainLinear of F8 codes: no error")
	}
	e, err := ck.Expert(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range []weights.Linear{e.Gate(), e.Up(), e.Down()} {
		s, bn, _ := l.Scales()
		if !l.Quantized() || bn != 16 || l.Values().DType() != jnf.F8E4 || s.DType() != jnf.F32 || !strings.HasSuffix(s.Name(), ".weight_scale_inv") {
			t.Errorf("expert part %d: %v %s / %s", i, l.Quantized(), l.Values().Name(), s.Name())
		}
	}
	if d := e.Down(); d.Values().Dim(0) != 40 {
		t.Errorf("down is %v", d.Values().Shape())
	}
}

// A block-FP8 record that matches its digest but holds a NaN code or a
// non-finite scale (a manifest made by hand, not by convert, which refuses
// them) is refused when it is minted, naming the record, part and element:
// through the checkpoint and through a Check of an arena read in parts.
func TestFP8NonFiniteRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(m *weightstest.Model)
		want []string
	}{
		{"NaN code in a tensor", func(m *weightstest.Model) { m.Tensors["q.weight"].Data[77] = 0xFF }, []string{"q.weight", "element 77", "0xff"}},
		{"NaN code in an expert's down", func(m *weightstest.Model) {
			m.Experts[weights.ExpertID{Layer: 0, Expert: 1}][2].Data[500] = 0x7F
		}, []string{"model.layers.0.mlp.experts.1", "down_proj element 500", "0x7f"}},
		{"Inf scale of an expert", func(m *weightstest.Model) {
			binary.LittleEndian.PutUint32(m.ExpertScales[weights.ExpertID{Layer: 0, Expert: 1}][1].Data[8:], math.Float32bits(float32(math.Inf(1))))
		}, []string{"model.layers.0.mlp.experts.1.up_proj.weight_scale_inv", "scale 2", "not finite"}},
		{"Inf F16 scale of an expert", func(m *weightstest.Model) {
			id := weights.ExpertID{Layer: 0, Expert: 1}
			sc := m.ExpertScales[id]
			d := make([]byte, 2*2*3)
			binary.LittleEndian.PutUint16(d[2:], 0x3C00) // 1
			binary.LittleEndian.PutUint16(d[6:], 0x7C00) // +Inf
			sc[0] = jnf.TensorView{DType: jnf.F16, Shape: []int64{2, 3}, Data: d}
			m.ExpertScales[id] = sc
		}, []string{"model.layers.0.mlp.experts.1.gate_proj.weight_scale_inv", "scale 3", "not finite"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ck := fp8Model(t, c.edit)
			var err error
			if strings.Contains(c.name, "tensor") {
				_, err = ck.Tensor("q.weight")
			} else {
				_, err = ck.Expert(0, 1)
				if _, ok := ck.Expert(0, 0); ok != nil {
					t.Errorf("the other expert: %v", ok)
				}
			}
			check(t, "checkpoint", err, c.want)
			if strings.Contains(c.name, "tensor") {
				return
			}
			ref, err := ck.ExpertRef(0, 1)
			if err != nil {
				t.Fatal(err)
			}
			a, err := weights.NewArena(int(ref.ReadLength()), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, _ := a.Get()
			f, err := os.Open(ref.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.ReadAt(b.Bytes()[:ref.ReadLength()], ref.Offset()); err != nil {
				t.Fatal(err)
			}
			chk, err := ref.Check(b, 1024) // parts of 1 KiB: the NaN lies in one of several
			if err != nil {
				t.Fatal(err)
			}
			if chk.Parts() < 2 {
				t.Fatalf("%d parts", chk.Parts())
			}
			for i := chk.Parts() - 1; i >= 0; i-- {
				chk.Hash(i)
			}
			_, err = chk.Verify()
			check(t, "check in parts", err, c.want)
		})
	}
}

func check(t *testing.T, what string, err error, want []string) {
	t.Helper()
	if !errors.Is(err, weights.ErrNonFinite) {
		t.Errorf("%s: %v, want weights.ErrNonFinite", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v, want it to name %q", what, err, w)
		}
	}
}
