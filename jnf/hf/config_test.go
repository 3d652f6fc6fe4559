package hf

import (
	"os"
	"strings"
	"testing"
)

const fixtures = "../../validation/testdata/fixtures/"

func TestReadFixtureConfigs(t *testing.T) {
	a, err := ReadConfig(fixtures + "qwen3moe-dev-a/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	if a.Arch != Qwen3MoE || a.Experts != 8 || a.TopK != 2 || !a.NormTopKProb || a.RotaryDim != 16 || a.NumSparseLayers() != 4 {
		t.Errorf("dev-a config: %+v", a)
	}
	flat, err := ReadConfig(fixtures + "qwen35moe-dev-c/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	nested, err := ReadConfig(fixtures + "qwen35moe-dev-c/checkpoint-official")
	if err != nil {
		t.Fatal(err)
	}
	if !nested.Nested || flat.Nested {
		t.Errorf("nested flags: flat %v nested %v", flat.Nested, nested.Nested)
	}
	if flat.RotaryDim != 8 || flat.LayerTypes[3] != FullAttention || flat.LayerTypes[0] != LinearAttention || flat.SharedIntermediate != 48 || flat.ConvDim() != 2*2*16+4*16 {
		t.Errorf("dev-c config: %+v", flat)
	}
	// The two layouts describe the same text model.
	flat.ModelType, flat.Nested = nested.ModelType, nested.Nested
	if a, b := *flat, *nested; a.Hidden != b.Hidden || a.Layers != b.Layers || a.RopeTheta != b.RopeTheta || a.Experts != b.Experts {
		t.Errorf("flat and nested configs differ:\n%+v\n%+v", a, b)
	}
	e, err := ReadConfig(fixtures + "qwen35moe-dev-e-long/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	if e.RopeTheta != 1e7 || e.Layers != 8 || e.Experts != 32 || e.TopK != 8 {
		t.Errorf("dev-e config: %+v", e)
	}
}

func TestConfigRules(t *testing.T) {
	base := `"hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32`
	cases := []struct {
		json, wantErr string
		check         func(*Config) bool
	}{
		{`{"model_type":"llama"}`, `unsupported model_type "llama"`, nil},
		{`{}`, "no model_type", nil},
		{`{"model_type":"qwen3_moe",` + base + `}`, "num_experts", nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8}`, "", func(c *Config) bool {
			return c.Experts == 8 && c.HeadDim == 16 && c.RopeTheta == 10000 && !c.NormTopKProb
		}},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"num_local_experts":4}`, "disagree", nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"rope_theta":1e6,"rope_scaling":null}`, "", func(c *Config) bool { return c.RopeTheta == 1e6 }},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"rope_scaling":{"type":"yarn"}}`, "rope_scaling", nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"mlp_only_layers":[1]}`, "intermediate_size", nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"mlp_only_layers":[1],"intermediate_size":96,"decoder_sparse_step":1}`, "", func(c *Config) bool { return !c.Sparse[1] && c.Sparse[0] && c.DenseIntermediate == 96 }},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"decoder_sparse_step":2,"intermediate_size":96}`, "", func(c *Config) bool { return !c.Sparse[0] && c.Sparse[1] && !c.Sparse[2] && c.Sparse[3] }},
		{`{"model_type":"qwen3_5_moe_text",` + base + `,"num_experts":8,"shared_expert_intermediate_size":48,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":16,"norm_topk_prob":false}`, "", func(c *Config) bool {
			return c.NormTopKProb && c.LayerTypes[3] == FullAttention && c.LayerTypes[2] == LinearAttention && c.RotaryDim == 4 && c.ConvKernel == 4
		}},
		{`{"model_type":"qwen3_5_moe"}`, "text_config", nil},
		{`{"model_type":"qwen3_5_moe_text",` + base + `,"num_experts":8,"shared_expert_intermediate_size":48,"linear_num_key_heads":3,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":16}`, "multiple", nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"rope_parameters":{"rope_type":"yarn"}}`, `rope_type "yarn"`, nil},
		{`{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"eos_token_id":[1,2]}`, "", func(c *Config) bool { return len(c.EOS) == 2 }},
	}
	for i, tc := range cases {
		c, err := ParseConfig([]byte(tc.json))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("case %d: error %v, want one containing %q", i, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("case %d: unexpected config %+v", i, c)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, d := range []string{"qwen3moe-dev-a/checkpoint", "qwen35moe-dev-c/checkpoint", "qwen35moe-dev-c/checkpoint-official"} {
		b, err := os.ReadFile(fixtures + d + "/config.json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		// Invariants every accepted config satisfies (the engine relies on them).
		if c.Hidden <= 0 || c.Layers <= 0 || c.Heads%c.KVHeads != 0 || c.TopK > c.Experts || c.TopK <= 0 ||
			c.RotaryDim <= 0 || c.RotaryDim%2 != 0 || len(c.LayerTypes) != c.Layers || len(c.Sparse) != c.Layers {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
		for l, lt := range c.LayerTypes {
			if lt == LinearAttention && (c.LinearKeyHeads <= 0 || c.LinearValueHeads%c.LinearKeyHeads != 0 || c.ConvKernel <= 0) {
				t.Fatalf("layer %d linear attention without valid dims: %+v", l, c)
			}
		}
	})
}
