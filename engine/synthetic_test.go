package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// memWeights is a synthetic model held in memory; open writes it as a real
// JNF directory (weightstest) and opens it with weights.Open, so the engine
// gets its weights through the production path.
type memWeights struct {
	config  []byte // config.json
	tensors map[string]jnf.TensorView
	experts map[[2]int][3]jnf.TensorView
}

// open writes w as a JNF directory and opens it; closed at the end of the test.
func (w *memWeights) open(t testing.TB) *weights.Checkpoint {
	t.Helper()
	m := &weightstest.Model{Config: w.config, Tensors: w.tensors, Experts: map[weights.ExpertID][3]jnf.TensorView{}}
	for id, p := range w.experts {
		m.Experts[weights.ExpertID{Layer: id[0], Expert: id[1]}] = p
	}
	return weightstest.Open(t, m)
}

// loadMem opens w and loads it with opt.
func loadMem(t testing.TB, w *memWeights, opt Options) (*Model, error) {
	t.Helper()
	return Load(w.open(t), opt)
}

// synthModel builds random weights for the configuration in configJSON;
// names in f32 are stored as F32, everything else as BF16.
func synthModel(t testing.TB, configJSON string, seed uint64, f32 map[string]bool) (*hf.Config, *memWeights) {
	t.Helper()
	cfg, err := hf.ParseConfig([]byte(configJSON))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	w := &memWeights{config: []byte(configJSON), tensors: map[string]jnf.TensorView{}, experts: map[[2]int][3]jnf.TensorView{}}
	gen := func(name string, shape []int64, mean, std float64) jnf.TensorView {
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		dt := jnf.BF16
		if f32[name] {
			dt = jnf.F32
		}
		data := make([]byte, n*dt.Size())
		for i := int64(0); i < n; i++ {
			f := float32(mean + std*r.NormFloat64())
			if dt == jnf.F32 {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(f))
			} else {
				binary.LittleEndian.PutUint16(data[2*i:], uint16(math.Float32bits(f)>>16))
			}
		}
		return jnf.TensorView{Name: name, DType: dt, Shape: shape, Data: data}
	}
	mat := func(name string, rows, cols int) {
		w.tensors[name] = gen(name, []int64{int64(rows), int64(cols)}, 0, 1/math.Sqrt(float64(cols)))
	}
	normMean := 1.0
	if cfg.Arch == hf.Qwen35MoE {
		normMean = 0
	}
	vec := func(name string, n int, mean, std float64) { w.tensors[name] = gen(name, []int64{int64(n)}, mean, std) }
	H, V, hd := cfg.Hidden, cfg.Vocab, cfg.HeadDim
	w.tensors["model.embed_tokens.weight"] = gen("model.embed_tokens.weight", []int64{int64(V), int64(H)}, 0, 1)
	vec("model.norm.weight", H, normMean, 0.1)
	if !cfg.Tied {
		mat("lm_head.weight", V, H)
	}
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		vec(p+"input_layernorm.weight", H, normMean, 0.1)
		vec(p+"post_attention_layernorm.weight", H, normMean, 0.1)
		if cfg.LayerTypes[l] == hf.FullAttention {
			q := cfg.Heads * hd
			if cfg.Arch == hf.Qwen35MoE {
				q *= 2
			}
			mat(p+"self_attn.q_proj.weight", q, H)
			mat(p+"self_attn.k_proj.weight", cfg.KVHeads*hd, H)
			mat(p+"self_attn.v_proj.weight", cfg.KVHeads*hd, H)
			mat(p+"self_attn.o_proj.weight", H, cfg.Heads*hd)
			vec(p+"self_attn.q_norm.weight", hd, normMean, 0.1)
			vec(p+"self_attn.k_norm.weight", hd, normMean, 0.1)
		} else {
			C, nv, dv := cfg.ConvDim(), cfg.LinearValueHeads, cfg.LinearValueDim
			mat(p+"linear_attn.in_proj_qkv.weight", C, H)
			mat(p+"linear_attn.in_proj_z.weight", nv*dv, H)
			mat(p+"linear_attn.in_proj_b.weight", nv, H)
			mat(p+"linear_attn.in_proj_a.weight", nv, H)
			mat(p+"linear_attn.out_proj.weight", H, nv*dv)
			n := p + "linear_attn.conv1d.weight"
			w.tensors[n] = gen(n, []int64{int64(C), 1, int64(cfg.ConvKernel)}, 0, 0.5)
			vec(p+"linear_attn.dt_bias", nv, 0, 0.5)
			vec(p+"linear_attn.A_log", nv, 0, 0.5)
			vec(p+"linear_attn.norm.weight", dv, 1, 0.1)
		}
		if cfg.Sparse[l] {
			w.tensors[p+"mlp.gate.weight"] = gen(p+"mlp.gate.weight", []int64{int64(cfg.Experts), int64(H)}, 0, 3/math.Sqrt(float64(H)))
			I := cfg.MoEIntermediate
			for e := 0; e < cfg.Experts; e++ {
				q := fmt.Sprintf("%smlp.experts.%d.", p, e)
				w.experts[[2]int{l, e}] = [3]jnf.TensorView{
					gen(q+"gate_proj.weight", []int64{int64(I), int64(H)}, 0, 1/math.Sqrt(float64(H))),
					gen(q+"up_proj.weight", []int64{int64(I), int64(H)}, 0, 1/math.Sqrt(float64(H))),
					gen(q+"down_proj.weight", []int64{int64(H), int64(I)}, 0, 1/math.Sqrt(float64(I))),
				}
			}
			if cfg.SharedIntermediate > 0 {
				Is := cfg.SharedIntermediate
				mat(p+"mlp.shared_expert.gate_proj.weight", Is, H)
				mat(p+"mlp.shared_expert.up_proj.weight", Is, H)
				mat(p+"mlp.shared_expert.down_proj.weight", H, Is)
				mat(p+"mlp.shared_expert_gate.weight", 1, H)
			}
		} else {
			I := cfg.DenseIntermediate
			mat(p+"mlp.gate_proj.weight", I, H)
			mat(p+"mlp.up_proj.weight", I, H)
			mat(p+"mlp.down_proj.weight", H, I)
		}
	}
	return cfg, w
}

// synthCases are configurations the fixtures do not cover.
var synthCases = []struct {
	name string
	json string
	f32  []string
}{
	{
		// Dense layers (mlp_only_layers), tied embeddings, no top-k
		// renormalisation, top-1 of 64 (torch's partial_sort path), hidden
		// 270 (a ragged second reduction round), head_dim ≠ hidden/heads.
		"qwen3-dense-tied-norenorm",
		`{"model_type":"qwen3_moe","hidden_size":270,"num_hidden_layers":5,"num_attention_heads":3,"num_key_value_heads":1,
		  "head_dim":20,"vocab_size":300,"num_local_experts":64,"num_experts_per_tok":1,"moe_intermediate_size":24,
		  "intermediate_size":40,"norm_topk_prob":false,"mlp_only_layers":[1,3],"decoder_sparse_step":1,
		  "tie_word_embeddings":true,"rope_theta":1000000,"rms_norm_eps":1e-5,"max_position_embeddings":128}`,
		[]string{"model.layers.2.self_attn.k_proj.weight", "model.norm.weight", "model.layers.1.mlp.down_proj.weight"},
	},
	{
		// Qwen3.5 with full attention first, head_dim 40 (rotary dim 10),
		// GQA ratio 3 in the DeltaNet, conv kernel 3, tied embeddings,
		// F32 A_log/norm and an F32 projection matrix.
		"qwen35-odd-dims-tied-f32",
		`{"model_type":"qwen3_5_moe_text","hidden_size":72,"num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":1,
		  "head_dim":40,"vocab_size":200,"num_experts":16,"num_experts_per_tok":3,"moe_intermediate_size":20,
		  "shared_expert_intermediate_size":24,"layer_types":["full_attention","linear_attention","linear_attention"],
		  "linear_num_key_heads":1,"linear_num_value_heads":3,"linear_key_head_dim":24,"linear_value_head_dim":20,
		  "linear_conv_kernel_dim":3,"rope_parameters":{"rope_type":"default","rope_theta":10000000.0,"partial_rotary_factor":0.25},
		  "tie_word_embeddings":true,"rms_norm_eps":1e-6,"max_position_embeddings":256}`,
		[]string{"model.layers.1.linear_attn.A_log", "model.layers.1.linear_attn.norm.weight", "model.layers.2.linear_attn.A_log",
			"model.layers.2.linear_attn.norm.weight", "model.layers.2.linear_attn.in_proj_z.weight", "model.layers.0.self_attn.q_proj.weight"},
	},
}

// syntheticLogits are the digests of the prefill logits of synthCases.
var syntheticLogits = map[string]string{
	"qwen3-dense-tied-norenorm": "17f3cbe103ba2becf6073704eba99734f0c569995d037aa00dfe0e8a894309b3",
	"qwen35-odd-dims-tied-f32":  "05f27406718738846366204de26c8b0f3ed6801c9a0ac7dbe68515330a4e0e1d",
}

func synth(t testing.TB, i int) (*hf.Config, *memWeights) {
	t.Helper()
	c := synthCases[i]
	f32 := map[string]bool{}
	for _, n := range c.f32 {
		f32[n] = true
	}
	return synthModel(t, c.json, uint64(i+1), f32)
}

// TestSyntheticAgainstFloat64 compares the engine with the float64
// reference on the synthetic configurations, and checks bit-identity and
// counters there too.
func TestSyntheticAgainstFloat64(t *testing.T) {
	for i, sc := range synthCases {
		t.Run(sc.name, func(t *testing.T) {
			cfg, w := synth(t, i)
			ck := w.open(t)
			m, err := Load(ck, Options{Threads: 1, CheckExperts: true})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(i), 5))
			toks := make([]int, 70)
			for j := range toks {
				toks[j] = r.IntN(cfg.Vocab)
			}
			got := allLogits(t, m, toks, []int{len(toks)})
			want := (&ref64{cfg: cfg, w: ck}).forward(toks)
			worst, scale := 0.0, 0.0
			for p := range toks {
				for j := range want[p] {
					worst = math.Max(worst, math.Abs(float64(got[p][j])-want[p][j]))
					scale = math.Max(scale, math.Abs(want[p][j]))
				}
			}
			t.Logf("%d positions: max|Δ| vs float64 = %.3g (max |logit| %.3g)", len(toks), worst, scale)
			if tol := 2e-6 * math.Max(1, scale); worst > tol {
				t.Errorf("max|Δ| vs float64 = %.3g, want <= %.3g", worst, tol)
			}
			// Pinned like TestCanonicalLogits; hidden 270 runs the vector
			// kernels (one full round) where the build has them, so the
			// purego build must give the same digest (CI runs both).
			if d, want := logitsDigest(got), syntheticLogits[sc.name]; d != want {
				t.Errorf("logits digest %s, want %s (vector kernels: %v)", d, want, canon.HasVectorKernels())
			}
			compareAll(t, "decode vs prefill", allLogits(t, m, toks, ones(len(toks))), got)
			be := cpu.New(3)
			be.SetMinParallelWork(0)
			mp, err := Load(ck, Options{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			compareAll(t, "3 threads (forced parallel) vs 1", allLogits(t, mp, toks, randomChunks(len(toks), 11)), got)
			st := m.Stats()
			for l, e := range st.ExpertEvals {
				want := int64(0)
				if cfg.Sparse[l] {
					want = st.Tokens * int64(cfg.TopK)
				}
				if e != want {
					t.Errorf("layer %d (sparse %v): %d expert evaluations, want %d", l, cfg.Sparse[l], e, want)
				}
			}
		})
	}
}

// TestReferenceOnFixtures validates the float64 reference itself against the
// Hugging Face fp32 logits.
func TestReferenceOnFixtures(t *testing.T) {
	for _, c := range conformance[:2] {
		ref := readReference(t, c.fixture)
		am := attested(t, c.ckpt)
		p := ref.Prompts[len(ref.Prompts)-1]
		got := (&ref64{cfg: am.Config(), w: am}).forward(p)
		V := am.Config().Vocab
		worst := 0.0
		for pos := range p {
			for j := 0; j < V; j++ {
				worst = math.Max(worst, math.Abs(got[pos][j]-float64(ref.logits[len(ref.Prompts)-1][pos*V+j])))
			}
		}
		t.Logf("%s: float64 reference vs HF fp32: max|Δ| = %.3g", c.ckpt, worst)
		if worst > 1e-4 {
			t.Errorf("%s: float64 reference is %.3g from HF", c.ckpt, worst)
		}
	}
}
