package synth

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

func TestSynthOpensAndConverts(t *testing.T) {
	for _, arch := range []hf.Arch{hf.Qwen3MoE, hf.Qwen35MoE} {
		for _, layout := range []string{hf.LayoutPerExpert, hf.LayoutFused} {
			t.Run(string(arch)+"/"+layout, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "ck")
				if err := Write(dir, Options{Arch: arch, Preset: "tiny", Seed: 7, Layout: layout}); err != nil {
					t.Fatal(err)
				}
				ck, err := hf.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				if ck.Layout != layout || len(ck.Shards) < 2 {
					t.Errorf("layout %s, %d shards", ck.Layout, len(ck.Shards))
				}
				if layout == hf.LayoutFused && len(ck.Ignored) != 2 {
					t.Errorf("fused synth should carry 2 ignorable tensors, has %d", len(ck.Ignored))
				}
				if _, err := convert.Convert(context.Background(), dir, filepath.Join(t.TempDir(), "j"), convert.Options{LastLayer: -1, Verify: true}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestSynthDeterministicAndSeeded(t *testing.T) {
	a, b, c := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "c")
	for dir, seed := range map[string]uint64{a: 1, b: 1, c: 2} {
		if err := Write(dir, Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: seed}); err != nil {
			t.Fatal(err)
		}
	}
	shard := "model-00001-of-" // compare the first shard of each
	read := func(dir string) []byte {
		m, _ := filepath.Glob(filepath.Join(dir, shard+"*"))
		bb, _ := os.ReadFile(m[0])
		return bb
	}
	if !bytes.Equal(read(a), read(b)) {
		t.Error("same seed, different bytes")
	}
	if bytes.Equal(read(a), read(c)) {
		t.Error("different seeds, same bytes")
	}
	if err := Write(a, Options{Arch: hf.Qwen35MoE, Preset: "tiny"}); err == nil {
		t.Error("overwrote an existing checkpoint")
	}
	if err := Write(filepath.Join(t.TempDir(), "x"), Options{Arch: "llama", Preset: "tiny"}); err == nil {
		t.Error("unknown arch accepted")
	}
}

func TestRealPresetShapes(t *testing.T) {
	// MODEL_SPEC §A.4: one 122B expert is 18 874 368 bytes; 8 × 48 of them are read per token.
	_, c, err := Config(Options{Arch: hf.Qwen35MoE, Preset: "real"})
	if err != nil {
		t.Fatal(err)
	}
	if b := c.ExpertParams() * 2; b != 18874368 || b*int64(c.TopK*c.NumSparseLayers()) != 7247757312 || c.ConvDim() != 12288 || c.RotaryDim != 64 {
		t.Errorf("122B: expert %d bytes, conv %d, rotary %d", b, c.ConvDim(), c.RotaryDim)
	}
	_, c, err = Config(Options{Arch: hf.Qwen3MoE, Preset: "real", Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b := c.ExpertParams() * 2; b != 9437184 || c.Layers != 2 {
		t.Errorf("30B: expert %d bytes, %d layers", b, c.Layers)
	}
}

func TestEnsureDefault(t *testing.T) {
	cache := t.TempDir()
	dir, built, err := EnsureDefault(context.Background(), cache)
	if err != nil || !built {
		t.Fatalf("first use: built %v, %v", built, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Error("default model ships no tokenizer.json")
	}
	dir2, built, err := EnsureDefault(context.Background(), cache)
	if err != nil || built || dir2 != dir {
		t.Fatalf("second use: built %v dir %s, %v", built, dir2, err)
	}
	// A damaged cache is rebuilt, not trusted.
	b, _ := os.ReadFile(filepath.Join(dir, "layer-00002.jnf"))
	b[len(b)-100] ^= 1
	os.WriteFile(filepath.Join(dir, "layer-00002.jnf"), b, 0o644)
	if _, built, err := EnsureDefault(context.Background(), cache); err != nil || !built {
		t.Errorf("damaged cache: built %v, %v", built, err)
	}
}

func TestSynthConfigOverrides(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	err := Write(dir, Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 3, Set: map[string]any{
		"tie_word_embeddings": true, "mlp_only_layers": []int{1}, "norm_topk_prob": false, "num_attention_heads": 6, "head_dim": 40}})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c := ck.Config
	if !c.Tied || c.Sparse[1] || !c.Sparse[0] || c.NormTopKProb || c.Heads != 6 || c.HeadDim != 40 || c.RotaryDim != 40 {
		t.Errorf("config %+v", c)
	}
	if _, ok := ck.Tensor("lm_head.weight"); ok {
		t.Error("tied model has an lm_head tensor")
	}
	if _, ok := ck.Tensor("model.layers.1.mlp.gate_proj.weight"); !ok || ck.Experts[1] != nil {
		t.Error("dense layer 1 lacks its MLP or has experts")
	}
}
