package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// Source is a byte range of a checkpoint shard.
type Source struct {
	File   string `json:"file"`   // shard name relative to the checkpoint directory
	Offset int64  `json:"offset"` // absolute offset in the shard
	Length int64  `json:"length"`
}

// TensorRef is one non-expert tensor under its canonical name.
type TensorRef struct {
	Name   string    // canonical (text-only layout, "model." prefix)
	Orig   string    // name in the checkpoint
	Layer  int       // -1 for global tensors
	DType  jnf.DType //
	Shape  []int64
	Source Source
}

// Part is one projection of a routed expert.
type Part struct {
	Name   string // gate_proj, up_proj, down_proj
	Orig   string // checkpoint tensor it comes from (a fused tensor for the fused layout)
	DType  jnf.DType
	Shape  []int64 // [I,H] for gate/up, [H,I] for down
	Source Source
}

// ExpertRef is one routed expert: its gate, up and down bytes in that order.
type ExpertRef struct {
	Layer, Expert int
	Parts         [3]Part
}

// Name is the canonical record name "model.layers.L.mlp.experts.E".
func (e ExpertRef) Name() string { return ExpertName(e.Layer, e.Expert) }

// Length is the total byte length of the three parts.
func (e ExpertRef) Length() int64 {
	return e.Parts[0].Source.Length + e.Parts[1].Source.Length + e.Parts[2].Source.Length
}

// ExpertName is the canonical name of a routed expert record.
func ExpertName(layer, expert int) string {
	return fmt.Sprintf("model.layers.%d.mlp.experts.%d", layer, expert)
}

// Ignored is a checkpoint tensor Tarfa does not use, with the reason.
type Ignored struct {
	Name   string
	Reason string
	Bytes  int64
}

// Shard is one safetensors file of the checkpoint.
type Shard struct {
	File string
	Size int64
}

// Expert storage layouts.
const (
	LayoutPerExpert = "per-expert" // mlp.experts.E.{gate,up,down}_proj.weight
	LayoutFused     = "fused"      // mlp.experts.gate_up_proj [E,2I,H], mlp.experts.down_proj [E,H,I]
)

// AuxFiles are the non-weight files a self-sufficient model directory needs,
// copied (and hashed) when present.
var AuxFiles = []string{
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json",
}

// Checkpoint is an opened, fully validated Hugging Face checkpoint.
type Checkpoint struct {
	Dir     string
	Config  *Config
	Tensors []TensorRef   // canonical order: globals by name, then each layer's tensors by name
	Experts [][]ExpertRef // [layer][expert]; nil for dense layers
	Ignored []Ignored
	Shards  []Shard
	Layout  string   // LayoutPerExpert or LayoutFused (the body's experts)
	Aux     []string // AuxFiles present in Dir
	files   map[string]*safetensors.File
}

// Close closes the shards.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadSource reads a source range into buf (len(buf) must equal s.Length).
func (c *Checkpoint) ReadSource(s Source, buf []byte) error {
	f, ok := c.files[s.File]
	if !ok {
		return fmt.Errorf("checkpoint %s: no shard %q", c.Dir, s.File)
	}
	if int64(len(buf)) != s.Length {
		return fmt.Errorf("read of %s [%d,+%d) into a %d-byte buffer", s.File, s.Offset, s.Length, len(buf))
	}
	if _, err := f.ReadAt(buf, s.Offset); err != nil {
		return fmt.Errorf("%s at offset %d: %w", filepath.Join(c.Dir, s.File), s.Offset, err)
	}
	return nil
}

// ShardFile returns the open shard, for streaming reads.
func (c *Checkpoint) ShardFile(name string) (*safetensors.File, bool) {
	f, ok := c.files[name]
	return f, ok
}

// Tensor finds a canonical non-expert tensor.
func (c *Checkpoint) Tensor(name string) (TensorRef, bool) {
	for _, t := range c.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorRef{}, false
}

type indexFile struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// Open reads DIR's config and shards and maps every tensor. Any tensor that
// is neither used nor explicitly ignored (mtp.*, visual.*) is an error, as is
// any missing or mis-shaped tensor.
func Open(dir string) (*Checkpoint, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Config: cfg, files: map[string]*safetensors.File{}}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	for _, a := range AuxFiles {
		if st, err := os.Stat(filepath.Join(dir, a)); err == nil && st.Mode().IsRegular() {
			c.Aux = append(c.Aux, a)
		}
	}

	// Which shards, and which tensor the index says lives where.
	var claimed map[string]string
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idxPath); err == nil {
		var idx indexFile
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: %v", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: empty weight_map", idxPath)
		}
		claimed = idx.WeightMap
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	} else if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		claimed = nil
	} else {
		return nil, fmt.Errorf("checkpoint %s: neither model.safetensors.index.json nor model.safetensors found", dir)
	}
	shardNames := []string{"model.safetensors"}
	if claimed != nil {
		set := map[string]bool{}
		for name, f := range claimed {
			if f == "" || strings.Contains(f, "/") || strings.Contains(f, `\`) || f == "." || f == ".." {
				return nil, fmt.Errorf("%s: tensor %q maps to an invalid shard name %q", idxPath, name, f)
			}
			set[f] = true
		}
		shardNames = shardNames[:0]
		for f := range set {
			shardNames = append(shardNames, f)
		}
		sort.Strings(shardNames)
	}
	where := map[string]string{} // tensor → shard, from the shard headers
	for _, s := range shardNames {
		f, err := safetensors.Open(filepath.Join(dir, s))
		if err != nil {
			return nil, err
		}
		c.files[s] = f
		c.Shards = append(c.Shards, Shard{File: s, Size: f.Size})
		for _, t := range f.Tensors {
			if prev, dup := where[t.Name]; dup {
				return nil, fmt.Errorf("tensor %q is in two shards: %s and %s", t.Name, prev, s)
			}
			where[t.Name] = s
		}
	}
	if claimed != nil {
		for name, s := range claimed {
			got, ok := where[name]
			switch {
			case !ok:
				return nil, fmt.Errorf("%s: tensor %q is listed in shard %s, but no shard contains it", idxPath, name, s)
			case got != s:
				return nil, fmt.Errorf("%s: tensor %q is listed in shard %s, but it is in %s", idxPath, name, s, got)
			}
		}
		for name, s := range where {
			if _, ok := claimed[name]; !ok {
				return nil, fmt.Errorf("%s: tensor %q in shard %s is not listed in the index", idxPath, name, s)
			}
		}
	}
	if err := c.mapTensors(where); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	ok = true
	return c, nil
}

var (
	reLayer     = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)
	reExpert2D  = regexp.MustCompile(`^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)
	reExpert3D  = regexp.MustCompile(`^mlp\.experts\.(gate_up_proj|down_proj)$`)
	ignoredPfxs = []struct{ prefix, reason string }{
		{"mtp.", "multi-token-prediction head (speculative decoding only)"},
		{"model.visual.", "vision tower (text-only engine)"},
		{"visual.", "vision tower (text-only engine)"},
		{"model.language_model.visual.", "vision tower (text-only engine)"},
	}
)

// canonical strips the multimodal text prefix.
func canonical(name string) string {
	if rest, ok := strings.CutPrefix(name, "model.language_model."); ok {
		return "model." + rest
	}
	return name
}

// expected lists the non-expert tensors of layer l (or globals when l < 0)
// with their shapes, as MODEL_SPEC §B prescribes.
func (cfg *Config) expected(l int) map[string][]int64 {
	H, V := int64(cfg.Hidden), int64(cfg.Vocab)
	m := map[string][]int64{}
	if l < 0 {
		m["model.embed_tokens.weight"] = []int64{V, H}
		m["model.norm.weight"] = []int64{H}
		if !cfg.Tied {
			m["lm_head.weight"] = []int64{V, H}
		}
		return m
	}
	p := fmt.Sprintf("model.layers.%d.", l)
	nq, nkv, hd := int64(cfg.Heads), int64(cfg.KVHeads), int64(cfg.HeadDim)
	m[p+"input_layernorm.weight"] = []int64{H}
	m[p+"post_attention_layernorm.weight"] = []int64{H}
	switch cfg.LayerTypes[l] {
	case FullAttention:
		q := nq * hd
		if cfg.Arch == Qwen35MoE {
			q *= 2 // per-head [query | gate]
		}
		m[p+"self_attn.q_proj.weight"] = []int64{q, H}
		m[p+"self_attn.k_proj.weight"] = []int64{nkv * hd, H}
		m[p+"self_attn.v_proj.weight"] = []int64{nkv * hd, H}
		m[p+"self_attn.o_proj.weight"] = []int64{H, nq * hd}
		m[p+"self_attn.q_norm.weight"] = []int64{hd}
		m[p+"self_attn.k_norm.weight"] = []int64{hd}
	case LinearAttention:
		nv, dv := int64(cfg.LinearValueHeads), int64(cfg.LinearValueDim)
		conv := int64(cfg.ConvDim())
		m[p+"linear_attn.in_proj_qkv.weight"] = []int64{conv, H}
		m[p+"linear_attn.in_proj_z.weight"] = []int64{nv * dv, H}
		m[p+"linear_attn.in_proj_b.weight"] = []int64{nv, H}
		m[p+"linear_attn.in_proj_a.weight"] = []int64{nv, H}
		m[p+"linear_attn.conv1d.weight"] = []int64{conv, 1, int64(cfg.ConvKernel)}
		m[p+"linear_attn.dt_bias"] = []int64{nv}
		m[p+"linear_attn.A_log"] = []int64{nv}
		m[p+"linear_attn.norm.weight"] = []int64{dv}
		m[p+"linear_attn.out_proj.weight"] = []int64{H, nv * dv}
	}
	if cfg.Sparse[l] {
		m[p+"mlp.gate.weight"] = []int64{int64(cfg.Experts), H}
		if cfg.SharedIntermediate > 0 {
			is := int64(cfg.SharedIntermediate)
			m[p+"mlp.shared_expert.gate_proj.weight"] = []int64{is, H}
			m[p+"mlp.shared_expert.up_proj.weight"] = []int64{is, H}
			m[p+"mlp.shared_expert.down_proj.weight"] = []int64{H, is}
			m[p+"mlp.shared_expert_gate.weight"] = []int64{1, H}
		}
	} else {
		id := int64(cfg.DenseIntermediate)
		m[p+"mlp.gate_proj.weight"] = []int64{id, H}
		m[p+"mlp.up_proj.weight"] = []int64{id, H}
		m[p+"mlp.down_proj.weight"] = []int64{H, id}
	}
	return m
}

// ExpectedTensors lists every canonical non-expert tensor name with its
// shape, in canonical order.
func (cfg *Config) ExpectedTensors() []struct {
	Name  string
	Layer int
	Shape []int64
} {
	var out []struct {
		Name  string
		Layer int
		Shape []int64
	}
	for l := -1; l < cfg.Layers; l++ {
		m := cfg.expected(l)
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, struct {
				Name  string
				Layer int
				Shape []int64
			}{n, l, m[n]})
		}
	}
	return out
}

func floatDType(d jnf.DType) bool { return d == jnf.BF16 || d == jnf.F32 || d == jnf.F16 }

func (c *Checkpoint) mapTensors(where map[string]string) error {
	cfg := c.Config
	E, I, H := cfg.Experts, int64(cfg.MoEIntermediate), int64(cfg.Hidden)
	byCanon := map[string]TensorRef{}
	type partKey struct{ l, e, p int }
	parts := map[partKey]Part{}
	fusedSeen, perSeen := false, false

	names := make([]string, 0, len(where))
	for n := range where {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, orig := range names {
		shard := c.files[where[orig]]
		t, _ := shard.Lookup(orig)
		src := Source{File: where[orig], Offset: t.Begin, Length: t.Len()}
		ignored := false
		for _, ig := range ignoredPfxs {
			if strings.HasPrefix(orig, ig.prefix) {
				c.Ignored = append(c.Ignored, Ignored{Name: orig, Reason: ig.reason, Bytes: t.Len()})
				ignored = true
				break
			}
		}
		if ignored {
			continue
		}
		name := canonical(orig)
		if name == "lm_head.weight" && cfg.Tied {
			c.Ignored = append(c.Ignored, Ignored{Name: orig, Reason: "tie_word_embeddings is true: the embedding is used", Bytes: t.Len()})
			continue
		}
		if !floatDType(t.DType) {
			return fmt.Errorf("tensor %s (%s): dtype %s is not a float type (BF16, F16, F32)", orig, where[orig], t.DType)
		}
		if m := reLayer.FindStringSubmatch(name); m != nil {
			l, err := strconv.Atoi(m[1])
			if err != nil || l >= cfg.Layers || strconv.Itoa(l) != m[1] {
				return fmt.Errorf("tensor %s (%s): layer %s is outside [0,%d)", orig, where[orig], m[1], cfg.Layers)
			}
			if em := reExpert2D.FindStringSubmatch(m[2]); em != nil {
				e, err := strconv.Atoi(em[1])
				if err != nil || e >= E || strconv.Itoa(e) != em[1] {
					return fmt.Errorf("tensor %s (%s): expert %s is outside [0,%d)", orig, where[orig], em[1], E)
				}
				if !cfg.Sparse[l] {
					return fmt.Errorf("tensor %s (%s): layer %d is a dense layer and has no experts", orig, where[orig], l)
				}
				pi := map[string]int{"gate_proj": 0, "up_proj": 1, "down_proj": 2}[em[2]]
				want := []int64{I, H}
				if pi == 2 {
					want = []int64{H, I}
				}
				if !slices.Equal(t.Shape, want) {
					return fmt.Errorf("tensor %s (%s): shape %v, want %v", orig, where[orig], t.Shape, want)
				}
				k := partKey{l, e, pi}
				if _, dup := parts[k]; dup {
					return fmt.Errorf("tensor %s: layer %d expert %d %s given twice", orig, l, e, em[2])
				}
				parts[k] = Part{Name: em[2], Orig: orig, DType: t.DType, Shape: want, Source: src}
				perSeen = true
				continue
			}
			if fm := reExpert3D.FindStringSubmatch(m[2]); fm != nil {
				if !cfg.Sparse[l] {
					return fmt.Errorf("tensor %s (%s): layer %d is a dense layer and has no experts", orig, where[orig], l)
				}
				sz := t.DType.Size()
				if fm[1] == "gate_up_proj" {
					if want := []int64{int64(E), 2 * I, H}; !slices.Equal(t.Shape, want) {
						return fmt.Errorf("tensor %s (%s): shape %v, want %v [experts, 2·moe_intermediate, hidden]", orig, where[orig], t.Shape, want)
					}
					per := 2 * I * H * sz
					for e := range E {
						for pi, off := range []int64{0, I * H * sz} {
							k := partKey{l, e, pi}
							if _, dup := parts[k]; dup {
								return fmt.Errorf("tensor %s: layer %d expert %d given both fused and per expert", orig, l, e)
							}
							parts[k] = Part{Name: []string{"gate_proj", "up_proj"}[pi], Orig: orig, DType: t.DType, Shape: []int64{I, H},
								Source: Source{File: src.File, Offset: src.Offset + int64(e)*per + off, Length: I * H * sz}}
						}
					}
				} else {
					if want := []int64{int64(E), H, I}; !slices.Equal(t.Shape, want) {
						return fmt.Errorf("tensor %s (%s): shape %v, want %v [experts, hidden, moe_intermediate]", orig, where[orig], t.Shape, want)
					}
					per := H * I * sz
					for e := range E {
						k := partKey{l, e, 2}
						if _, dup := parts[k]; dup {
							return fmt.Errorf("tensor %s: layer %d expert %d given both fused and per expert", orig, l, e)
						}
						parts[k] = Part{Name: "down_proj", Orig: orig, DType: t.DType, Shape: []int64{H, I},
							Source: Source{File: src.File, Offset: src.Offset + int64(e)*per, Length: per}}
					}
				}
				fusedSeen = true
				continue
			}
		}
		if _, dup := byCanon[name]; dup {
			return fmt.Errorf("tensor %s: canonical name %s given twice", orig, name)
		}
		byCanon[name] = TensorRef{Name: name, Orig: orig, DType: t.DType, Shape: t.Shape, Source: src}
	}

	// Every expected tensor present with the right shape; nothing unexpected.
	for _, e := range cfg.ExpectedTensors() {
		t, ok := byCanon[e.Name]
		if !ok {
			return fmt.Errorf("missing tensor %s (shape %v)", e.Name, e.Shape)
		}
		if !slices.Equal(t.Shape, e.Shape) {
			return fmt.Errorf("tensor %s (%s): shape %v, want %v", t.Orig, t.Source.File, t.Shape, e.Shape)
		}
		t.Layer = e.Layer
		c.Tensors = append(c.Tensors, t)
		delete(byCanon, e.Name)
	}
	if len(byCanon) > 0 {
		var extra []string
		for n, t := range byCanon {
			extra = append(extra, fmt.Sprintf("%s (%s)", t.Orig, n))
		}
		sort.Strings(extra)
		return fmt.Errorf("%d unexpected tensor(s) for %s with this config, e.g. %s", len(extra), cfg.Arch, strings.Join(extra[:min(5, len(extra))], ", "))
	}
	c.Experts = make([][]ExpertRef, cfg.Layers)
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue
		}
		c.Experts[l] = make([]ExpertRef, E)
		for e := range E {
			r := ExpertRef{Layer: l, Expert: e}
			for pi := range 3 {
				p, ok := parts[partKey{l, e, pi}]
				if !ok {
					return fmt.Errorf("layer %d expert %d: missing %s", l, e, []string{"gate_proj", "up_proj", "down_proj"}[pi])
				}
				r.Parts[pi] = p
			}
			c.Experts[l][e] = r
		}
	}
	switch {
	case fusedSeen && perSeen:
		return fmt.Errorf("experts are stored both fused and per expert in the text layers")
	case fusedSeen:
		c.Layout = LayoutFused
	default:
		c.Layout = LayoutPerExpert
	}
	return nil
}
