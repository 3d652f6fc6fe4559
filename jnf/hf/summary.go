package hf

import (
	"sort"
	"strings"
)

// Category totals for `tarfa inspect`.
type Category struct {
	Name    string `json:"name"`
	Tensors int    `json:"tensors"` // expert records count as one each
	Bytes   int64  `json:"bytes"`
}

// Summary is the arithmetic users want before converting a checkpoint.
type Summary struct {
	Arch      Arch   `json:"arch"`
	ModelType string `json:"model_type"`
	Layout    string `json:"expert_layout"`
	Precision string `json:"precision"` // Config.Precision
	// ExpertScaleBytes is the part of ExpertBytes that is block-FP8
	// scales (0 for an unquantised checkpoint).
	ExpertScaleBytes int64      `json:"scale_bytes_per_expert"`
	Layers           int        `json:"layers"`
	FullAttention    int        `json:"full_attention_layers"`
	LinearAttention  int        `json:"linear_attention_layers"`
	SparseLayers     int        `json:"moe_layers"`
	Experts          int        `json:"experts"`
	TopK             int        `json:"experts_per_token"`
	ExpertBytes      int64      `json:"bytes_per_expert"`
	RoutedPerToken   int64      `json:"routed_expert_bytes_per_token"`
	ActivePerToken   int64      `json:"active_bytes_per_token"`
	RoutedTotal      int64      `json:"routed_expert_bytes"`
	Total            int64      `json:"total_bytes"` // converted tensors (excludes ignored)
	Ignored          int64      `json:"ignored_bytes"`
	IgnoredTensors   int        `json:"ignored_tensors"`
	Shards           int        `json:"shards"`
	ShardBytes       int64      `json:"shard_bytes"`
	Categories       []Category `json:"categories"`
	IgnoredPrefixes  []string   `json:"ignored_prefixes,omitempty"`
	UnusedEmbedBytes int64      `json:"-"`
}

// categoryOf classifies a canonical non-expert tensor name.
func categoryOf(name string) string {
	switch {
	case strings.HasSuffix(name, ".weight_scale_inv"):
		return "block-FP8 scales"
	case strings.Contains(name, ".mlp.shared_expert"):
		return "shared experts"
	case strings.HasSuffix(name, ".mlp.gate.weight"):
		return "routers"
	case strings.Contains(name, ".self_attn."):
		return "full attention"
	case strings.Contains(name, ".linear_attn."):
		return "linear attention (Gated DeltaNet)"
	case strings.Contains(name, "embed_tokens"):
		return "embeddings"
	case name == "lm_head.weight":
		return "lm_head"
	case strings.Contains(name, "layernorm") || name == "model.norm.weight":
		return "norms"
	case strings.Contains(name, ".mlp."):
		return "dense MLP"
	}
	return "other"
}

// Summarize computes the summary of an opened checkpoint.
func (c *Checkpoint) Summarize() Summary {
	cfg := c.Config
	s := Summary{Arch: cfg.Arch, ModelType: cfg.ModelType, Layout: c.Layout, Precision: cfg.Precision(), Layers: cfg.Layers,
		SparseLayers: cfg.NumSparseLayers(), Experts: cfg.Experts, TopK: cfg.TopK, Shards: len(c.Shards)}
	for _, t := range cfg.LayerTypes {
		if t == FullAttention {
			s.FullAttention++
		} else {
			s.LinearAttention++
		}
	}
	for _, sh := range c.Shards {
		s.ShardBytes += sh.Size
	}
	cats := map[string]*Category{}
	add := func(name string, n int, b int64) {
		if cats[name] == nil {
			cats[name] = &Category{Name: name}
		}
		cats[name].Tensors += n
		cats[name].Bytes += b
	}
	var embedRow int64
	for _, t := range c.Tensors {
		add(categoryOf(t.Name), 1, t.Source.Length)
		s.Total += t.Source.Length
		if t.Name == "model.embed_tokens.weight" {
			embedRow = t.Source.Length / int64(cfg.Vocab)
			s.UnusedEmbedBytes = t.Source.Length - embedRow
		}
	}
	for _, layer := range c.Experts {
		for _, e := range layer {
			add("routed experts", 1, e.Length())
			s.RoutedTotal += e.Length()
			s.Total += e.Length()
			if s.ExpertBytes == 0 {
				s.ExpertBytes = e.Length()
				for _, p := range e.Parts[min(3, len(e.Parts)):] {
					s.ExpertScaleBytes += p.Source.Length
				}
			}
		}
	}
	s.RoutedPerToken = int64(cfg.TopK) * int64(s.SparseLayers) * s.ExpertBytes
	// Active per token: every non-expert byte except the unused embedding
	// rows (one row is read; lm_head is read whole), plus top-k experts per MoE layer.
	s.ActivePerToken = s.Total - s.RoutedTotal - s.UnusedEmbedBytes + s.RoutedPerToken
	if cfg.Tied {
		s.ActivePerToken += s.UnusedEmbedBytes // the tied embedding is read whole as the LM head
	}
	pfx := map[string]bool{}
	for _, ig := range c.Ignored {
		s.Ignored += ig.Bytes
		s.IgnoredTensors++
		p := ig.Name
		if i := strings.Index(p, "."); i >= 0 {
			p = p[:i+1]
			if strings.HasPrefix(ig.Name, "model.visual.") {
				p = "model.visual."
			}
		}
		pfx[p+"* ("+ig.Reason+")"] = true
	}
	for p := range pfx {
		s.IgnoredPrefixes = append(s.IgnoredPrefixes, p)
	}
	sort.Strings(s.IgnoredPrefixes)
	for _, c := range cats {
		s.Categories = append(s.Categories, *c)
	}
	sort.Slice(s.Categories, func(i, j int) bool { return s.Categories[i].Bytes > s.Categories[j].Bytes })
	return s
}
