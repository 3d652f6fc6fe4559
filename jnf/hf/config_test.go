package hf

import (
	"encoding/json"
	"os"
	"reflect"
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
	// Hostile counts and dimensions: huge, overflowing when multiplied,
	// negative, and not integers.
	f.Add([]byte(`{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4611686018427387904,"num_attention_heads":4,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8}`))
	f.Add([]byte(`{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":1000000000000,"num_attention_heads":4,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8}`))
	f.Add([]byte(`{"model_type":"qwen3_moe","hidden_size":65536,"num_hidden_layers":1024,"num_attention_heads":1024,"head_dim":4096,"vocab_size":16777216,"num_experts_per_tok":64,"moe_intermediate_size":1048576,"num_experts":64}`))
	f.Add([]byte(`{"model_type":"qwen3_moe","hidden_size":9223372036854775807,"num_hidden_layers":-1,"num_attention_heads":4,"vocab_size":1e9,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8}`))
	f.Add([]byte(`{"model_type":"qwen3_5_moe","text_config":{"hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":65536,"shared_expert_intermediate_size":48,"linear_num_key_heads":1024,"linear_num_value_heads":1024,"linear_key_head_dim":4096,"linear_value_head_dim":4096,"linear_conv_kernel_dim":64,"max_position_embeddings":1073741824}}`))
	f.Add([]byte(`{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8,"mlp_only_layers":[0,1,2,3],"intermediate_size":4611686018427387904}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		// Every count and dimension within its limit.
		for _, v := range []struct{ got, max int }{
			{c.Layers, MaxLayers}, {c.Experts, MaxExperts}, {c.Hidden, MaxHidden}, {c.Vocab, MaxVocab},
			{c.Heads, MaxHeads}, {c.KVHeads, MaxHeads}, {c.HeadDim, MaxHeadDim}, {c.MoEIntermediate, MaxIntermediate},
			{c.SharedIntermediate, MaxIntermediate}, {c.DenseIntermediate, MaxIntermediate}, {c.LinearKeyHeads, MaxHeads},
			{c.LinearValueHeads, MaxHeads}, {c.LinearKeyDim, MaxHeadDim}, {c.LinearValueDim, MaxHeadDim},
			{c.ConvKernel, MaxConvKernel}, {c.MaxPositions, MaxPositions}, {c.NumSparseLayers() * c.Experts, MaxRoutedExperts},
		} {
			if v.got < 0 || v.got > v.max {
				t.Fatalf("accepted a value %d outside [0, %d]: %+v", v.got, v.max, c)
			}
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

// withField returns a fixture config.json with one field set (in
// text_config for the nested official layout).
func withField(t *testing.T, fixture, field string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile(fixtures + fixture + "/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	obj := m
	if tc, ok := m["text_config"].(map[string]any); ok {
		obj = tc
	}
	obj[field] = v
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every count and dimension of config.json is bounded before anything is
// allocated from it: a config that asks for 2^62 layers is an error naming
// the field, the value and the limit, in bounded time and memory.
func TestConfigLimits(t *testing.T) {
	const a, c = "qwen3moe-dev-a/checkpoint", "qwen35moe-dev-c/checkpoint-official"
	cases := []struct {
		fixture, field string
		v              any
		want           string
	}{
		{a, "num_hidden_layers", int64(1e9), "num_hidden_layers = 1000000000, more than the 1024 Tarfa accepts"},
		{a, "num_hidden_layers", int64(1e12), "num_hidden_layers = 1000000000000, more than the 1024 Tarfa accepts"},
		{a, "num_hidden_layers", int64(1) << 62, "num_hidden_layers = 4611686018427387904, more than the 1024 Tarfa accepts"},
		{a, "num_hidden_layers", 1025, "num_hidden_layers = 1025, more than the 1024 Tarfa accepts"},
		{a, "num_hidden_layers", 0, "num_hidden_layers = 0, want > 0"},
		{a, "num_hidden_layers", json.RawMessage("1e9"), "cannot unmarshal number 1e9"},
		{a, "num_local_experts", 1<<16 + 1, "num_local_experts = 65537, more than the 65536 Tarfa accepts"},
		{a, "num_local_experts", -8, "num_local_experts = -8, want > 0"},
		{a, "hidden_size", 1<<16 + 64, "hidden_size = 65600, more than the 65536 Tarfa accepts"},
		{a, "vocab_size", 1<<24 + 1, "vocab_size = 16777217, more than the 16777216 Tarfa accepts"},
		{a, "num_attention_heads", 2048, "num_attention_heads = 2048, more than the 1024 Tarfa accepts"},
		{a, "num_key_value_heads", 0, "num_key_value_heads = 0, want > 0"},
		{a, "num_key_value_heads", 4096, "num_key_value_heads = 4096, more than the 1024 Tarfa accepts"},
		{a, "head_dim", 8192, "head_dim = 8192, more than the 4096 Tarfa accepts"},
		{a, "head_dim", -16, "head_dim = -16, want > 0"},
		{a, "moe_intermediate_size", 1<<20 + 1, "moe_intermediate_size = 1048577, more than the 1048576 Tarfa accepts"},
		{a, "intermediate_size", 1 << 40, ""}, // unused: every layer is sparse
		{a, "max_position_embeddings", 1<<30 + 1, "max_position_embeddings = 1073741825, more than the 1073741824 Tarfa accepts"},
		{a, "max_position_embeddings", -1, "max_position_embeddings = -1, want >= 0"},
		{a, "num_experts_per_tok", 1 << 40, "num_experts_per_tok = 1099511627776, more than the 65536 Tarfa accepts"},
		// 1024 MoE layers of 128 experts: each within its bound, the product not.
		{a, "num_hidden_layers", 1024, ""},
		{c, "num_hidden_layers", int64(1) << 62, "text_config.num_hidden_layers = 4611686018427387904, more than the 1024 Tarfa accepts"},
		{c, "shared_expert_intermediate_size", 1 << 21, "text_config.shared_expert_intermediate_size = 2097152, more than the 1048576 Tarfa accepts"},
		{c, "linear_num_value_heads", 1 << 11, "text_config.linear_num_value_heads = 2048, more than the 1024 Tarfa accepts"},
		{c, "linear_value_head_dim", 1 << 13, "text_config.linear_value_head_dim = 8192, more than the 4096 Tarfa accepts"},
		{c, "linear_conv_kernel_dim", 65, "text_config.linear_conv_kernel_dim = 65, more than the 64 Tarfa accepts"},
		{c, "linear_conv_kernel_dim", 0, "text_config.linear_conv_kernel_dim = 0, want > 0"},
	}
	for _, tc := range cases {
		b := withField(t, tc.fixture, tc.field, tc.v)
		_, err := ParseConfig(b)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %s = %v: %v", tc.fixture, tc.field, tc.v, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %s = %v: error %v, want one containing %q", tc.fixture, tc.field, tc.v, err, tc.want)
		}
	}
	// Layers and experts each within bounds, the routed experts not.
	b := withField(t, a, "num_local_experts", 128)
	var m map[string]any
	json.Unmarshal(b, &m)
	m["num_hidden_layers"] = 1024
	b, _ = json.Marshal(m)
	if _, err := ParseConfig(b); err == nil || !strings.Contains(err.Error(), "routed experts (MoE layers × num_experts) = 1024×128 = 131072, more than the 65536 Tarfa accepts") {
		t.Errorf("1024 layers × 128 experts: %v", err)
	}
}

// A config at every limit at once is accepted: the limits are consistent,
// every size derived from them fits an int64.
func TestConfigAtTheLimits(t *testing.T) {
	cfg := map[string]any{
		"model_type": "qwen3_5_moe_text", "hidden_size": MaxHidden, "num_hidden_layers": 1,
		"num_attention_heads": MaxHeads, "num_key_value_heads": MaxHeads, "head_dim": MaxHeadDim,
		"vocab_size": MaxVocab, "num_experts": MaxExperts, "num_experts_per_tok": MaxExperts,
		"moe_intermediate_size": MaxIntermediate, "shared_expert_intermediate_size": MaxIntermediate,
		"linear_num_key_heads": MaxHeads, "linear_num_value_heads": MaxHeads, "linear_key_head_dim": MaxHeadDim,
		"linear_value_head_dim": MaxHeadDim, "linear_conv_kernel_dim": MaxConvKernel, "max_position_embeddings": MaxPositions,
		"layer_types": []string{"linear_attention"},
	}
	b, _ := json.Marshal(cfg)
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExpertParams() != 3*MaxIntermediate*MaxHidden || c.ConvDim() != 3*MaxHeads*MaxHeadDim {
		t.Errorf("expert params %d, conv dim %d", c.ExpertParams(), c.ConvDim())
	}
	cfg["num_hidden_layers"], cfg["num_experts"], cfg["num_experts_per_tok"], cfg["layer_types"] = MaxLayers, MaxRoutedExperts/MaxLayers, 1, nil
	b, _ = json.Marshal(cfg)
	if _, err := ParseConfig(b); err != nil {
		t.Fatal(err)
	}
}

// checkSizes is the second line behind the field limits: sizes that
// overflow an int64 are errors, not wrapped-around numbers.
func TestCheckSizesOverflow(t *testing.T) {
	ok := Config{Arch: Qwen35MoE, Hidden: 64, Layers: 1, Heads: 4, HeadDim: 16, Vocab: 256, Experts: 8, MoEIntermediate: 32,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 16, LinearValueDim: 16, ConvKernel: 4, Sparse: []bool{true}}
	if err := ok.checkSizes(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Vocab = 1 << 60 }, "embedding bytes (vocab_size × hidden_size × 4) = 1152921504606846976×64×4 overflows"},
		{func(c *Config) { c.Heads = 1 << 50 }, "q_proj bytes = 2×1125899906842624×16×64×4 overflows"},
		{func(c *Config) { c.MoEIntermediate = 1 << 56 }, "bytes per expert"},
		{func(c *Config) { c.Experts, c.MoEIntermediate = 1<<10, 1<<50 }, "fused expert tensor bytes"},
		{func(c *Config) {
			c.Sparse = make([]bool, 1<<10)
			c.Experts = 1 << 6
			c.MoEIntermediate, c.Hidden = 1<<26, 1<<26
		}, "routed expert bytes"},
		{func(c *Config) { c.Sparse = make([]bool, 4); c.SharedIntermediate = 1 << 60 }, "shared_expert_intermediate_size MLP bytes"},
		{func(c *Config) { c.LinearKeyDim = 1 << 62 }, "2 × linear_num_key_heads × linear_key_head_dim"},
		{func(c *Config) { c.LinearValueDim = 1 << 62 }, "linear_num_value_heads × linear_value_head_dim"},
		{func(c *Config) { c.LinearValueDim = 1 << 30 }, "conv dim 2·linear_num_key_heads·linear_key_head_dim + linear_num_value_heads·linear_value_head_dim = 64 + 4294967296 does not fit"},
		{func(c *Config) { c.LinearValueDim, c.ConvKernel = 1<<20, 1<<50 }, "conv1d bytes"},
		{func(c *Config) { c.LinearValueDim, c.Hidden, c.MoEIntermediate, c.Vocab = 1<<28, 1<<36, 1, 1 }, "in_proj_qkv bytes"},
	} {
		c := ok
		c.Sparse = append([]bool(nil), ok.Sparse...)
		tc.edit(&c)
		for i := range c.Sparse {
			c.Sparse[i] = true
		}
		if err := c.checkSizes(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkSizes: %v, want an error containing %q", err, tc.want)
		}
	}
}

func TestCheckedProduct(t *testing.T) {
	for _, tc := range []struct {
		dims []int64
		want int64
		ok   bool
	}{
		{nil, 1, true},
		{[]int64{3, 1 << 20, 1 << 16, 4}, 3 << 38, true},
		{[]int64{1 << 31, 1 << 31, 2}, 0, false}, // 2^63 overflows
		{[]int64{1 << 31, 1 << 31, 1}, 1 << 62, true},
		{[]int64{0, -1}, 0, false},
		{[]int64{1 << 32, 1 << 32}, 0, false},
		{[]int64{3037000500, 3037000500}, 0, false}, // just past √(2^63)
		{[]int64{3037000499, 3037000499}, 3037000499 * 3037000499, true},
	} {
		got, ok := checkedProduct(tc.dims...)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("checkedProduct(%v) = %d, %v; want %d, %v", tc.dims, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := addInt64(1<<62, 1<<62); ok {
		t.Error("addInt64(2^62, 2^62) did not overflow")
	}
}

// TestConfigStrictJSON: config.json is read with the strict JSON rules
// (jnf.DecodeForeignJSON): a field given twice, or in two cases, or bytes
// that are not UTF-8, are errors naming the field, not "the last one wins".
func TestConfigStrictJSON(t *testing.T) {
	base := `"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8`
	if _, err := ParseConfig([]byte("{" + base + "}")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ json, want string }{
		{"{" + base + `,"num_hidden_layers":2}`, `duplicate object key "num_hidden_layers"`},
		{"{" + base + `,"NUM_HIDDEN_LAYERS":2}`, `differ only in case`},
		{"{" + base + ",\"torch_dtype\":\"bf\xff\"}", "not valid UTF-8"},
		{`{"model_type":"qwen3_5_moe","text_config":{"hidden_size":64,"hidden_size":32}}`, `duplicate object key "text_config"."hidden_size"`},
	} {
		if _, err := ParseConfig([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		}
	}
}

func TestQuantConfig(t *testing.T) {
	text := `"model_type":"qwen3_5_moe_text","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8,"shared_expert_intermediate_size":48,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,"linear_value_head_dim":16`
	top := func(q string) string {
		return `{"model_type":"qwen3_5_moe","text_config":{` + text + `},"quantization_config":` + q + `}`
	}
	inText := func(q string) string {
		return `{"model_type":"qwen3_5_moe","text_config":{` + text + `,"quantization_config":` + q + `}}`
	}
	flat := func(q string) string {
		return `{"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":256,"num_experts_per_tok":2,"moe_intermediate_size":32,"num_experts":8,"quantization_config":` + q + `}`
	}
	official := `{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128],"modules_to_not_convert":["lm_head","model.layers.0.mlp.gate"]}`
	want := Quant{Method: "fp8", Format: "e4m3", Activation: "dynamic", BlockN: 128, BlockK: 128, NotConverted: []string{"lm_head", "model.layers.0.mlp.gate"}}
	for i, tc := range []struct{ json, wantErr string }{
		{top(official), ""},
		{inText(official), ""},
		{flat(official), ""},
		{`{"model_type":"qwen3_5_moe","text_config":{` + text + `,"quantization_config":` + official + `},"quantization_config":` + official + `}`, ""},
		// Qwen3-30B-A3B-FP8 has no fmt: e4m3 is the only format of quant_method fp8.
		{flat(`{"activation_scheme":"dynamic","quant_method":"fp8","weight_block_size":[128,128],"modules_to_not_convert":["lm_head","model.layers.0.mlp.gate"]}`), ""},
		{flat(`{"quant_method":"awq","bits":4}`), `quantization_config.quant_method = "awq": Tarfa runs block-FP8 (fp8, e4m3) checkpoints only`},
		{flat(`{"quant_method":"gptq"}`), `quant_method = "gptq"`},
		{flat(`{"quant_method":"mxfp4"}`), `quant_method = "mxfp4"`},
		{flat(`{"quant_method":"compressed-tensors","format":"float-quantized"}`), `quant_method = "compressed-tensors": Tarfa runs block-FP8`},
		{flat(`{"fmt":"e4m3","weight_block_size":[128,128]}`), "quantization_config.quant_method is missing"},
		{flat(`{"quant_method":"fp8","fmt":"e5m2","weight_block_size":[128,128]}`), `quantization_config.fmt = "e5m2"`},
		{flat(`{"quant_method":"fp8","activation_scheme":"static","weight_block_size":[128,128]}`), `quantization_config.activation_scheme = "static": Tarfa runs dynamic activation scales only`},
		{flat(`{"quant_method":"fp8"}`), "quantization_config.weight_block_size is missing"},
		{flat(`{"quant_method":"fp8","weight_block_size":null}`), "quantization_config.weight_block_size is missing"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128]}`), "quantization_config.weight_block_size = [128]: want two integers"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128,128,1]}`), "want two integers"},
		{flat(`{"quant_method":"fp8","weight_block_size":[0,128]}`), "quantization_config.weight_block_size[0] = 0: want an integer in [1, 4096]"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128,4097]}`), "weight_block_size[1] = 4097"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128,1.5]}`), "weight_block_size[1] = 1.5"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128,128],"scale_fmt":"ue8m0"}`), "quantization_config.scale_fmt: a field Tarfa does not know"},
		{flat(`{"quant_method":"fp8","weight_block_size":[128,128],"modules_to_not_convert":"lm_head"}`), "modules_to_not_convert: want a list of strings"},
		{flat(`"fp8"`), "quantization_config: want an object"},
		{inText(`{"quant_method":"awq"}`), `text_config.quantization_config.quant_method = "awq"`},
		{`{"model_type":"qwen3_5_moe","text_config":{` + text + `,"quantization_config":` + official + `},"quantization_config":{"quant_method":"fp8","weight_block_size":[64,128]}}`, "quantization_config and text_config.quantization_config differ"},
	} {
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
		if c.Quant == nil || !sameQuant(c.Quant, &want) {
			t.Errorf("case %d: quant %+v, want %+v", i, c.Quant, want)
		}
	}
}

// TestUnquantisedConfigUnchanged: a config without quantization_config (or
// with a null one) parses to what it did before there was one to read.
func TestUnquantisedConfigUnchanged(t *testing.T) {
	for _, d := range []string{"qwen3moe-dev-a/checkpoint", "qwen35moe-dev-c/checkpoint", "qwen35moe-dev-c/checkpoint-official"} {
		c, err := ReadConfig(fixtures + d)
		if err != nil {
			t.Fatal(err)
		}
		if c.Quant != nil || c.Precision() != "unquantised" {
			t.Errorf("%s: quant %+v, precision %q", d, c.Quant, c.Precision())
		}
		var m map[string]any
		b, _ := os.ReadFile(fixtures + d + "/config.json")
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m["quantization_config"] = nil
		b, _ = json.Marshal(m)
		n, err := ParseConfig(b)
		if err != nil || !reflect.DeepEqual(c, n) {
			t.Errorf("%s: with quantization_config null: %v, %+v vs %+v", d, err, n, c)
		}
	}
}
