// Package synth writes complete Hugging Face-layout checkpoints (config.json,
// sharded safetensors with model.safetensors.index.json) of the supported MoE
// families with deterministic pseudo-random weights: tiny models for tests
// and the embedded default model, and models with the real per-layer shapes
// of Qwen3.5-122B-A10B / Qwen3-30B-A3B for I/O benchmarks.
//
// The bytes depend only on the options, not on the build: every product
// that reaches an addition is rounded explicitly, so that no GOARCH or
// GOAMD64 level fuses it into a multiply-add (canon.TestNoFMA), and
// logarithms come from canon.Log rather than math.Log, whose bits differ
// between architectures. TestBuildInvariance compares the GOAMD64=v1 and
// v3 builds (and, with TARFA_TEST_QEMU=1, five other architectures).
package synth

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/internal/outdir"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// Options selects what to write.
type Options struct {
	Arch   hf.Arch // hf.Qwen3MoE or hf.Qwen35MoE
	Preset string  // "tiny", "real" (the real per-layer shapes: Qwen3.5-122B-A10B or Qwen3-30B-A3B)
	Seed   uint64
	// Layout is hf.LayoutPerExpert (default) or hf.LayoutFused. Fused also
	// writes the multimodal release layout (text_config, the
	// model.language_model. prefix, F32 A_log and norm, and mtp.*/visual.*
	// tensors that a text engine must ignore), like the official Qwen3.5 releases.
	Layout string
	// Layers overrides the layer count (0 = the preset's).
	Layers int
	// Vocab overrides the vocabulary size (0 = the preset's).
	Vocab int
	// ShardBytes is the shard size limit (0 = the preset's).
	ShardBytes int64
	// Extra files written beside the weights (e.g. tokenizer.json).
	Extra map[string][]byte
	// Set overrides text-config fields after the preset (e.g.
	// "mlp_only_layers": [1], "tie_word_embeddings": true, "layer_types":
	// [...]): every knob of the general config can be exercised. The tensors
	// written follow the resulting config.
	Set map[string]any
	// AttnStd is the standard deviation of the attention weights (full
	// and linear attention; 0: 0.02, the Hugging Face initializer_range,
	// as every other projection). Larger values let attention carry more
	// of the context into the last position, so that the output depends
	// visibly on the whole prompt (the embedded default model), not mostly
	// on the last token.
	AttnStd float32
	// Routing is "" or RoutingUniform (random routers: near-uniform
	// routing, the bytes of every earlier synth), or RoutingLocal:
	// routing with the locality of real models (see RoutingLocal). The
	// checkpoint is an ordinary one either way; only values differ.
	Routing string
	// DType is "" or DTypeBF16 (the BF16 checkpoint), or DTypeFP8: the
	// same checkpoint with its quantised matrices (fp8Quantised) in
	// block FP8 as Qwen's FP8 releases store them, each F8_E4M3 code the
	// publisher's quantisation of the BF16 value it replaces. FP8 needs
	// the per-expert layout (the layout of the FP8 releases).
	DType string
	// FP8Block is the weight_block_size [bn, bk] (zero: DefaultFP8Block).
	FP8Block [2]int
	// FP8ScaleDType is the dtype of the weight_scale_inv tensors: "" (F32)
	// or jnf.F32 or jnf.BF16.
	FP8ScaleDType jnf.DType
}

// The routings of Options.Routing.
const (
	RoutingUniform = "uniform"
	// RoutingLocal gives routing the locality real models have, by their
	// weights alone. The token embeddings are localEmbedScale times
	// larger, so the residual stream changes little from one layer to the
	// next (the next layer's router applied to this layer's input names
	// most of what it will choose), and every embedding row carries one
	// shared ±localShared direction u that the router rows of
	// top-k/2 experts of each layer (a different set each layer) align
	// with (localRouterBias·u): those experts win for every token, the
	// other half of each token's experts vary with the token.
	RoutingLocal = "local"
)

// The constants of RoutingLocal. With hidden size H, routers of spread
// 0.1 and embedding rows of RMS √(localEmbedScale² + localShared²), the hot
// experts' logits rise by localRouterBias·localShared·√H / (0.1·√(…)),
// about 4 standard deviations of the random ones' at H = 3072.
const (
	localEmbedScale = 64
	localShared     = 16
	localRouterBias = 0.03
)

type shape = []int64

// preset returns the raw config fields for arch/preset.
func preset(o Options) (map[string]any, int64, error) {
	var c map[string]any
	var shard int64
	switch {
	case o.Arch == hf.Qwen3MoE && o.Preset == "tiny":
		c = map[string]any{"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
			"vocab_size": 512, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 96,
			"norm_topk_prob": true, "mlp_only_layers": []int{}, "decoder_sparse_step": 1, "max_position_embeddings": 4096,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}
		shard = 96 << 10
	case o.Arch == hf.Qwen3MoE && o.Preset == "real": // Qwen3-30B-A3B
		c = map[string]any{"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
			"vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
			"norm_topk_prob": true, "mlp_only_layers": []int{}, "decoder_sparse_step": 1, "max_position_embeddings": 40960,
			"rope_theta": 1000000.0, "rope_scaling": nil}
		shard = 4 << 30
	case o.Arch == hf.Qwen35MoE && o.Preset == "tiny":
		c = map[string]any{"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
			"vocab_size": 512, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
			"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
			"linear_conv_kernel_dim": 4, "full_attention_interval": 4, "max_position_embeddings": 4096, "partial_rotary_factor": 0.25,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}
		shard = 96 << 10
	case o.Arch == hf.Qwen35MoE && o.Preset == "real": // Qwen3.5-122B-A10B
		c = map[string]any{"hidden_size": 3072, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
			"vocab_size": 248320, "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024,
			"linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
			"linear_conv_kernel_dim": 4, "full_attention_interval": 4, "max_position_embeddings": 262144, "partial_rotary_factor": 0.25,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
				"mrope_section": []int{11, 11, 10}, "mrope_interleaved": true}}
		shard = 4 << 30
	default:
		return nil, 0, fmt.Errorf("no preset %q for arch %q (presets: tiny, real; archs: qwen3_moe, qwen3_5_moe)", o.Preset, o.Arch)
	}
	c["rms_norm_eps"] = 1e-6
	c["tie_word_embeddings"] = false
	c["attention_bias"] = false
	c["hidden_act"] = "silu"
	c["bos_token_id"] = nil
	if o.Layers > 0 {
		c["num_hidden_layers"] = o.Layers
	}
	if o.Vocab > 0 {
		c["vocab_size"] = o.Vocab
	}
	if o.ShardBytes > 0 {
		shard = o.ShardBytes
	}
	if o.DType == DTypeFP8 {
		c["quantization_config"] = quantizationConfig(o.fp8Block())
	}
	for k, v := range o.Set {
		c[k] = v
	}
	return c, shard, nil
}

type tensorSpec struct {
	name  string // as stored
	dtype jnf.DType
	shape shape
	init  initKind
	scale float32
	// shared, if set, is added to the rows it names (RoutingLocal).
	shared *sharedDir
	// fp8, if set, makes this the F8_E4M3 weight (or, with fp8Scale,
	// the weight_scale_inv) of a quantised matrix (DTypeFP8).
	fp8      *fp8Quant
	fp8Scale bool
}

// sharedDir is a direction added to some rows of a matrix: row r gets
// scale·u if rows is nil or rows[r].
type sharedDir struct {
	u     []float32 // a row's length
	scale float32
	rows  []bool
}

type initKind int

const (
	initNormal  initKind = iota // uniform with the given standard deviation
	initConst                   // every element = scale
	initNormOff                 // small values around 0 (zero-centred norms)
	initALog                    // log of uniform [1, 16)
)

// Config returns the config.json bytes Write would produce, and their
// normalised form.
func Config(o Options) ([]byte, *hf.Config, error) {
	if o.Layout == "" {
		o.Layout = hf.LayoutPerExpert
	}
	b, c, _, err := config(o)
	return b, c, err
}

func config(o Options) ([]byte, *hf.Config, int64, error) {
	raw, shardLimit, err := preset(o)
	if err != nil {
		return nil, nil, 0, err
	}
	fused := o.Layout == hf.LayoutFused
	var cfgJSON []byte
	switch {
	case o.Arch == hf.Qwen35MoE && fused:
		raw["model_type"] = "qwen3_5_moe_text"
		top := map[string]any{"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
			"text_config": raw, "vision_config": map[string]any{"model_type": "qwen3_5_moe", "depth": 1, "hidden_size": 16},
			"tie_word_embeddings": raw["tie_word_embeddings"]}
		cfgJSON, _ = json.MarshalIndent(top, "", "  ")
	case o.Arch == hf.Qwen35MoE:
		raw["model_type"] = "qwen3_5_moe_text"
		raw["architectures"] = []string{"Qwen3_5MoeForCausalLM"}
		cfgJSON, _ = json.MarshalIndent(raw, "", "  ")
	default:
		raw["model_type"] = "qwen3_moe"
		raw["architectures"] = []string{"Qwen3MoeForCausalLM"}
		cfgJSON, _ = json.MarshalIndent(raw, "", "  ")
	}
	cfg, err := hf.ParseConfig(cfgJSON)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("synth config: %w", err)
	}
	return cfgJSON, cfg, shardLimit, nil
}

// WriteOptions controls WriteContext.
type WriteOptions struct {
	// Progress, if set, is called as tensor data is written, with the bytes
	// written so far and the total (Size).
	Progress func(done, total int64)
	// Force writes into a directory holding files no synth recorded
	// writing (internal/outdir): those at the names synth writes are
	// replaced, the others left alone. Without it such a directory is
	// refused, naming the file.
	Force bool
	// NoShards writes everything but the safetensors shards (the index
	// still names them): Shards gives their content, for a conversion of
	// a checkpoint too large to write out.
	NoShards bool
}

// plan is a checked set of options with everything derived from them.
type plan struct {
	o       Options
	cfgJSON []byte
	cfg     *hf.Config
	shards  [][]tensorSpec
	bytes   int64 // tensor data
}

// fp8Block is the FP8 block size of o.
func (o Options) fp8Block() [2]int {
	if o.FP8Block == [2]int{} {
		return DefaultFP8Block
	}
	return o.FP8Block
}

// check refuses options that are out of range, naming the option.
func (o Options) check() error {
	switch {
	case o.Layout != hf.LayoutPerExpert && o.Layout != hf.LayoutFused:
		return fmt.Errorf("layout %q: want %s or %s", o.Layout, hf.LayoutPerExpert, hf.LayoutFused)
	case o.Layers < 0 || o.Layers > hf.MaxLayers:
		return fmt.Errorf("layers %d: want 1 to %d (0: the preset's)", o.Layers, hf.MaxLayers)
	case o.Vocab < 0 || o.Vocab > hf.MaxVocab:
		return fmt.Errorf("vocabulary %d: want 1 to %d (0: the preset's)", o.Vocab, hf.MaxVocab)
	case o.ShardBytes < 0:
		return fmt.Errorf("shard size %d bytes: want more than 0 (0: the preset's)", o.ShardBytes)
	case o.Routing != "" && o.Routing != RoutingUniform && o.Routing != RoutingLocal:
		return fmt.Errorf("routing %q: want %s or %s", o.Routing, RoutingUniform, RoutingLocal)
	case o.DType != "" && o.DType != DTypeBF16 && o.DType != DTypeFP8:
		return fmt.Errorf("dtype %q: want %s or %s", o.DType, DTypeBF16, DTypeFP8)
	case o.DType == DTypeFP8 && o.Layout == hf.LayoutFused:
		return fmt.Errorf("dtype %s with layout %s: the FP8 releases store experts per expert; use layout %s", DTypeFP8, hf.LayoutFused, hf.LayoutPerExpert)
	case o.DType != DTypeFP8 && (o.FP8Block != [2]int{} || o.FP8ScaleDType != ""):
		return fmt.Errorf("an FP8 block size or scale dtype without dtype %s", DTypeFP8)
	case o.FP8Block != [2]int{} && (o.FP8Block[0] < 1 || o.FP8Block[1] < 1 || o.FP8Block[0] > 1<<16 || o.FP8Block[1] > 1<<16):
		return fmt.Errorf("FP8 block size %dx%d: want 1 to 65536 each", o.FP8Block[0], o.FP8Block[1])
	case o.FP8ScaleDType != "" && o.FP8ScaleDType != jnf.F32 && o.FP8ScaleDType != jnf.BF16:
		return fmt.Errorf("FP8 scale dtype %s: want %s or %s", o.FP8ScaleDType, jnf.F32, jnf.BF16)
	}
	return nil
}

func newPlan(o Options) (*plan, error) {
	if o.Layout == "" {
		o.Layout = hf.LayoutPerExpert
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	cfgJSON, cfg, shardLimit, err := config(o)
	if err != nil {
		return nil, err
	}
	// hf.ParseConfig bounds every count (layers, experts, routed experts
	// in all), so the tensor list below has bounded length.
	fused := o.Layout == hf.LayoutFused
	p := &plan{o: o, cfgJSON: cfgJSON, cfg: cfg}
	// Pack tensors into shards in order.
	var cur []tensorSpec
	var curBytes int64
	specs := tensorSpecs(cfg, fused, o.AttnStd)
	if o.Routing == RoutingLocal {
		localize(specs, cfg, o.Seed)
	}
	if o.DType == DTypeFP8 {
		dt := o.FP8ScaleDType
		if dt == "" {
			dt = jnf.F32
		}
		specs = quantize(specs, o.fp8Block(), dt)
	}
	for _, s := range specs {
		n := numel(s.shape) * s.dtype.Size()
		if len(cur) > 0 && curBytes+n > shardLimit {
			p.shards = append(p.shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, s)
		curBytes += n
		p.bytes += n
	}
	p.shards = append(p.shards, cur)
	return p, nil
}

// Size checks o and returns the bytes of tensor data Write would write and
// the number of shard files (the other files are a few KB, a tokenizer a
// few MB).
func Size(o Options) (bytes int64, shards int, err error) {
	p, err := newPlan(o)
	if err != nil {
		return 0, 0, err
	}
	return p.bytes, len(p.shards), nil
}

// Write writes the checkpoint into dir (WriteContext without a context or
// progress).
func Write(dir string, o Options) error {
	return WriteContext(context.Background(), dir, o, WriteOptions{})
}

// WriteContext writes the checkpoint into dir, created if need be. dir must
// not hold a checkpoint (config.json) nor anything but what an interrupted
// Write leaves there: the files it recorded in dir's write journal
// (internal/outdir) before writing them, and their temporaries; those are
// removed first. Anything else is refused, naming the file, unless
// wo.Force. config.json is written last, so its presence marks a finished
// checkpoint. When ctx is done, or anything fails, WriteContext stops
// within a megabyte of writing and removes what it wrote. Two writers must
// not write the same dir at once (the command line holds its lock).
func WriteContext(ctx context.Context, dir string, o Options, wo WriteOptions) (err error) {
	p, err := newPlan(o)
	if err != nil {
		return err
	}
	o = p.o
	created, err := makeDir(dir)
	if err != nil {
		return err
	}
	wj, err := prepareDir(dir, wo.Force)
	if err != nil {
		if created {
			os.Remove(dir)
		}
		return err
	}
	defer wj.Close()
	var written []string
	defer func() {
		if err == nil {
			err = wj.Done()
			return
		}
		for _, f := range written {
			os.Remove(f)
		}
		wj.Done() // what it recorded is removed (or was never written)
		if created {
			os.Remove(dir) // only if empty
		}
	}()
	shardName := func(i int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(p.shards)) }
	toWrite := []string{"model.safetensors.index.json", "generation_config.json", "config.json"}
	for k := range o.Extra {
		toWrite = append(toWrite, k)
	}
	for i := range p.shards {
		if !wo.NoShards {
			toWrite = append(toWrite, shardName(i))
		}
	}
	if err := wj.Record(toWrite...); err != nil {
		return err
	}
	progress := wo.Progress
	if progress == nil {
		progress = func(int64, int64) {}
	}
	cw := &ctxWriter{ctx: ctx, total: p.bytes, progress: progress}
	weightMap := map[string]string{}
	for i, sh := range p.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := shardName(i)
		var st []safetensors.Spec
		byName := map[string]tensorSpec{}
		for _, s := range sh {
			st = append(st, safetensors.Spec{Name: s.name, DType: s.dtype, Shape: s.shape})
			byName[s.name] = s
			weightMap[s.name] = name
		}
		if wo.NoShards {
			continue
		}
		path := filepath.Join(dir, name)
		err := safetensors.WriteFile(path, st, map[string]string{"format": "pt"}, func(sp safetensors.Spec, w io.Writer) error {
			cw.w = w
			return fill(cw, byName[sp.Name], o.Seed)
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		written = append(written, path)
	}
	idx := map[string]any{"metadata": map[string]any{"total_size": p.bytes}, "weight_map": weightMap}
	ib, _ := json.MarshalIndent(idx, "", "  ")
	files := map[string][]byte{"model.safetensors.index.json": ib,
		"generation_config.json": []byte("{\n  \"do_sample\": false,\n  \"transformers_version\": \"5.17.0\"\n}\n")}
	for k, v := range o.Extra {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range append(names, "config.json") {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := files[k]
		if k == "config.json" {
			// Last: its presence marks a finished checkpoint.
			b = append(p.cfgJSON, '\n')
		}
		path := filepath.Join(dir, k)
		if err := jnf.WriteFileAtomic(path, b, 0o644); err != nil {
			return err
		}
		written = append(written, path)
	}
	return nil
}

// ctxWriter passes tensor bytes on to w while ctx is not done, counting
// them for progress.
type ctxWriter struct {
	ctx         context.Context
	w           io.Writer
	done, total int64
	progress    func(done, total int64)
}

func (c *ctxWriter) Write(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.w.Write(b)
	c.done += int64(n)
	c.progress(c.done, c.total)
	return n, err
}

// makeDir creates dir if it does not exist (created reports it).
func makeDir(dir string) (created bool, err error) {
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	return true, nil
}

// prepareDir makes dir ready for a checkpoint: it must hold nothing but
// what an interrupted synth recorded writing (its write journal), which is
// removed; a checkpoint (config.json) or any other file is refused unless
// force: synth never deletes what it did not write.
func prepareDir(dir string, force bool) (*outdir.Journal, error) {
	wj, err := outdir.Open(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(filepath.Join(dir, "config.json")); err == nil && !wj.Owns("config.json") && !force {
		return nil, fmt.Errorf("%s already holds a checkpoint (config.json exists): synth replaces nothing without --force", dir)
	}
	if err := wj.Check("synth", nil, force); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		name := e.Name()
		if name == outdir.JournalName || name == flock.Name || !wj.Owns(name) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("removing %s, which an interrupted synth recorded writing: %w", filepath.Join(dir, name), err)
		}
	}
	return wj, nil
}

func numel(s shape) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// tensorSpecs lists every tensor in checkpoint order.
func tensorSpecs(cfg *hf.Config, fused bool, attnStd float32) []tensorSpec {
	H, V, I := int64(cfg.Hidden), int64(cfg.Vocab), int64(cfg.MoEIntermediate)
	E := int64(cfg.Experts)
	std := float32(0.02)
	if attnStd <= 0 {
		attnStd = std
	}
	normInit, normScale := initConst, float32(1)
	if cfg.Arch == hf.Qwen35MoE {
		normInit, normScale = initNormOff, 0.05
	}
	f32 := jnf.BF16
	if fused {
		f32 = jnf.F32 // A_log and linear_attn.norm are F32 in the Qwen3.5 releases
	}
	prefix := "model."
	if fused && cfg.Arch == hf.Qwen35MoE {
		prefix = "model.language_model."
	}
	var out []tensorSpec
	add := func(name string, dt jnf.DType, s shape, k initKind, scale float32) {
		if strings.HasPrefix(name, "model.") {
			name = prefix + strings.TrimPrefix(name, "model.")
		}
		out = append(out, tensorSpec{name: name, dtype: dt, shape: s, init: k, scale: scale})
	}
	add("model.embed_tokens.weight", jnf.BF16, shape{V, H}, initNormal, 1)
	for _, e := range cfg.ExpectedTensors() {
		if e.Layer < 0 {
			continue
		}
		k, scale, dt := initNormal, std, jnf.BF16
		if strings.Contains(e.Name, ".self_attn.") || strings.Contains(e.Name, ".linear_attn.") {
			scale = attnStd
		}
		switch {
		case strings.HasSuffix(e.Name, "layernorm.weight") || strings.HasSuffix(e.Name, "q_norm.weight") || strings.HasSuffix(e.Name, "k_norm.weight"):
			k, scale = normInit, normScale
		case strings.HasSuffix(e.Name, "linear_attn.norm.weight"):
			k, scale, dt = initConst, 1, f32
		case strings.HasSuffix(e.Name, "A_log"):
			k, dt = initALog, f32
		case strings.HasSuffix(e.Name, "dt_bias"):
			k, scale = initConst, 1
		case strings.HasSuffix(e.Name, "conv1d.weight"):
			scale = 0.3
		case strings.HasSuffix(e.Name, "mlp.gate.weight"):
			scale = 0.1
		}
		add(e.Name, dt, e.Shape, k, scale)
		// Experts right after the router of their layer.
		if strings.HasSuffix(e.Name, "mlp.gate.weight") {
			p := strings.TrimSuffix(e.Name, "gate.weight") + "experts."
			if fused {
				add(p+"gate_up_proj", jnf.BF16, shape{E, 2 * I, H}, initNormal, std)
				add(p+"down_proj", jnf.BF16, shape{E, H, I}, initNormal, std)
			} else {
				for x := range E {
					add(fmt.Sprintf("%s%d.gate_proj.weight", p, x), jnf.BF16, shape{I, H}, initNormal, std)
					add(fmt.Sprintf("%s%d.up_proj.weight", p, x), jnf.BF16, shape{I, H}, initNormal, std)
					add(fmt.Sprintf("%s%d.down_proj.weight", p, x), jnf.BF16, shape{H, I}, initNormal, std)
				}
			}
		}
	}
	add("model.norm.weight", jnf.BF16, shape{H}, normInit, normScale)
	if !cfg.Tied {
		add("lm_head.weight", jnf.BF16, shape{V, H}, initNormal, std)
	}
	if fused {
		// Tensors a text engine must ignore, as in the official releases.
		out = append(out, tensorSpec{name: "mtp.fc.weight", dtype: jnf.BF16, shape: shape{H, 2 * H}, init: initNormal, scale: std})
		out = append(out, tensorSpec{name: "model.visual.patch_embed.proj.weight", dtype: jnf.BF16, shape: shape{16, 3 * 2 * 16 * 16}, init: initNormal, scale: std})
	}
	return out
}

// localize makes specs' routing local (RoutingLocal): it scales the
// embedding, adds the shared direction to every embedding row and to
// top-k/2 router rows of each MoE layer, chosen by the seed.
func localize(specs []tensorSpec, cfg *hf.Config, seed uint64) {
	H := cfg.Hidden
	r := splitmix{seed ^ 0x6c6f63616c} // "local"
	u := make([]float32, H)
	for j := range u {
		u[j] = 1
		if r.next()&1 == 0 {
			u[j] = -1
		}
	}
	for i := range specs {
		s := &specs[i]
		switch {
		case strings.HasSuffix(s.name, "embed_tokens.weight"):
			s.scale = localEmbedScale
			s.shared = &sharedDir{u: u, scale: localShared}
		case strings.HasSuffix(s.name, "mlp.gate.weight"):
			hot := make([]bool, cfg.Experts)
			for n := 0; n < max(1, cfg.TopK/2); {
				if x := int(r.next() % uint64(cfg.Experts)); !hot[x] {
					hot[x] = true
					n++
				}
			}
			s.shared = &sharedDir{u: u, scale: localRouterBias, rows: hot}
		}
	}
}

// fill writes a tensor's pseudo-random bytes. The stream depends only on the
// seed and the tensor name, so shards can be written in any order.
func fill(w io.Writer, s tensorSpec, seed uint64) error {
	n := numel(s.shape) * s.dtype.Size()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < n; {
		k := min(int64(len(buf)), n-off)
		if err := tensorBytes(s, seed, off, buf[:k]); err != nil {
			return err
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// tensorBytes puts bytes [off, off+len(dst)) of tensor s into dst. Element
// i is made from the i+1-th output of the tensor's splitmix stream, whose
// state after i outputs is its seed plus i times the increment, so any
// range can be made without the elements before it.
func tensorBytes(s tensorSpec, seed uint64, off int64, dst []byte) error {
	if s.fp8 != nil {
		return fp8Bytes(s, seed, off, dst)
	}
	esz := s.dtype.Size()
	if s.dtype != jnf.BF16 && s.dtype != jnf.F32 {
		return fmt.Errorf("synth cannot fill dtype %s", s.dtype)
	}
	if off < 0 || off+int64(len(dst)) > numel(s.shape)*esz {
		return fmt.Errorf("tensor %s: bytes [%d,+%d) outside its %d", s.name, off, len(dst), numel(s.shape)*esz)
	}
	h := fnv.New64a()
	h.Write([]byte(s.name))
	first := off / esz
	st := splitmix{seed ^ h.Sum64() + uint64(first)*splitmixGamma}
	var el [4]byte
	for i := first; len(dst) > 0; i++ {
		v := s.value(&st, i)
		if s.dtype == jnf.BF16 {
			binary.LittleEndian.PutUint16(el[:], bf16(v))
		} else {
			binary.LittleEndian.PutUint32(el[:], math.Float32bits(v))
		}
		skip := 0
		if i == first {
			skip = int(off - first*esz) // a range that starts inside an element
		}
		dst = dst[copy(dst, el[skip:esz]):]
	}
	return nil
}

// value is element i of s, made from st (the state after i outputs of
// s's stream), before rounding to s's dtype.
func (s tensorSpec) value(st *splitmix, i int64) float32 {
	var v float32
	switch s.init {
	case initConst:
		v = s.scale
	case initNormal:
		// Uniform on [-√3σ, √3σ): standard deviation σ.
		v = (st.float() - 0.5) * 2 * 1.7320508 * s.scale
	case initNormOff:
		v = (st.float() - 0.5) * 2 * s.scale
	case initALog:
		v = canon.Log(1 + float32(15*st.float()))
	}
	if d := s.shared; d != nil {
		cols := int64(len(d.u))
		if r := i / cols; d.rows == nil || d.rows[r] {
			v = float32(v + float32(d.scale*d.u[i%cols]))
		}
	}
	return v
}

// bf16 rounds to nearest even.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}

type splitmix struct{ s uint64 }

// splitmixGamma is splitmix's increment.
const splitmixGamma = 0x9E3779B97F4A7C15

func (r *splitmix) next() uint64 {
	r.s += splitmixGamma
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// float is uniform on [0, 1). The compiler turns the division into a
// multiplication by 2⁻²⁴; the conversion keeps it from being fused into an
// addition of the caller.
func (r *splitmix) float() float32 { return float32(float32(r.next()>>40) / (1 << 24)) }
