// Package hftest builds tiny Hugging Face checkpoints for tests: a
// block-FP8 Qwen3.5-MoE checkpoint in the layout of Qwen's official FP8
// releases (F8_E4M3 matrices, each with its weight_scale_inv; per-expert
// routed experts; embeddings, norms, routers and the Gated DeltaNet's small
// tensors in BF16), which a test may edit before it is written.
package hftest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// Tensor is one tensor of the checkpoint to write.
type Tensor struct {
	Name  string // as stored (model.language_model.…, lm_head.weight, mtp.…)
	DType jnf.DType
	Shape []int64
	Data  []byte
}

// FP8 describes the checkpoint FP8Checkpoint writes.
type FP8 struct {
	// ScaleDType is the scales' dtype: F32 (the default) or BF16.
	ScaleDType jnf.DType
	// BlockN, BlockK are weight_block_size (default 24, 40: blocks that
	// do not divide the tiny matrices, so the scale shapes round up).
	BlockN, BlockK int
	// Config, if set, edits config.json (a decoded JSON object).
	Config func(map[string]any)
	// Edit, if set, edits the tensors before they are written.
	Edit func([]Tensor) []Tensor
}

// Official lists the canonical names (after model.layers.N.) that Qwen's
// FP8 releases store as F8_E4M3, besides the routed experts: what
// Qwen/Qwen3.5-35B-A3B-FP8 quantises (jnf/SPEC.md §10).
var Official = []string{
	"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
	"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.out_proj.weight",
	"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight", "mlp.shared_expert.down_proj.weight",
}

// ConfigJSON is the tiny model's config.json before o.Config edits it:
// two layers (Gated DeltaNet, then full attention), eight experts.
func ConfigJSON(o FP8) map[string]any {
	if o.BlockN == 0 {
		o.BlockN, o.BlockK = 24, 40
	}
	return map[string]any{
		"architectures": []any{"Qwen3_5MoeForConditionalGeneration"},
		"model_type":    "qwen3_5_moe",
		"text_config": map[string]any{
			"model_type": "qwen3_5_moe_text", "hidden_size": 64, "num_hidden_layers": 2,
			"layer_types":         []any{"linear_attention", "full_attention"},
			"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256,
			"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
			"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
			"linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
		},
		"tie_word_embeddings": false,
		"quantization_config": map[string]any{
			"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
			"weight_block_size": []any{o.BlockN, o.BlockK},
			"modules_to_not_convert": []any{"lm_head", "model.language_model.embed_tokens", "mlp.gate", "mlp.shared_expert_gate",
				"linear_attn.in_proj_a", "linear_attn.in_proj_b", "model.visual"},
		},
	}
}

// Tensors lists the checkpoint's tensors, with deterministic contents:
// finite F8_E4M3 codes, positive finite scales, arbitrary BF16 bytes.
func Tensors(t testing.TB, o FP8) ([]byte, []Tensor) {
	t.Helper()
	if o.ScaleDType == "" {
		o.ScaleDType = jnf.F32
	}
	cj := ConfigJSON(o)
	if o.Config != nil {
		o.Config(cj)
	}
	cb, err := json.MarshalIndent(cj, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// The shapes come from the config as Tarfa reads it, so the fixture
	// can only be as wrong as a test makes it; a config a test made
	// unreadable gets the default's shapes.
	cfg, err := hf.ParseConfig(cb)
	if err != nil {
		d, _ := json.Marshal(ConfigJSON(o))
		if cfg, err = hf.ParseConfig(d); err != nil {
			t.Fatal(err)
		}
	}
	bn, bk := int64(24), int64(40)
	if o.BlockN != 0 {
		bn, bk = int64(o.BlockN), int64(o.BlockK)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var out []Tensor
	add := func(name string, fp8 bool, shape []int64) {
		if !fp8 {
			out = append(out, Tensor{Name: name, DType: jnf.BF16, Shape: shape, Data: Bytes(rng, jnf.BF16, shape)})
			return
		}
		out = append(out, Tensor{Name: name, DType: jnf.F8E4, Shape: shape, Data: Bytes(rng, jnf.F8E4, shape)})
		ss := []int64{(shape[0] + bn - 1) / bn, (shape[1] + bk - 1) / bk}
		out = append(out, Tensor{Name: name + jnf.ScaleSuffix, DType: o.ScaleDType, Shape: ss, Data: Bytes(rng, o.ScaleDType, ss)})
	}
	for _, e := range cfg.ExpectedTensors() {
		name := e.Name
		if rest, ok := strings.CutPrefix(name, "model."); ok {
			name = "model.language_model." + rest
		}
		fp8 := e.Layer >= 0 && slices.Contains(Official, strings.TrimPrefix(e.Name, fmt.Sprintf("model.layers.%d.", e.Layer)))
		add(name, fp8, e.Shape)
	}
	I, H := int64(cfg.MoEIntermediate), int64(cfg.Hidden)
	for l := range cfg.Layers {
		for e := range cfg.Experts {
			for _, p := range jnf.ExpertParts {
				shape := []int64{I, H}
				if p == "down_proj" {
					shape = []int64{H, I}
				}
				add(fmt.Sprintf("model.language_model.layers.%d.mlp.experts.%d.%s.weight", l, e, p), true, shape)
			}
		}
	}
	// Ignored parts of a release, FP8 as well: they stay ignored.
	add("mtp.fc.weight", true, []int64{H, 2 * H})
	add("model.visual.blocks.0.attn.qkv.weight", true, []int64{48, 16})
	if o.Edit != nil {
		out = o.Edit(out)
	}
	return cb, out
}

// Bytes returns deterministic little-endian values of a dtype: F8_E4M3
// codes other than the NaN codes, positive finite F32 and BF16 scales
// (powers of two times 1.x, as a quantiser makes), any BF16 bits otherwise
// finite.
func Bytes(rng *rand.Rand, d jnf.DType, shape []int64) []byte {
	n, _ := jnf.ByteSize(d, shape)
	b := make([]byte, n)
	switch d {
	case jnf.F8E4:
		for i := range b {
			c := byte(rng.UintN(256))
			if c&0x7F == 0x7F {
				c ^= 1
			}
			b[i] = c
		}
	case jnf.F32:
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(1+rng.Float64())/float32(uint(1)<<rng.UintN(12))))
		}
	case jnf.BF16:
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], uint16(math.Float32bits(float32(1+rng.Float64())/float32(uint(1)<<rng.UintN(12)))>>16))
		}
	default:
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
	}
	return b
}

// FP8Checkpoint writes the checkpoint into a new directory under
// t.TempDir() (config.json and one model.safetensors) and returns it.
func FP8Checkpoint(t testing.TB, o FP8) string {
	t.Helper()
	cb, ts := Tensors(t, o)
	dir := filepath.Join(t.TempDir(), "checkpoint")
	if err := Write(dir, cb, ts); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Write writes config.json and model.safetensors holding ts into dir.
func Write(dir string, config []byte, ts []Tensor) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		return err
	}
	specs := make([]safetensors.Spec, len(ts))
	data := map[string][]byte{}
	for i, x := range ts {
		specs[i] = safetensors.Spec{Name: x.Name, DType: x.DType, Shape: x.Shape}
		data[x.Name] = x.Data
	}
	return safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), specs, nil, func(s safetensors.Spec, w io.Writer) error {
		_, err := w.Write(data[s.Name])
		return err
	})
}
