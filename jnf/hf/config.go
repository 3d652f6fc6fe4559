// Package hf reads Hugging Face checkpoints of the supported MoE families:
// config.json (flat or multimodal with text_config), model.safetensors or a
// sharded model.safetensors.index.json, and the mapping of checkpoint tensor
// names to Tarfa's canonical names, including per-expert (2D) and fused (3D)
// expert storage. See ../../shared/MODEL_SPEC.md §A–B for the rules.
package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Arch is the text architecture Tarfa runs.
type Arch string

const (
	Qwen3MoE  Arch = "qwen3_moe"   // Qwen3MoeForCausalLM
	Qwen35MoE Arch = "qwen3_5_moe" // Qwen3.5-MoE text tower (qwen3_5_moe and qwen3_5_moe_text)
)

// SupportedModelTypes lists the config.json model_type values Tarfa accepts.
var SupportedModelTypes = []string{"qwen3_moe", "qwen3_5_moe", "qwen3_5_moe_text"}

// LayerType is the token-mixing kind of a decoder layer.
type LayerType string

const (
	FullAttention   LayerType = "full_attention"
	LinearAttention LayerType = "linear_attention" // Gated DeltaNet
)

// Config is the normalised text-model configuration: every default applied,
// every alias resolved, every derived dimension computed. The engine reads
// only this, never config.json.
type Config struct {
	Arch      Arch   `json:"arch"`
	ModelType string `json:"model_type"` // as found in config.json (top level)
	Nested    bool   `json:"nested"`     // text fields came from text_config

	Hidden     int     `json:"hidden_size"`
	Layers     int     `json:"num_hidden_layers"`
	Heads      int     `json:"num_attention_heads"`
	KVHeads    int     `json:"num_key_value_heads"`
	HeadDim    int     `json:"head_dim"`
	Vocab      int     `json:"vocab_size"`
	RMSNormEps float32 `json:"rms_norm_eps"`
	Tied       bool    `json:"tie_word_embeddings"`

	Experts         int  `json:"num_experts"`
	TopK            int  `json:"num_experts_per_tok"`
	MoEIntermediate int  `json:"moe_intermediate_size"`
	NormTopKProb    bool `json:"norm_topk_prob"` // always true for Qwen3.5
	// SharedIntermediate is the shared expert width (Qwen3.5); 0 = no shared expert.
	SharedIntermediate int `json:"shared_expert_intermediate_size"`
	// DenseIntermediate is the width of dense MLP layers (Qwen3-MoE mlp_only_layers).
	DenseIntermediate int `json:"intermediate_size"`

	LayerTypes []LayerType `json:"layer_types"` // per layer
	Sparse     []bool      `json:"sparse"`      // per layer: MoE (true) or dense MLP

	RopeTheta           float64 `json:"rope_theta"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
	RotaryDim           int     `json:"rotary_dim"` // R, even, <= HeadDim

	// Gated DeltaNet (Qwen3.5 linear-attention layers).
	LinearKeyHeads   int `json:"linear_num_key_heads"`
	LinearValueHeads int `json:"linear_num_value_heads"`
	LinearKeyDim     int `json:"linear_key_head_dim"`
	LinearValueDim   int `json:"linear_value_head_dim"`
	ConvKernel       int `json:"linear_conv_kernel_dim"`

	MaxPositions int   `json:"max_position_embeddings"`
	BOS          []int `json:"bos_token_id,omitempty"`
	EOS          []int `json:"eos_token_id,omitempty"`

	// Quant is the checkpoint's quantization_config, nil for an
	// unquantised checkpoint.
	Quant *Quant `json:"quantization,omitempty"`
}

// Quant is a block-FP8 checkpoint's quantization_config ("fine-grained
// FP8": quant_method fp8, fmt e4m3, dynamic activation scales): each
// quantised matrix is F8_E4M3 with a companion weight_scale_inv tensor of
// one scale per BlockN×BlockK block. Which matrices are quantised is what
// the checkpoint stores; NotConverted is modules_to_not_convert as given.
type Quant struct {
	Method       string   `json:"quant_method"`      // "fp8"
	Format       string   `json:"fmt"`               // "e4m3"
	Activation   string   `json:"activation_scheme"` // "dynamic"
	BlockN       int      `json:"block_n"`           // weight_block_size[0]: rows (outputs) per block
	BlockK       int      `json:"block_k"`           // weight_block_size[1]: columns (inputs) per block
	NotConverted []string `json:"modules_to_not_convert,omitempty"`
}

// ExpertParams is the number of parameters of one routed expert (3·I·H);
// multiply by the dtype size for bytes. ParseConfig has checked that it
// fits an int64, with room for any dtype size.
func (c *Config) ExpertParams() int64 { return 3 * int64(c.MoEIntermediate) * int64(c.Hidden) }

// ConvDim is the Gated DeltaNet conv width 2·nk·dk + nv·dv (checked by
// ParseConfig).
func (c *Config) ConvDim() int {
	return 2*c.LinearKeyHeads*c.LinearKeyDim + c.LinearValueHeads*c.LinearValueDim
}

// NumSparseLayers counts MoE layers.
func (c *Config) NumSparseLayers() int {
	n := 0
	for _, s := range c.Sparse {
		if s {
			n++
		}
	}
	return n
}

// rawConfig holds every field we read; pointers distinguish absent from zero.
type rawConfig struct {
	ModelType          string          `json:"model_type"`
	TextConfig         json.RawMessage `json:"text_config"`
	Hidden             *int            `json:"hidden_size"`
	Layers             *int            `json:"num_hidden_layers"`
	Heads              *int            `json:"num_attention_heads"`
	KVHeads            *int            `json:"num_key_value_heads"`
	HeadDim            *int            `json:"head_dim"`
	Vocab              *int            `json:"vocab_size"`
	RMSNormEps         *float64        `json:"rms_norm_eps"`
	Tied               *bool           `json:"tie_word_embeddings"`
	AttentionBias      *bool           `json:"attention_bias"`
	HiddenAct          *string         `json:"hidden_act"`
	NumExperts         *int            `json:"num_experts"`
	NumLocalExperts    *int            `json:"num_local_experts"`
	TopK               *int            `json:"num_experts_per_tok"`
	MoEIntermediate    *int            `json:"moe_intermediate_size"`
	NormTopKProb       *bool           `json:"norm_topk_prob"`
	SharedIntermediate *int            `json:"shared_expert_intermediate_size"`
	Intermediate       *int            `json:"intermediate_size"`
	DecoderSparseStep  *int            `json:"decoder_sparse_step"`
	MLPOnlyLayers      []int           `json:"mlp_only_layers"`
	LayerTypes         []string        `json:"layer_types"`
	FullAttnInterval   *int            `json:"full_attention_interval"`
	RopeTheta          *float64        `json:"rope_theta"`
	RopeScaling        json.RawMessage `json:"rope_scaling"`
	RopeParameters     *struct {
		RopeType            *string  `json:"rope_type"`
		RopeTheta           *float64 `json:"rope_theta"`
		PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	} `json:"rope_parameters"`
	PartialRotaryFactor *float64        `json:"partial_rotary_factor"`
	LinearKeyHeads      *int            `json:"linear_num_key_heads"`
	LinearValueHeads    *int            `json:"linear_num_value_heads"`
	LinearKeyDim        *int            `json:"linear_key_head_dim"`
	LinearValueDim      *int            `json:"linear_value_head_dim"`
	ConvKernel          *int            `json:"linear_conv_kernel_dim"`
	MaxPositions        *int            `json:"max_position_embeddings"`
	UseSlidingWindow    *bool           `json:"use_sliding_window"`
	BOS                 json.RawMessage `json:"bos_token_id"`
	EOS                 json.RawMessage `json:"eos_token_id"`
	QuantizationConfig  json.RawMessage `json:"quantization_config"`
}

// ReadConfig reads and normalises DIR/config.json: a regular file (not a
// symbolic link, FIFO or device) of at most jnf.MaxConfigSize bytes.
func ReadConfig(dir string) (*Config, error) {
	d, err := newDirReader(dir, false)
	if err != nil {
		return nil, err
	}
	_, c, err := d.readConfig()
	return c, err
}

// ParseConfig normalises the bytes of a config.json. Every count and
// dimension must lie within the limits of limits.go, and every size derived
// from them must fit an int64; the error names the field, its value and the
// limit.
func ParseConfig(b []byte) (*Config, error) {
	var top rawConfig
	// Strict JSON (jnf.DecodeForeignJSON): a key given twice, or twice in
	// two cases, is an error, not "the last one wins".
	if err := jnf.DecodeForeignJSON(b, &top); err != nil {
		return nil, fmt.Errorf("config is not valid JSON: %v", err)
	}
	c := &Config{ModelType: top.ModelType}
	raw := top
	switch top.ModelType {
	case "qwen3_moe":
		c.Arch = Qwen3MoE
	case "qwen3_5_moe_text":
		c.Arch = Qwen35MoE
	case "qwen3_5_moe":
		c.Arch = Qwen35MoE
		if len(bytes.TrimSpace(top.TextConfig)) == 0 || string(bytes.TrimSpace(top.TextConfig)) == "null" {
			return nil, fmt.Errorf("model_type qwen3_5_moe needs a text_config object")
		}
		raw = rawConfig{}
		if err := jnf.DecodeForeignJSON(top.TextConfig, &raw); err != nil {
			return nil, fmt.Errorf("text_config: %v", err)
		}
		if raw.ModelType != "" && raw.ModelType != "qwen3_5_moe_text" {
			return nil, fmt.Errorf("text_config.model_type is %q, want qwen3_5_moe_text", raw.ModelType)
		}
		c.Nested = true
		if raw.Tied == nil {
			raw.Tied = top.Tied
		}
	case "":
		return nil, fmt.Errorf("config has no model_type (supported: %s)", strings.Join(SupportedModelTypes, ", "))
	default:
		return nil, fmt.Errorf("unsupported model_type %q (supported: %s)", top.ModelType, strings.Join(SupportedModelTypes, ", "))
	}
	if err := c.fill(&raw); err != nil {
		return nil, err
	}
	// quantization_config sits at the top level (transformers saves it on
	// the outer config of a multimodal model); inside text_config it is
	// accepted too, and given in both places it must say the same.
	q, err := parseQuant("quantization_config", top.QuantizationConfig)
	if err != nil {
		return nil, err
	}
	if c.Nested {
		qt, err := parseQuant("text_config.quantization_config", raw.QuantizationConfig)
		if err != nil {
			return nil, err
		}
		switch {
		case q != nil && qt != nil && !sameQuant(q, qt):
			return nil, fmt.Errorf("quantization_config and text_config.quantization_config differ")
		case q == nil:
			q = qt
		}
	}
	c.Quant = q
	return c, nil
}

// Quantization fields Tarfa reads; any other key of a quantization_config
// could change what the stored bytes mean (e.g. scale_fmt), so it is
// refused rather than skipped.
var quantKeys = []string{"quant_method", "fmt", "activation_scheme", "weight_block_size", "modules_to_not_convert"}

// MaxQuantBlock bounds each weight_block_size dimension.
const MaxQuantBlock = 4096

// parseQuant reads a quantization_config object (nil for an absent or null
// one). Only block FP8 is accepted: quant_method "fp8" (transformers'
// fine-grained FP8), fmt "e4m3" (absent: e4m3, the only format that
// quant_method stores, as in Qwen3-30B-A3B-FP8 whose config has no fmt),
// activation_scheme "dynamic" (absent: dynamic, transformers' default) and
// weight_block_size [bn, bk], two integers in [1, MaxQuantBlock].
func parseQuant(where string, raw json.RawMessage) (*Quant, error) {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || string(s) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := jnf.DecodeForeignJSON(s, &m); err != nil {
		return nil, fmt.Errorf("%s: want an object: %v", where, err)
	}
	str := func(key string) (string, bool, error) {
		v, ok := m[key]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return "", false, nil
		}
		var x string
		if err := json.Unmarshal(v, &x); err != nil {
			return "", false, fmt.Errorf("%s.%s = %s: want a string", where, key, v)
		}
		return x, true, nil
	}
	const only = "Tarfa runs block-FP8 (fp8, e4m3) checkpoints only"
	method, ok, err := str("quant_method")
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("%s.quant_method is missing: %s", where, only)
	case method != "fp8":
		return nil, fmt.Errorf("%s.quant_method = %q: %s", where, method, only)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(quantKeys, k) {
			return nil, fmt.Errorf("%s.%s: a field Tarfa does not know (it reads %s); refusing rather than guess what it changes", where, k, strings.Join(quantKeys, ", "))
		}
	}
	q := &Quant{Method: method, Format: "e4m3", Activation: "dynamic"}
	if f, ok, err := str("fmt"); err != nil {
		return nil, err
	} else if ok && f != "e4m3" {
		return nil, fmt.Errorf("%s.fmt = %q: %s", where, f, only)
	}
	if a, ok, err := str("activation_scheme"); err != nil {
		return nil, err
	} else if ok && a != "dynamic" {
		return nil, fmt.Errorf("%s.activation_scheme = %q: Tarfa runs dynamic activation scales only", where, a)
	}
	bs, ok := m["weight_block_size"]
	if !ok || string(bytes.TrimSpace(bs)) == "null" {
		return nil, fmt.Errorf("%s.weight_block_size is missing: Tarfa runs block-FP8 checkpoints, with one scale per [bn, bk] block", where)
	}
	var blk []json.Number
	dec := json.NewDecoder(bytes.NewReader(bs))
	dec.UseNumber()
	if err := dec.Decode(&blk); err != nil || len(blk) != 2 {
		return nil, fmt.Errorf("%s.weight_block_size = %s: want two integers [bn, bk]", where, bytes.TrimSpace(bs))
	}
	for i, dst := range []*int{&q.BlockN, &q.BlockK} {
		v, err := strconv.ParseInt(blk[i].String(), 10, 64)
		if err != nil || v < 1 || v > MaxQuantBlock {
			return nil, fmt.Errorf("%s.weight_block_size[%d] = %s: want an integer in [1, %d]", where, i, blk[i], MaxQuantBlock)
		}
		*dst = int(v)
	}
	if v, ok := m["modules_to_not_convert"]; ok && string(bytes.TrimSpace(v)) != "null" {
		if err := json.Unmarshal(v, &q.NotConverted); err != nil {
			return nil, fmt.Errorf("%s.modules_to_not_convert: want a list of strings: %v", where, err)
		}
	}
	return q, nil
}

func sameQuant(a, b *Quant) bool {
	return a.Method == b.Method && a.Format == b.Format && a.Activation == b.Activation &&
		a.BlockN == b.BlockN && a.BlockK == b.BlockK && slices.Equal(a.NotConverted, b.NotConverted)
}

// Precision describes the checkpoint's weights in words, for inspect and
// reports: "unquantised" for a checkpoint of float weights (BF16, F32),
// or "fp8 (e4m3, 128×128 blocks, dynamic activation scales)".
func (c *Config) Precision() string {
	if c.Quant == nil {
		return "unquantised"
	}
	return c.Quant.String()
}

// String is the block-FP8 scheme in words.
func (q *Quant) String() string {
	return fmt.Sprintf("%s (%s, %d×%d blocks, %s activation scales)", q.Method, q.Format, q.BlockN, q.BlockK, q.Activation)
}

// fields reads the integer fields of one config object; prefix is
// "text_config." for the text fields of a multimodal config.
type fields struct{ prefix string }

// need returns a required field, which must lie in [1, max].
func (f fields) need(name string, p *int, max int) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("config field %s%s is missing", f.prefix, name)
	}
	return f.check(name, *p, 1, max)
}

// opt returns an optional field: def when absent, else a value in [lo, max].
func (f fields) opt(name string, p *int, def, lo, max int) (int, error) {
	if p == nil {
		return def, nil
	}
	return f.check(name, *p, lo, max)
}

func (f fields) check(name string, v, lo, max int) (int, error) {
	switch {
	case v < lo && lo == 1:
		return 0, fmt.Errorf("config field %s%s = %d, want > 0", f.prefix, name, v)
	case v < lo:
		return 0, fmt.Errorf("config field %s%s = %d, want >= %d", f.prefix, name, v, lo)
	case v > max:
		return 0, fmt.Errorf("%s%s = %d, more than the %d Tarfa accepts", f.prefix, name, v, max)
	}
	return v, nil
}

// derived checks that a size formed from config values fits an int64 and,
// when max > 0, is at most max.
func derived(what string, max int64, dims ...int64) (int64, error) {
	p, ok := checkedProduct(dims...)
	if !ok {
		return 0, fmt.Errorf("%s = %s overflows a 64-bit integer", what, product(dims))
	}
	if max > 0 && p > max {
		return 0, fmt.Errorf("%s = %s = %d, more than the %d Tarfa accepts", what, product(dims), p, max)
	}
	return p, nil
}

func product(dims []int64) string {
	s := make([]string, len(dims))
	for i, d := range dims {
		s[i] = fmt.Sprint(d)
	}
	return strings.Join(s, "×")
}

func (c *Config) fill(r *rawConfig) error {
	var f fields
	if c.Nested {
		f.prefix = "text_config."
	}
	var err error
	for _, fl := range []struct {
		name string
		p    *int
		max  int
		dst  *int
	}{
		{"hidden_size", r.Hidden, MaxHidden, &c.Hidden},
		{"num_hidden_layers", r.Layers, MaxLayers, &c.Layers},
		{"num_attention_heads", r.Heads, MaxHeads, &c.Heads},
		{"vocab_size", r.Vocab, MaxVocab, &c.Vocab},
		{"num_experts_per_tok", r.TopK, MaxExperts, &c.TopK},
		{"moe_intermediate_size", r.MoEIntermediate, MaxIntermediate, &c.MoEIntermediate},
	} {
		if *fl.dst, err = f.need(fl.name, fl.p, fl.max); err != nil {
			return err
		}
	}
	if c.KVHeads, err = f.opt("num_key_value_heads", r.KVHeads, c.Heads, 1, MaxHeads); err != nil {
		return err
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim, err = f.opt("head_dim", r.HeadDim, 0, 1, MaxHeadDim); err != nil {
		return err
	}
	if c.HeadDim == 0 {
		if c.Hidden%c.Heads != 0 {
			return fmt.Errorf("head_dim absent and hidden_size %d not divisible by num_attention_heads %d", c.Hidden, c.Heads)
		}
		c.HeadDim = c.Hidden / c.Heads
	}
	eps := 1e-6
	if r.RMSNormEps != nil {
		eps = *r.RMSNormEps
	}
	if !(eps > 0) || eps > 1 {
		return fmt.Errorf("rms_norm_eps = %g, want 0 < eps <= 1", eps)
	}
	c.RMSNormEps = float32(eps)
	if r.Tied != nil {
		c.Tied = *r.Tied
	}
	if r.AttentionBias != nil && *r.AttentionBias {
		return fmt.Errorf("attention_bias = true is not supported (no released checkpoint of these families uses it)")
	}
	if r.HiddenAct != nil && *r.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act = %q, only silu is supported", *r.HiddenAct)
	}
	if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
		return fmt.Errorf("use_sliding_window = true is not supported")
	}

	// Expert count: num_experts (hub) or num_local_experts (transformers 5.x saves).
	switch {
	case r.NumExperts != nil && r.NumLocalExperts != nil && *r.NumExperts != *r.NumLocalExperts:
		return fmt.Errorf("num_experts %d and num_local_experts %d disagree", *r.NumExperts, *r.NumLocalExperts)
	case r.NumExperts != nil:
		c.Experts, err = f.need("num_experts", r.NumExperts, MaxExperts)
	case r.NumLocalExperts != nil:
		c.Experts, err = f.need("num_local_experts", r.NumLocalExperts, MaxExperts)
	default:
		err = fmt.Errorf("config has no positive num_experts / num_local_experts")
	}
	if err != nil {
		return err
	}
	if c.TopK > c.Experts {
		return fmt.Errorf("num_experts_per_tok %d > number of experts %d", c.TopK, c.Experts)
	}

	// RoPE.
	c.RopeTheta = 10000.0
	ropeType := "default"
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	if s := bytes.TrimSpace(r.RopeScaling); len(s) > 0 && string(s) != "null" {
		return fmt.Errorf("rope_scaling = %s is not supported (only default RoPE)", s)
	}
	var prf *float64
	if rp := r.RopeParameters; rp != nil {
		if rp.RopeTheta != nil {
			c.RopeTheta = *rp.RopeTheta
		}
		if rp.RopeType != nil {
			ropeType = *rp.RopeType
		}
		prf = rp.PartialRotaryFactor
	}
	if ropeType != "default" {
		return fmt.Errorf("rope_type %q is not supported (only \"default\")", ropeType)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope_theta = %g, want > 0", c.RopeTheta)
	}
	if prf == nil {
		prf = r.PartialRotaryFactor
	}
	c.PartialRotaryFactor = 1.0
	if c.Arch == Qwen35MoE {
		c.PartialRotaryFactor = 0.25
	}
	if prf != nil {
		c.PartialRotaryFactor = *prf
	}
	if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
		return fmt.Errorf("partial_rotary_factor = %g, want (0, 1]", c.PartialRotaryFactor)
	}
	c.RotaryDim = int(float64(c.HeadDim) * c.PartialRotaryFactor)
	if c.RotaryDim <= 0 || c.RotaryDim%2 != 0 {
		return fmt.Errorf("rotary dim int(head_dim %d × partial_rotary_factor %g) = %d, want a positive even number", c.HeadDim, c.PartialRotaryFactor, c.RotaryDim)
	}
	if c.MaxPositions, err = f.opt("max_position_embeddings", r.MaxPositions, 0, 0, MaxPositions); err != nil {
		return err
	}

	c.LayerTypes = make([]LayerType, c.Layers)
	c.Sparse = make([]bool, c.Layers)
	switch c.Arch {
	case Qwen3MoE:
		if len(r.LayerTypes) > 0 {
			for i, t := range r.LayerTypes {
				if t != string(FullAttention) {
					return fmt.Errorf("layer_types[%d] = %q: qwen3_moe has only full_attention layers", i, t)
				}
			}
		}
		if r.NormTopKProb != nil {
			c.NormTopKProb = *r.NormTopKProb
		}
		step := opt(r.DecoderSparseStep, 1)
		if step <= 0 {
			return fmt.Errorf("decoder_sparse_step = %d, want > 0", step)
		}
		dense := map[int]bool{}
		for _, l := range r.MLPOnlyLayers {
			if l < 0 || l >= c.Layers {
				return fmt.Errorf("mlp_only_layers contains %d, outside [0,%d)", l, c.Layers)
			}
			dense[l] = true
		}
		for i := range c.Layers {
			c.LayerTypes[i] = FullAttention
			c.Sparse[i] = !dense[i] && (i+1)%step == 0
		}
		if c.NumSparseLayers() < c.Layers {
			if c.DenseIntermediate, err = f.need("intermediate_size", r.Intermediate, MaxIntermediate); err != nil {
				return fmt.Errorf("%w (needed by dense layers)", err)
			}
		}
	case Qwen35MoE:
		c.NormTopKProb = true // unconditional renormalisation (MODEL_SPEC C.5.1)
		if len(r.LayerTypes) > 0 {
			if len(r.LayerTypes) != c.Layers {
				return fmt.Errorf("layer_types has %d entries, num_hidden_layers is %d", len(r.LayerTypes), c.Layers)
			}
			for i, t := range r.LayerTypes {
				switch LayerType(t) {
				case FullAttention, LinearAttention:
					c.LayerTypes[i] = LayerType(t)
				default:
					return fmt.Errorf("layer_types[%d] = %q, want full_attention or linear_attention", i, t)
				}
			}
		} else {
			iv := opt(r.FullAttnInterval, 4)
			if iv <= 0 {
				return fmt.Errorf("full_attention_interval = %d, want > 0", iv)
			}
			for i := range c.Layers {
				c.LayerTypes[i] = LinearAttention
				if (i+1)%iv == 0 {
					c.LayerTypes[i] = FullAttention
				}
			}
		}
		for i := range c.Sparse {
			c.Sparse[i] = true
		}
		if c.SharedIntermediate, err = f.need("shared_expert_intermediate_size", r.SharedIntermediate, MaxIntermediate); err != nil {
			return err
		}
		hasLinear := false
		for _, t := range c.LayerTypes {
			hasLinear = hasLinear || t == LinearAttention
		}
		if hasLinear {
			for _, fl := range []struct {
				name string
				p    *int
				max  int
				dst  *int
			}{
				{"linear_num_key_heads", r.LinearKeyHeads, MaxHeads, &c.LinearKeyHeads},
				{"linear_num_value_heads", r.LinearValueHeads, MaxHeads, &c.LinearValueHeads},
				{"linear_key_head_dim", r.LinearKeyDim, MaxHeadDim, &c.LinearKeyDim},
				{"linear_value_head_dim", r.LinearValueDim, MaxHeadDim, &c.LinearValueDim},
			} {
				if *fl.dst, err = f.need(fl.name, fl.p, fl.max); err != nil {
					return err
				}
			}
			if c.ConvKernel, err = f.opt("linear_conv_kernel_dim", r.ConvKernel, 4, 1, MaxConvKernel); err != nil {
				return err
			}
			if c.LinearValueHeads%c.LinearKeyHeads != 0 {
				return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearValueHeads, c.LinearKeyHeads)
			}
		}
	}
	if err := c.checkSizes(); err != nil {
		return err
	}
	if c.BOS, err = tokenIDs("bos_token_id", r.BOS); err != nil {
		return err
	}
	if c.EOS, err = tokenIDs("eos_token_id", r.EOS); err != nil {
		return err
	}
	return nil
}

func opt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// checkSizes forms, with overflow checks, every size the checkpoint's
// tensors are expected to have (in bytes, at the largest float dtype) and
// the totals over all layers and experts, and bounds the routed experts.
func (c *Config) checkSizes() error {
	H, V, I := int64(c.Hidden), int64(c.Vocab), int64(c.MoEIntermediate)
	E, moe := int64(c.Experts), int64(c.NumSparseLayers())
	if _, err := derived("routed experts (MoE layers × num_experts)", MaxRoutedExperts, moe, E); err != nil {
		return err
	}
	if _, err := derived("embedding bytes (vocab_size × hidden_size × 4)", 0, V, H, maxDTypeSize); err != nil {
		return err
	}
	q := int64(1)
	if c.Arch == Qwen35MoE {
		q = 2 // per-head [query | gate]
	}
	if _, err := derived("q_proj bytes", 0, q, int64(c.Heads), int64(c.HeadDim), H, maxDTypeSize); err != nil {
		return err
	}
	per, err := derived("bytes per expert (3 × moe_intermediate_size × hidden_size × 4)", 0, 3, I, H, maxDTypeSize)
	if err != nil {
		return err
	}
	// Fused storage [E, 2I, H]: the offset of the last expert's bytes.
	if _, err := derived("fused expert tensor bytes (num_experts × 2 × moe_intermediate_size × hidden_size × 4)", 0, E, 2, I, H, maxDTypeSize); err != nil {
		return err
	}
	if _, err := derived("routed expert bytes (MoE layers × num_experts × bytes per expert)", 0, moe, E, per); err != nil {
		return err
	}
	for _, w := range []struct {
		name string
		i    int
	}{{"shared_expert_intermediate_size", c.SharedIntermediate}, {"intermediate_size", c.DenseIntermediate}} {
		if _, err := derived(w.name+" MLP bytes (3 × "+w.name+" × hidden_size × 4)", 0, 3, int64(w.i), H, maxDTypeSize); err != nil {
			return err
		}
	}
	if c.LinearKeyHeads > 0 {
		k, err := derived("2 × linear_num_key_heads × linear_key_head_dim", 0, 2, int64(c.LinearKeyHeads), int64(c.LinearKeyDim))
		if err != nil {
			return err
		}
		v, err := derived("linear_num_value_heads × linear_value_head_dim", 0, int64(c.LinearValueHeads), int64(c.LinearValueDim))
		if err != nil {
			return err
		}
		conv, ok := addInt64(k, v)
		if !ok || conv > math.MaxInt32 {
			return fmt.Errorf("conv dim 2·linear_num_key_heads·linear_key_head_dim + linear_num_value_heads·linear_value_head_dim = %d + %d does not fit a 32-bit integer", k, v)
		}
		if _, err := derived("conv1d bytes (conv dim × linear_conv_kernel_dim × 4)", 0, conv, int64(c.ConvKernel), maxDTypeSize); err != nil {
			return err
		}
		if _, err := derived("in_proj_qkv bytes (conv dim × hidden_size × 4)", 0, conv, H, maxDTypeSize); err != nil {
			return err
		}
	}
	return nil
}

// tokenIDs accepts null, an integer or a list of integers.
func tokenIDs(name string, raw json.RawMessage) ([]int, error) {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || string(s) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(s, &one) == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(s, &many); err != nil {
		return nil, fmt.Errorf("config field %s = %s: want an integer or a list of integers", name, s)
	}
	return many, nil
}
