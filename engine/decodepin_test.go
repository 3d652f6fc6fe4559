package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/weights"
)

// decodeCases are synthetic models whose reductions run several full
// 256-term rounds of the canonical order plus a partial one, so that the
// vector kernels, their tails (whole chunks of 8 and a partial chunk) and
// the butterfly all count: hidden 813 = 3·256 + 5·8 + 5 (every projection
// from the residual stream, the router, the norms and the LM head),
// routed-expert intermediate 299 = 256 + 5·8 + 3 and shared or dense
// intermediate 555 = 2·256 + 5·8 + 3 (the down projections). The
// sequence has 300 positions, so the attention softmax and p·v over
// positions run a full round and a partial one too. Some matrices are F32
// (the DotF32X kernel).
var decodeCases = []struct {
	name string
	json string
	f32  []string
}{
	{
		"qwen35-hidden813",
		`{"model_type":"qwen3_5_moe_text","hidden_size":813,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,
		  "head_dim":64,"vocab_size":320,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":299,
		  "shared_expert_intermediate_size":555,"layer_types":["linear_attention","full_attention"],
		  "linear_num_key_heads":1,"linear_num_value_heads":2,"linear_key_head_dim":64,"linear_value_head_dim":64,
		  "linear_conv_kernel_dim":4,"rope_parameters":{"rope_type":"default","rope_theta":10000000.0,"partial_rotary_factor":0.25},
		  "tie_word_embeddings":false,"rms_norm_eps":1e-6,"max_position_embeddings":512}`,
		[]string{"model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.norm.weight",
			"model.layers.0.linear_attn.in_proj_z.weight", "model.layers.1.self_attn.k_proj.weight", "lm_head.weight"},
	},
	{
		"qwen3-hidden813-dense",
		`{"model_type":"qwen3_moe","hidden_size":813,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,
		  "head_dim":64,"vocab_size":320,"num_local_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":299,
		  "intermediate_size":555,"norm_topk_prob":true,"mlp_only_layers":[1],"decoder_sparse_step":1,
		  "tie_word_embeddings":true,"rope_theta":1000000,"rms_norm_eps":1e-6,"max_position_embeddings":512}`,
		[]string{"model.layers.1.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight"},
	},
}

// decodeLogits are the SHA-256 digests (logitsDigest) of the decode logits
// of decodeCases: the last prompt position and every decode step.
var decodeLogits = map[string]string{
	"qwen35-hidden813":      "7e2a2b221424e56172c82117b705252c18872a57a7129b0c56fdb2248567bd03",
	"qwen3-hidden813-dense": "d97a7704e422f9ab0b2f28dfad8e5fbe59cd3fe553231f6d4b02ffd1d8c8b969",
}

const (
	decodePrompt = 7   // prompt tokens (one prefill Forward)
	decodeLen    = 300 // total positions; the rest are decode steps
	ref64Prefix  = 48  // positions also computed by the float64 reference
)

// onceExperts verifies each expert once (ref64 fetches one for every token).
type onceExperts struct {
	source
	seen map[[2]int]weights.VerifiedExpert
}

func (w *onceExperts) Expert(l, e int) (weights.VerifiedExpert, error) {
	if v, ok := w.seen[[2]int{l, e}]; ok {
		return v, nil
	}
	v, err := w.source.Expert(l, e)
	if err == nil {
		if w.seen == nil {
			w.seen = map[[2]int]weights.VerifiedExpert{}
		}
		w.seen[[2]int{l, e}] = v
	}
	return v, err
}

func decodeModel(t *testing.T, i int) (*hf.Config, *weights.Checkpoint, []int) {
	t.Helper()
	c := decodeCases[i]
	f32 := map[string]bool{}
	for _, n := range c.f32 {
		f32[n] = true
	}
	cfg, w := synthModel(t, c.json, uint64(100+i), f32)
	r := rand.New(rand.NewPCG(uint64(i), 813))
	toks := make([]int, decodeLen)
	for j := range toks {
		toks[j] = r.IntN(cfg.Vocab)
	}
	return cfg, w.open(t), toks
}

// decodeRows runs the prompt in one Forward and then one token per Forward,
// and returns the logits of the last prompt position and of every step.
func decodeRows(t *testing.T, m *Model, toks []int) [][]float32 {
	t.Helper()
	s := m.NewSession()
	lg, err := s.Forward(toks[:decodePrompt], false)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]float32{lg[0]}
	for _, tok := range toks[decodePrompt:] {
		lg, err := s.Forward([]int{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, lg[0])
	}
	return rows
}

// TestPinnedDecodeLogits pins the decode-step logits of decodeCases. The
// pin is a regression check; that its value is right rests on the other
// checks here, which do not depend on it:
//
//   - the same logits come out of a single prefill Forward of the whole
//     sequence (the DotBF16T/DotF32X kernels for many tokens instead of
//     DotBF16X for one) and out of 3 goroutines with every operation forced
//     parallel (other splits of every op);
//   - the first ref64Prefix positions agree with ref64, the independent
//     float64 implementation of the model, to within rounding;
//   - CI runs the test again with -tags purego (the scalar loops instead of
//     the AVX2 kernels), which must give the same digest; so does a
//     GOAMD64=v3 build, where the compiler would fuse any unrounded x*y+z.
func TestPinnedDecodeLogits(t *testing.T) {
	for i, dc := range decodeCases {
		t.Run(dc.name, func(t *testing.T) {
			cfg, w, toks := decodeModel(t, i)
			m, err := Load(w, Options{Threads: 1, CheckExperts: true, Experts: ramTier(t, w, tier.Auto)})
			if err != nil {
				t.Fatal(err)
			}
			rows := decodeRows(t, m, toks)
			d := logitsDigest(rows)
			if want := decodeLogits[dc.name]; d != want {
				t.Errorf("decode logits digest %s, want %s (vector kernels: %v)", d, want, canon.HasVectorKernels())
			}

			full := allLogits(t, m, toks, []int{len(toks)})[decodePrompt-1:]
			compareAll(t, "decode vs one prefill Forward", rows, full)
			be := cpu.New(3)
			be.SetMinParallelWork(0)
			mp, err := Load(w, Options{Backend: be, Experts: ramTier(t, w, tier.Auto)})
			if err != nil {
				t.Fatal(err)
			}
			compareAll(t, "3 threads (forced parallel) decode vs 1", decodeRows(t, mp, toks), rows)

			want := (&ref64{cfg: cfg, w: &onceExperts{source: w}}).forward(toks[:ref64Prefix])
			worst, scale := 0.0, 0.0
			for p := decodePrompt - 1; p < ref64Prefix; p++ {
				for j, v := range rows[p-(decodePrompt-1)] {
					worst = math.Max(worst, math.Abs(float64(v)-want[p][j]))
					scale = math.Max(scale, math.Abs(want[p][j]))
				}
			}
			t.Logf("positions %d…%d: max|Δ| vs float64 = %.3g (max |logit| %.3g)", decodePrompt-1, ref64Prefix-1, worst, scale)
			// float32 rounding over 3-round reductions and 48 steps of the
			// DeltaNet recurrence: measured 1.5e-6 relative (qwen35) and
			// 1.5e-7 (qwen3); a wrong operation is off by far more.
			if tol := 5e-6 * math.Max(1, scale); worst > tol {
				t.Errorf("max|Δ| vs float64 = %.3g, want <= %.3g", worst, tol)
			}
		})
	}
}
