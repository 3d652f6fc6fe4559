package hf

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

func open(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *Checkpoint, s Source) []byte {
	t.Helper()
	b := make([]byte, s.Length)
	if err := c.ReadSource(s, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFixtureLayoutsAgree(t *testing.T) {
	per := open(t, fixtures+"qwen35moe-dev-c/checkpoint")
	fused := open(t, fixtures+"qwen35moe-dev-c/checkpoint-official")
	if per.Layout != LayoutPerExpert || fused.Layout != LayoutFused {
		t.Fatalf("layouts %s / %s", per.Layout, fused.Layout)
	}
	if len(per.Ignored) != 0 || len(fused.Ignored) == 0 {
		t.Errorf("ignored: per %d fused %d", len(per.Ignored), len(fused.Ignored))
	}
	for _, ig := range fused.Ignored {
		if !strings.HasPrefix(ig.Name, "mtp.") && !strings.HasPrefix(ig.Name, "model.visual.") {
			t.Errorf("unexpectedly ignored %s (%s)", ig.Name, ig.Reason)
		}
	}
	if len(per.Tensors) != len(fused.Tensors) {
		t.Fatalf("tensor counts %d vs %d", len(per.Tensors), len(fused.Tensors))
	}
	for i, a := range per.Tensors {
		b := fused.Tensors[i]
		if a.Name != b.Name {
			t.Fatalf("tensor %d: %s vs %s", i, a.Name, b.Name)
		}
		if a.DType == b.DType && !bytes.Equal(read(t, per, a.Source), read(t, fused, b.Source)) {
			t.Errorf("%s: bytes differ between layouts", a.Name)
		}
	}
	// Expert bytes are identical in both layouts: the fused slices are exactly the per-expert tensors.
	for l := range per.Experts {
		for e := range per.Experts[l] {
			for p := range 3 {
				a, b := per.Experts[l][e].Parts[p], fused.Experts[l][e].Parts[p]
				if !bytes.Equal(read(t, per, a.Source), read(t, fused, b.Source)) {
					t.Fatalf("layer %d expert %d %s: bytes differ between layouts", l, e, a.Name)
				}
			}
		}
	}
}

func TestAllFixturesOpen(t *testing.T) {
	for _, d := range []string{"qwen3moe-dev-a/checkpoint", "qwen35moe-dev-e-long/checkpoint"} {
		c := open(t, fixtures+d)
		if len(c.Experts) != c.Config.Layers || len(c.Experts[0]) != c.Config.Experts {
			t.Errorf("%s: experts %d×%d", d, len(c.Experts), len(c.Experts[0]))
		}
	}
}

// copyCheckpoint copies a fixture so a test can damage it.
func copyCheckpoint(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

func editIndex(t *testing.T, dir string, f func(m map[string]string)) {
	p := filepath.Join(dir, "model.safetensors.index.json")
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &idx)
	f(idx.WeightMap)
	b, _ = json.Marshal(idx)
	os.WriteFile(p, b, 0o644)
}

func TestCheckpointRejections(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	t.Run("wrong shard in index", func(t *testing.T) {
		d := copyCheckpoint(t, src)
		editIndex(t, d, func(m map[string]string) {
			for k, v := range m {
				if k == "model.norm.weight" {
					for _, other := range m {
						if other != v {
							m[k] = other
							return
						}
					}
				}
			}
		})
		_, err := Open(d)
		if err == nil || !strings.Contains(err.Error(), `tensor "model.norm.weight" is listed in shard`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("tensor missing from index", func(t *testing.T) {
		d := copyCheckpoint(t, src)
		editIndex(t, d, func(m map[string]string) { delete(m, "model.norm.weight") })
		_, err := Open(d)
		if err == nil || !strings.Contains(err.Error(), "not listed in the index") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing expected tensor", func(t *testing.T) {
		d := copyCheckpoint(t, src)
		cfg, _ := os.ReadFile(filepath.Join(d, "config.json"))
		os.WriteFile(filepath.Join(d, "config.json"), bytes.Replace(cfg, []byte(`"tie_word_embeddings": false`), []byte(`"tie_word_embeddings": true`), 1), 0o644)
		c, err := Open(d)
		if err != nil {
			t.Fatalf("tied config with an lm_head present: %v", err)
		}
		found := false
		for _, ig := range c.Ignored {
			found = found || ig.Name == "lm_head.weight"
		}
		if !found {
			t.Error("lm_head.weight of a tied model is not listed as ignored")
		}
		c.Close()
	})
	t.Run("shape mismatch", func(t *testing.T) {
		d := copyCheckpoint(t, src)
		cfg, _ := os.ReadFile(filepath.Join(d, "config.json"))
		os.WriteFile(filepath.Join(d, "config.json"), bytes.Replace(cfg, []byte(`"moe_intermediate_size": 32`), []byte(`"moe_intermediate_size": 16`), 1), 0o644)
		_, err := Open(d)
		if err == nil || !strings.Contains(err.Error(), "shape [64 32], want [64 16]") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("no weights", func(t *testing.T) {
		d := t.TempDir()
		b, _ := os.ReadFile(filepath.Join(src, "config.json"))
		os.WriteFile(filepath.Join(d, "config.json"), b, 0o644)
		_, err := Open(d)
		if err == nil || !strings.Contains(err.Error(), "neither model.safetensors.index.json nor model.safetensors") {
			t.Errorf("got %v", err)
		}
	})
}

func TestSummaryArithmetic(t *testing.T) {
	c := open(t, fixtures+"qwen35moe-dev-c/checkpoint-official")
	s := c.Summarize()
	cfg := c.Config
	if s.ExpertBytes != 3*int64(cfg.MoEIntermediate)*int64(cfg.Hidden)*2 {
		t.Errorf("bytes per expert %d", s.ExpertBytes)
	}
	if s.RoutedPerToken != int64(cfg.TopK*cfg.Layers)*s.ExpertBytes || s.RoutedTotal != int64(cfg.Experts*cfg.Layers)*s.ExpertBytes {
		t.Errorf("routed per token %d total %d", s.RoutedPerToken, s.RoutedTotal)
	}
	var sum int64
	for _, cat := range s.Categories {
		sum += cat.Bytes
	}
	if sum != s.Total || s.Total+s.Ignored+headerBytes(c) != s.ShardBytes {
		t.Errorf("categories %d total %d ignored %d shards %d", sum, s.Total, s.Ignored, s.ShardBytes)
	}
	if s.IgnoredTensors == 0 || len(s.IgnoredPrefixes) != 2 {
		t.Errorf("ignored %d %v", s.IgnoredTensors, s.IgnoredPrefixes)
	}
	if s.FullAttention != 1 || s.LinearAttention != 3 {
		t.Errorf("layer types %d/%d", s.FullAttention, s.LinearAttention)
	}
}

func headerBytes(c *Checkpoint) int64 {
	var n int64
	for _, f := range c.files {
		n += f.DataStart
	}
	return n
}

func TestSingleFileCheckpoint(t *testing.T) {
	// Merge dev-a's shards into one model.safetensors without an index.
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	per := open(t, src)
	d := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(src, "config.json"))
	os.WriteFile(filepath.Join(d, "config.json"), b, 0o644)
	var specs []safetensors.Spec
	data := map[string][]byte{}
	for _, sh := range per.Shards {
		f, _ := per.ShardFile(sh.File)
		for _, tt := range f.Tensors {
			specs = append(specs, safetensors.Spec{Name: tt.Name, DType: tt.DType, Shape: tt.Shape})
			_, data[tt.Name], _ = f.ReadTensor(tt.Name)
		}
	}
	err := safetensors.WriteFile(filepath.Join(d, "model.safetensors"), specs, nil, func(s safetensors.Spec, w io.Writer) error {
		_, err := w.Write(data[s.Name])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	one := open(t, d)
	if len(one.Shards) != 1 || len(one.Tensors) != len(per.Tensors) {
		t.Fatalf("single file: %d shards, %d tensors", len(one.Shards), len(one.Tensors))
	}
	for l := range one.Experts {
		for e := range one.Experts[l] {
			if !bytes.Equal(read(t, one, one.Experts[l][e].Parts[1].Source), read(t, per, per.Experts[l][e].Parts[1].Source)) {
				t.Fatalf("layer %d expert %d differs", l, e)
			}
		}
	}
}
