// Package weightstest writes in-memory models as real JNF directories, for
// tests of the packages that consume verified weights. It has no back door
// into package weights: a test opens what it wrote with weights.Open, so its
// weights are verified exactly as a converted checkpoint's are. Production
// code must not import it (validation/depcheck_test.go enforces this).
package weightstest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/verify"
	"github.com/tarfa-ai/tarfa/weights"
)

// Model is a model held in memory: config.json, the non-expert tensors by
// canonical name, the routed experts (gate, up, down views) and other
// auxiliary files (tokenizer.json, …).
type Model struct {
	Config  []byte
	Tensors map[string]jnf.TensorView
	Experts map[weights.ExpertID][3]jnf.TensorView
	// ExpertScales, for a block-FP8 model, are each expert's three
	// weight_scale_inv tensors: its record then has the six parts of
	// jnf.FP8ExpertParts.
	ExpertScales map[weights.ExpertID][3]jnf.TensorView
	Aux          map[string][]byte
}

// ShardName is the source shard every record of a written model claims to
// come from.
const ShardName = "weightstest.safetensors"

// Write writes m as a complete JNF directory at dir (created if needed):
// one file per layer of the configuration plus global.jnf, the auxiliary
// files, and the manifest derived from them by verify.Build.
func Write(dir string, m *Model) error {
	cfg, err := hf.ParseConfig(m.Config)
	if err != nil {
		return fmt.Errorf("weightstest: config: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), m.Config, 0o644); err != nil {
		return err
	}
	for name, b := range m.Aux {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	files := map[int][]item{}
	for name, v := range m.Tensors {
		layer := -1
		if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
			n, _, _ := strings.Cut(rest, ".")
			if layer, err = strconv.Atoi(n); err != nil {
				return fmt.Errorf("weightstest: tensor %s: bad layer", name)
			}
		}
		files[layer] = append(files[layer], item{jnf.Record{Kind: jnf.KindTensor, Name: name, Layer: layer, Expert: -1,
			DType: v.DType, Shape: v.Shape, Length: int64(len(v.Data))}, v.Data})
	}
	for id, p := range m.Experts {
		r := jnf.Record{Kind: jnf.KindExpert, Name: hf.ExpertName(id.Layer, id.Expert), Layer: id.Layer, Expert: id.Expert}
		var data []byte
		views := p[:]
		if sc, ok := m.ExpertScales[id]; ok {
			views = append(views, sc[:]...)
		}
		for i, v := range views {
			r.Parts = append(r.Parts, jnf.Part{Name: jnf.FP8ExpertParts[i], DType: v.DType, Shape: v.Shape,
				Offset: int64(len(data)), Length: int64(len(v.Data))})
			data = append(data, v.Data...)
		}
		r.Length = int64(len(data))
		files[id.Layer] = append(files[id.Layer], item{r, data})
	}
	cfgSum := jnf.SHA256Bytes(m.Config).Hex()
	// Records in canonical order, with source ranges in one imaginary
	// shard laid out in file order.
	var shard int64
	shardHash := sha256.New()
	tables := map[int]*jnf.Table{}
	for l := -1; l < cfg.Layers; l++ {
		its := files[l]
		sort.Slice(its, func(i, j int) bool {
			a, b := its[i].rec, its[j].rec
			if (a.Kind == jnf.KindExpert) != (b.Kind == jnf.KindExpert) {
				return b.Kind == jnf.KindExpert
			}
			if a.Kind == jnf.KindExpert {
				return a.Expert < b.Expert
			}
			return a.Name < b.Name
		})
		t := &jnf.Table{Format: jnf.FormatName, Version: jnf.Version, File: jnf.FileName(l), Layer: l, ConfigSHA256: cfgSum}
		if l < 0 {
			t.Layout = jnf.LayoutPerExpert
		}
		for _, it := range its {
			r := it.rec
			d := jnf.SumBytes(it.data)
			r.SHA256, r.BLAKE3 = d.SHA256.Hex(), d.BLAKE3.Hex()
			if r.Kind == jnf.KindTensor {
				r.Source = []jnf.SourceRange{{File: ShardName, Offset: shard, Length: r.Length}}
			} else {
				for i := range r.Parts {
					r.Parts[i].Source = jnf.SourceRange{File: ShardName, Offset: shard + r.Parts[i].Offset, Length: r.Parts[i].Length}
				}
			}
			shard += r.Length
			shardHash.Write(it.data)
			t.Records = append(t.Records, r)
		}
		tables[l] = t
	}
	src := jnf.SourceFile{File: ShardName, Size: shard, SHA256: hex.EncodeToString(shardHash.Sum(nil))}
	for l := -1; l < cfg.Layers; l++ {
		t := tables[l]
		if len(t.Records) > 0 {
			t.Sources = []jnf.SourceFile{src}
		}
		if err := writeFile(filepath.Join(dir, t.File), t, files[l]); err != nil {
			return err
		}
	}
	man, err := verify.Build(dir)
	if err != nil {
		return fmt.Errorf("weightstest: %w", err)
	}
	return man.Write(dir)
}

type item struct {
	rec  jnf.Record
	data []byte
}

// writeFile writes a JNF file: preamble, table, records on 4096-byte
// boundaries (SPEC.md §2). its are the records' bytes in table order.
func writeFile(path string, t *jnf.Table, its []item) error {
	tableLen, size, err := jnf.PlanTable(t)
	if err != nil {
		return err
	}
	tb, err := jnf.EncodeTable(t)
	if err != nil {
		return err
	}
	if len(tb) != tableLen {
		return fmt.Errorf("weightstest: table length changed")
	}
	out := make([]byte, size)
	copy(out, jnf.Preamble(tb))
	copy(out[jnf.PreambleSize:], tb)
	for i, it := range its {
		copy(out[t.Records[i].Offset:], it.data)
	}
	return os.WriteFile(path, out, 0o644)
}

// Open writes m into a new temporary directory and opens it with
// weights.Open; the checkpoint is closed when the test ends.
func Open(t testing.TB, m *Model) *weights.Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := Write(dir, m); err != nil {
		t.Fatal(err)
	}
	ck, err := weights.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}
