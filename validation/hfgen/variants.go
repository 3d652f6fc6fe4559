// Package hfgen defines synthetic checkpoints that exercise the parts of the
// general config the shared fixtures do not (dense layers, tied embeddings,
// no top-k renormalisation, torch's heap top-k path, GQA ratio 3, head_dim 40,
// explicit layer_types, a DeltaNet head ratio of 3, prompts past the 64-token
// chunk), and writes them for Hugging Face transformers to produce reference
// logits (reference.py, run on a machine with torch + transformers). The
// references are committed under validation/testdata/synthref with their
// provenance and checked by validation/conformance like the shared fixtures.
package hfgen

import (
	"fmt"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// Variant is one synthetic checkpoint.
type Variant struct {
	Name string
	synth.Options
}

// Variants are the checkpoints whose Hugging Face references are committed.
var Variants = []Variant{
	{"q3-dense-tied-norenorm", synth.Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 101, Set: map[string]any{
		"vocab_size": 320, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 40,
		"num_experts": 10, "num_experts_per_tok": 3, "mlp_only_layers": []int{1}, "intermediate_size": 80,
		"norm_topk_prob": false, "tie_word_embeddings": true, "rope_theta": 1000000.0, "rope_parameters": nil}}},
	{"q3-heap-topk-sparse-step", synth.Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 102, Set: map[string]any{
		"vocab_size": 320, "num_experts": 64, "num_experts_per_tok": 1, "moe_intermediate_size": 8,
		"decoder_sparse_step": 2, "intermediate_size": 48}}},
	{"q35-ratio3-hd40-tied", synth.Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 103, Set: map[string]any{
		"vocab_size": 320, "num_hidden_layers": 5, "head_dim": 40, "num_attention_heads": 4, "num_key_value_heads": 1,
		"layer_types":          []string{"linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"},
		"linear_num_key_heads": 2, "linear_num_value_heads": 6, "linear_key_head_dim": 8, "linear_value_head_dim": 12,
		"num_experts": 12, "num_experts_per_tok": 4, "shared_expert_intermediate_size": 40, "tie_word_embeddings": true,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}}}},
}

// FP8Variants are the block-FP8 checkpoints (synth.DTypeFP8: the layout
// of Qwen's FP8 releases) whose references come from transformers' own
// FP8 path (reference.py: FineGrainedFP8, or its dequantising fallback,
// as recorded in each reference.json). Their blocks divide every matrix
// (transformers' FP8 activation kernel wants K a multiple of bk) and
// are small, so that the tiny matrices have several blocks each way;
// q3-fp8's are not square, and it has a dense layer.
var FP8Variants = []Variant{
	{"q3-fp8", synth.Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 111, DType: synth.DTypeFP8, FP8Block: [2]int{32, 16},
		Set: map[string]any{"vocab_size": 320, "mlp_only_layers": []int{1}}}},
	{"q35-fp8", synth.Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 112, DType: synth.DTypeFP8, FP8Block: [2]int{16, 16},
		Set: map[string]any{"vocab_size": 320}}},
}

// PromptLengths are the prompt lengths of every reference (80 crosses HF's
// 64-token DeltaNet chunk).
var PromptLengths = []int{1, 7, 19, 80}

// WriteAll writes every variant's checkpoint to dir/NAME/checkpoint.
func WriteAll(dir string) error { return write(dir, Variants) }

// WriteFP8 writes every FP8 variant's checkpoint to dir/NAME/checkpoint.
func WriteFP8(dir string) error { return write(dir, FP8Variants) }

func write(dir string, vs []Variant) error {
	for _, v := range vs {
		if err := synth.Write(filepath.Join(dir, v.Name, "checkpoint"), v.Options); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	return nil
}
