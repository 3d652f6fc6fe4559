package hf

import (
	"fmt"
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

// Part is one projection of a routed expert, or (block FP8) the scales of one.
type Part struct {
	Name   string // gate_proj, up_proj, down_proj; FP8 scales: gate_proj.weight_scale_inv, …
	Orig   string // checkpoint tensor it comes from (a fused tensor for the fused layout)
	DType  jnf.DType
	Shape  []int64 // [I,H] for gate/up, [H,I] for down; scales [ceil(rows/bn), ceil(cols/bk)]
	Source Source
}

// ExpertRef is one routed expert: its gate, up and down bytes in that
// order (three parts) or, for a block-FP8 checkpoint, its F8_E4M3 gate, up
// and down followed by their three weight_scale_inv tensors (six parts, the
// order of jnf.FP8ExpertParts).
type ExpertRef struct {
	Layer, Expert int
	Parts         []Part
}

// Name is the canonical record name "model.layers.L.mlp.experts.E".
func (e ExpertRef) Name() string { return ExpertName(e.Layer, e.Expert) }

// Length is the total byte length of the parts.
func (e ExpertRef) Length() int64 {
	var n int64
	for _, p := range e.Parts {
		n += p.Source.Length
	}
	return n
}

// FP8 reports whether the expert is block FP8 (six parts).
func (e ExpertRef) FP8() bool { return len(e.Parts) == 6 }

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
	// ConfigBytes are the bytes of config.json that Config was parsed from.
	ConfigBytes []byte
	files       map[string]*safetensors.File
	src         *dirReader
}

// Options controls how Open reads a checkpoint directory.
type Options struct {
	// FollowSymlinks follows a symbolic link among the checkpoint's files
	// if its fully resolved target lies inside the checkpoint directory, or
	// for a Hugging Face hub cache snapshot (…/models--ORG--NAME/snapshots/REV,
	// whose files link to ../../blobs/SHA) inside models--ORG--NAME. Without
	// it every link is refused: whatever a link points to would be hashed
	// into the root and published with a converted model. A link out of the
	// allowed directory, and any file that is not a regular file (FIFO,
	// device, socket), is refused either way.
	FollowSymlinks bool
	// Shards, if set, gives the content of every safetensors shard the
	// index names, in place of the file of that name in the directory
	// (which need not exist): a synthetic checkpoint too large to write
	// out is converted from bytes made on demand (tarfa synth --jnf). It
	// returns the shard's bytes and their length. config.json, the index
	// and the auxiliary files are read from the directory as always.
	Shards func(name string) (safetensors.ReaderAtCloser, int64, error)
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

// ReadAux reads one of the auxiliary files Open found (c.Aux), under the
// same checks as Open and at most jnf.MaxAuxFileSize bytes; config.json is
// returned as the bytes Open parsed.
func (c *Checkpoint) ReadAux(name string) ([]byte, error) {
	if !slices.Contains(c.Aux, name) {
		return nil, fmt.Errorf("checkpoint %s: no auxiliary file %q", c.Dir, name)
	}
	if name == "config.json" {
		return c.ConfigBytes, nil
	}
	return c.src.readFile(name, jnf.MaxAuxFileSize)
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

// NotCheckpointError is Open's error for a directory that holds no
// Hugging Face checkpoint, saying what it is instead where it can tell: a
// JNF directory, or a directory with a checkpoint below it.
type NotCheckpointError struct {
	Dir    string
	Reason string
}

func (e *NotCheckpointError) Error() string { return e.Reason }

const (
	indexName  = "model.safetensors.index.json"
	singleName = "model.safetensors"
)

// isCheckpoint reports whether dir has a config.json and weights.
func isCheckpoint(dir string) bool {
	has := func(n string) bool { _, err := os.Lstat(filepath.Join(dir, n)); return err == nil }
	return has("config.json") && (has(indexName) || has(singleName))
}

func notCheckpoint(dir string) error {
	e := &NotCheckpointError{Dir: dir}
	if _, err := os.Lstat(filepath.Join(dir, "manifest.json")); err == nil {
		e.Reason = fmt.Sprintf("%s is a JNF directory (tarfa convert's output), not a Hugging Face checkpoint: it is converted already (tarfa verify %s checks it)", dir, dir)
		return e
	}
	if _, err := os.Lstat(filepath.Join(dir, "global.jnf")); err == nil {
		e.Reason = fmt.Sprintf("%s holds JNF files (tarfa convert's output), not a Hugging Face checkpoint", dir)
		return e
	}
	e.Reason = fmt.Sprintf("checkpoint %s: neither %s nor %s found", dir, indexName, singleName)
	// Checkpoints one level down, or in snapshots/ (a hub cache repository
	// directory, models--ORG--NAME, given instead of one of its snapshots).
	var subs []string
	for _, parent := range []string{dir, filepath.Join(dir, "snapshots")} {
		ents, _ := os.ReadDir(parent)
		for _, ent := range ents {
			if sub := filepath.Join(parent, ent.Name()); ent.IsDir() && isCheckpoint(sub) {
				subs = append(subs, sub)
			}
		}
	}
	switch {
	case len(subs) == 1:
		e.Reason += fmt.Sprintf("; did you mean %s?", subs[0])
	case len(subs) > 1:
		if len(subs) > 5 {
			subs = append(subs[:5], "…")
		}
		e.Reason += fmt.Sprintf("; did you mean one of %s?", strings.Join(subs, ", "))
	}
	return e
}

// Open reads DIR's config and shards and maps every tensor, refusing every
// symbolic link (OpenWith with the zero Options).
func Open(dir string) (*Checkpoint, error) { return OpenWith(dir, Options{}) }

// OpenWith reads DIR's config and shards and maps every tensor. Any tensor
// that is neither used nor explicitly ignored (mtp.*, visual.*) is an error,
// as is any missing or mis-shaped tensor. Every file is opened under the
// link policy of opt, as a regular file, and read with a bound:
// config.json at most jnf.MaxConfigSize bytes, the index MaxIndexSize,
// safetensors headers safetensors.MaxHeaderSize.
func OpenWith(dir string, opt Options) (*Checkpoint, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("checkpoint %w", err)
	} else if !st.IsDir() {
		return nil, &NotCheckpointError{Dir: dir, Reason: fmt.Sprintf("checkpoint %s is a file, not a directory", dir)}
	}
	src, err := newDirReader(dir, opt.FollowSymlinks)
	if err != nil {
		return nil, err
	}
	if !src.exists(indexName) && !src.exists(singleName) {
		return nil, notCheckpoint(dir)
	}
	cfgBytes, cfg, err := src.readConfig()
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Config: cfg, ConfigBytes: cfgBytes, files: map[string]*safetensors.File{}, src: src}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	for _, a := range AuxFiles {
		if !src.exists(a) {
			continue
		}
		// Present: it must pass the same checks as every file read.
		f, _, err := src.open(a)
		if err != nil {
			return nil, err
		}
		f.Close()
		c.Aux = append(c.Aux, a)
	}

	// Which shards, and which tensor the index says lives where.
	var claimed map[string]string
	idxPath := src.path(indexName)
	if src.exists(indexName) {
		b, err := src.readFile(indexName, MaxIndexSize)
		if err != nil {
			return nil, err
		}
		var idx indexFile
		if err := jnf.DecodeForeignJSON(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: %v", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: empty weight_map", idxPath)
		}
		claimed = idx.WeightMap
	}
	shardNames := []string{singleName}
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
	var total int64
	var headers uint64
	for _, s := range shardNames {
		var fd safetensors.ReaderAtCloser
		var size int64
		if opt.Shards != nil {
			fd, size, err = opt.Shards(s)
		} else {
			var osf *os.File
			osf, _, err = src.open(s)
			fd = osf
		}
		if err != nil {
			return nil, err
		}
		if n, err := safetensors.HeaderLen(fd); err == nil {
			if headers += min(n, MaxHeaderBytes+1); headers > MaxHeaderBytes {
				fd.Close()
				return nil, fmt.Errorf("checkpoint %s: the safetensors headers of the shards up to %s add up to more than the %d bytes Tarfa reads", dir, s, MaxHeaderBytes)
			}
		}
		var f *safetensors.File
		if osf, ok := fd.(*os.File); ok && opt.Shards == nil {
			f, err = safetensors.NewFile(osf, src.path(s))
		} else {
			f, err = safetensors.NewReaderFile(fd, size, src.path(s))
		}
		if err != nil {
			fd.Close()
			return nil, err
		}
		c.files[s] = f
		c.Shards = append(c.Shards, Shard{File: s, Size: f.Size})
		var fits bool
		if total, fits = addInt64(total, f.Size); !fits {
			return nil, fmt.Errorf("checkpoint %s: the shards' sizes add up to more than 2^63 bytes", dir)
		}
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

// fp8Matrices are the canonical names (after "model.layers.N.") of the
// non-expert matrices the engine multiplies, the only tensors besides the
// routed experts' projections and lm_head.weight that may be F8_E4M3.
var fp8Matrices = []string{
	"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
	"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_a.weight",
	"linear_attn.in_proj_b.weight", "linear_attn.out_proj.weight",
	"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
	"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight", "mlp.shared_expert.down_proj.weight",
	"mlp.gate.weight", "mlp.shared_expert_gate.weight",
}

// fp8Allowed reports whether canonical non-expert tensor name may be F8_E4M3.
func fp8Allowed(name string) bool {
	if name == "lm_head.weight" {
		return true
	}
	m := reLayer.FindStringSubmatch(name)
	return m != nil && slices.Contains(fp8Matrices, m[2])
}

// ScaleShape is the shape of the weight_scale_inv tensor of an F8_E4M3
// matrix [N, K] under q: [ceil(N/bn), ceil(K/bk)].
func ScaleShape(q *Quant, shape []int64) []int64 {
	if len(shape) != 2 {
		return nil
	}
	bn, bk := int64(q.BlockN), int64(q.BlockK)
	return []int64{(shape[0] + bn - 1) / bn, (shape[1] + bk - 1) / bk}
}

// scaleRef is a weight_scale_inv tensor met while mapping, checked against
// its weight once every tensor has been seen.
type scaleRef struct {
	orig   string
	dtype  jnf.DType
	shape  []int64
	source Source
}

func (c *Checkpoint) mapTensors(where map[string]string) error {
	cfg := c.Config
	E, I, H := cfg.Experts, int64(cfg.MoEIntermediate), int64(cfg.Hidden)
	byCanon := map[string]TensorRef{}
	type partKey struct{ l, e, p int }
	parts := map[partKey]Part{}
	fusedSeen, perSeen := false, false
	// Block FP8: the scale tensors by the name of their weight, the F8_E4M3
	// weights (checkpoint name → shard), and what was ignored (a scale of
	// an ignored weight is ignored with it).
	scales := map[string]scaleRef{}
	f8 := map[string]string{}
	ignoredSet := map[string]bool{}
	fp8Reason := func(orig string) error {
		if cfg.Quant == nil {
			return fmt.Errorf("tensor %s (%s) is F8_E4M3, but config.json has no quantization_config: a block-FP8 checkpoint says so (quant_method fp8)", orig, where[orig])
		}
		return nil
	}

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
		if w, ok := strings.CutSuffix(orig, ".weight"+jnf.ScaleSuffix); ok {
			scales[w+".weight"] = scaleRef{orig: orig, dtype: t.DType, shape: t.Shape, source: src}
			continue
		}
		name := canonical(orig)
		if name == "lm_head.weight" && cfg.Tied {
			c.Ignored = append(c.Ignored, Ignored{Name: orig, Reason: "tie_word_embeddings is true: the embedding is used", Bytes: t.Len()})
			ignoredSet[orig] = true
			continue
		}
		isF8 := t.DType == jnf.F8E4
		if isF8 {
			if err := fp8Reason(orig); err != nil {
				return err
			}
			f8[orig] = where[orig]
		} else if !floatDType(t.DType) {
			return fmt.Errorf("tensor %s (%s): dtype %s is not a float type (BF16, F16, F32) nor the F8_E4M3 of a block-FP8 matrix", orig, where[orig], t.DType)
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
				if isF8 {
					return fmt.Errorf("tensor %s (%s): fused F8_E4M3 experts are not supported; Qwen's FP8 releases store experts per expert (mlp.experts.E.gate_proj.weight + .weight_scale_inv)", orig, where[orig])
				}
				if !cfg.Sparse[l] {
					return fmt.Errorf("tensor %s (%s): layer %d is a dense layer and has no experts", orig, where[orig], l)
				}
				// Once the shape matches, every slice is a whole fraction of
				// the tensor's validated length: no product can overflow.
				if fm[1] == "gate_up_proj" {
					if want := []int64{int64(E), 2 * I, H}; !slices.Equal(t.Shape, want) {
						return fmt.Errorf("tensor %s (%s): shape %v, want %v [experts, 2·moe_intermediate, hidden]", orig, where[orig], t.Shape, want)
					}
					per := t.Len() / int64(E)
					for e := range E {
						for pi, off := range []int64{0, per / 2} {
							k := partKey{l, e, pi}
							if _, dup := parts[k]; dup {
								return fmt.Errorf("tensor %s: layer %d expert %d given both fused and per expert", orig, l, e)
							}
							parts[k] = Part{Name: []string{"gate_proj", "up_proj"}[pi], Orig: orig, DType: t.DType, Shape: []int64{I, H},
								Source: Source{File: src.File, Offset: src.Offset + int64(e)*per + off, Length: per / 2}}
						}
					}
				} else {
					if want := []int64{int64(E), H, I}; !slices.Equal(t.Shape, want) {
						return fmt.Errorf("tensor %s (%s): shape %v, want %v [experts, hidden, moe_intermediate]", orig, where[orig], t.Shape, want)
					}
					per := t.Len() / int64(E)
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
		if isF8 && !fp8Allowed(name) {
			return fmt.Errorf("tensor %s (%s): F8_E4M3 is allowed only for a matrix the engine multiplies (attention and Gated DeltaNet projections, MLPs, routers, lm_head, routed experts), not for %s: it must stay float", orig, where[orig], name)
		}
		if _, dup := byCanon[name]; dup {
			return fmt.Errorf("tensor %s: canonical name %s given twice", orig, name)
		}
		byCanon[name] = TensorRef{Name: name, Orig: orig, DType: t.DType, Shape: t.Shape, Source: src}
	}

	// Block FP8: every F8_E4M3 weight has its scales, every scale its F8
	// weight, each scale of the shape the block size implies.
	if cfg.Quant != nil && len(f8) == 0 {
		return fmt.Errorf("config.json has a quantization_config (%s), but no tensor is F8_E4M3", cfg.Quant)
	}
	shapeOf := map[string][]int64{} // checkpoint name → shape, of the used tensors
	for _, t := range byCanon {
		shapeOf[t.Orig] = t.Shape
	}
	for _, p := range parts {
		if !fusedSeen {
			shapeOf[p.Orig] = p.Shape
		}
	}
	scaleNames := make([]string, 0, len(scales))
	for w := range scales {
		scaleNames = append(scaleNames, w)
	}
	sort.Strings(scaleNames)
	scaleOf := map[string]Part{} // F8 weight's checkpoint name → its scale, as a part
	for _, w := range scaleNames {
		sr := scales[w]
		if ignoredSet[w] {
			c.Ignored = append(c.Ignored, Ignored{Name: sr.orig, Reason: "the scales of an ignored weight", Bytes: sr.source.Length})
			continue
		}
		if _, ok := f8[w]; !ok {
			what := "no such tensor"
			if sh, ok := where[w]; ok {
				what = "it is not F8_E4M3 (in " + sh + ")"
			}
			return fmt.Errorf("tensor %s (%s): a scale without its F8_E4M3 weight %s (%s)", sr.orig, sr.source.File, w, what)
		}
		if !jnf.ScaleDType(sr.dtype) {
			return fmt.Errorf("tensor %s (%s): dtype %s, want F32, BF16 or F16 (the scales of a block-FP8 weight)", sr.orig, sr.source.File, sr.dtype)
		}
		ws := shapeOf[w]
		if len(ws) != 2 {
			return fmt.Errorf("tensor %s (%s): shape %v, want 2 dimensions (an F8_E4M3 weight is a matrix)", w, f8[w], ws)
		}
		if want := ScaleShape(cfg.Quant, ws); !slices.Equal(sr.shape, want) {
			return fmt.Errorf("tensor %s (%s): shape %v, want %v = [ceil(%d/%d), ceil(%d/%d)] for weight %s %v with weight_block_size [%d, %d]",
				sr.orig, sr.source.File, sr.shape, want, ws[0], cfg.Quant.BlockN, ws[1], cfg.Quant.BlockK, w, ws, cfg.Quant.BlockN, cfg.Quant.BlockK)
		}
		scaleOf[w] = Part{Orig: sr.orig, DType: sr.dtype, Shape: sr.shape, Source: sr.source}
	}
	f8Names := make([]string, 0, len(f8))
	for w := range f8 {
		f8Names = append(f8Names, w)
	}
	sort.Strings(f8Names)
	for _, w := range f8Names {
		if _, ok := scaleOf[w]; !ok {
			return fmt.Errorf("tensor %s (%s) is F8_E4M3 but has no %s%s: a block-FP8 weight needs its scales", w, f8[w], w, jnf.ScaleSuffix)
		}
	}
	scaleTensors := map[string]TensorRef{} // canonical weight name → its scale tensor
	for _, t := range byCanon {
		if p, ok := scaleOf[t.Orig]; ok {
			scaleTensors[t.Name] = TensorRef{Name: t.Name + jnf.ScaleSuffix, Orig: p.Orig, DType: p.DType, Shape: p.Shape, Source: p.Source}
		}
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
		if st, ok := scaleTensors[e.Name]; ok {
			st.Layer = e.Layer
			c.Tensors = append(c.Tensors, st)
		}
		delete(byCanon, e.Name)
	}
	// Canonical order with the scales in: by layer, then by name
	// (X.weight sorts just before X.weight_scale_inv).
	sort.SliceStable(c.Tensors, func(i, j int) bool {
		a, b := c.Tensors[i], c.Tensors[j]
		if a.Layer != b.Layer {
			return a.Layer < b.Layer
		}
		return a.Name < b.Name
	})
	if len(byCanon) > 0 {
		var extra []string
		for n, t := range byCanon {
			extra = append(extra, fmt.Sprintf("%s (%s)", t.Orig, n))
		}
		sort.Strings(extra)
		return fmt.Errorf("%d unexpected tensor(s) for %s with this config, e.g. %s", len(extra), cfg.Arch, strings.Join(extra[:min(5, len(extra))], ", "))
	}
	c.Experts = make([][]ExpertRef, cfg.Layers)
	var first *ExpertRef // all experts share its precision
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue
		}
		c.Experts[l] = make([]ExpertRef, E)
		for e := range E {
			r := ExpertRef{Layer: l, Expert: e, Parts: make([]Part, 3, 6)}
			nf8 := 0
			for pi := range 3 {
				p, ok := parts[partKey{l, e, pi}]
				if !ok {
					return fmt.Errorf("layer %d expert %d: missing %s", l, e, jnf.ExpertParts[pi])
				}
				r.Parts[pi] = p
				if p.DType == jnf.F8E4 {
					nf8++
				}
			}
			switch nf8 {
			case 0:
			case 3:
				for pi := range 3 {
					sp := scaleOf[r.Parts[pi].Orig] // present: checked above
					sp.Name = jnf.FP8ExpertParts[3+pi]
					r.Parts = append(r.Parts, sp)
				}
			default:
				return fmt.Errorf("layer %d expert %d: gate_proj, up_proj, down_proj are %s, %s, %s: an expert's projections share one precision",
					l, e, r.Parts[0].DType, r.Parts[1].DType, r.Parts[2].DType)
			}
			if first == nil {
				first = &c.Experts[l][e]
				c.Experts[l][e] = r
			} else {
				c.Experts[l][e] = r
				if r.FP8() != first.FP8() {
					return fmt.Errorf("layer %d expert %d is %s, but layer %d expert %d is %s: all routed experts of a model share one precision",
						l, e, r.Parts[0].DType, first.Layer, first.Expert, first.Parts[0].DType)
				}
			}
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
