package golden

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// File names inside a golden directory.
const (
	MetaFile   = "golden.json"
	LogitsFile = "logits.safetensors"
)

// Write stores g and the logits of runs (one per prompt record, same order)
// in dir atomically per file. Chain values and tensor names are filled in.
func Write(dir string, g *Golden, runs []Run) error {
	if len(runs) != len(g.Prompts) {
		return fmt.Errorf("golden: %d runs for %d prompts", len(runs), len(g.Prompts))
	}
	root, err := parseRoot(g.ModelRoot)
	if err != nil {
		return err
	}
	g.Format, g.Version = Format, Version
	var specs []safetensors.Spec
	rows := map[string][][]float32{}
	for i := range runs {
		r := &runs[i]
		if len(r.Logits) != len(r.Generated) {
			return fmt.Errorf("golden: prompt %d: %d logits rows for %d generated tokens", i, len(r.Logits), len(r.Generated))
		}
		for j, row := range r.Logits {
			if len(row) != g.Vocab {
				return fmt.Errorf("golden: prompt %d step %d: %d logits, vocab is %d", i, j, len(row), g.Vocab)
			}
		}
		p := &g.Prompts[i]
		p.Index = i
		p.Run = *r
		p.Tensor = fmt.Sprintf("prompt%d.logits", i)
		p.Chain = Chain(root, r)
		specs = append(specs, safetensors.Spec{Name: p.Tensor, DType: jnf.F32, Shape: []int64{int64(len(r.Logits)), int64(g.Vocab)}})
		rows[p.Tensor] = r.Logits
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err = safetensors.WriteFile(filepath.Join(dir, LogitsFile), specs, map[string]string{"format": Format, "model_root": g.ModelRoot},
		func(s safetensors.Spec, w io.Writer) error {
			for _, row := range rows[s.Name] {
				if _, err := w.Write(f32Bytes(row)); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return err
	}
	meta, err := json.MarshalIndent(g, "", " ")
	if err != nil {
		return err
	}
	return jnf.WriteFileAtomic(filepath.Join(dir, MetaFile), append(meta, '\n'), 0o644)
}

// Read loads a golden directory and checks every stored step against its
// chain value, so a golden file edited after recording is rejected.
func Read(dir string) (*Golden, []Run, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, nil, err
	}
	var g Golden
	if err := jnf.DecodeJSON(b, &g); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", filepath.Join(dir, MetaFile), err)
	}
	if g.Format != Format || g.Version != Version {
		return nil, nil, fmt.Errorf("%s: format %q version %d, want %q version %d", filepath.Join(dir, MetaFile), g.Format, g.Version, Format, Version)
	}
	root, err := parseRoot(g.ModelRoot)
	if err != nil {
		return nil, nil, err
	}
	f, err := safetensors.Open(filepath.Join(dir, LogitsFile))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	runs := make([]Run, len(g.Prompts))
	for i, p := range g.Prompts {
		t, data, err := f.ReadTensor(p.Tensor)
		if err != nil {
			return nil, nil, err
		}
		steps := len(p.Generated)
		if t.DType != jnf.F32 || len(t.Shape) != 2 || t.Shape[0] != int64(steps) || t.Shape[1] != int64(g.Vocab) {
			return nil, nil, fmt.Errorf("golden %s: tensor %s is %s %v, want F32 [%d %d]", dir, p.Tensor, t.DType, t.Shape, steps, g.Vocab)
		}
		r := p.Run
		r.Logits = make([][]float32, steps)
		for j := range steps {
			row := make([]float32, g.Vocab)
			for k := range row {
				row[k] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(j*g.Vocab+k):]))
			}
			r.Logits[j] = row
		}
		chain := Chain(root, &r)
		if len(chain) != len(p.Chain) {
			return nil, nil, fmt.Errorf("golden %s: prompt %d has %d chain values for %d steps", dir, i, len(p.Chain), len(chain))
		}
		for j := range chain {
			if chain[j] != p.Chain[j] {
				return nil, nil, fmt.Errorf("golden %s: prompt %d step %d: stored logits hash to chain %s, golden.json records %s (edited after recording?)", dir, i, j, chain[j], p.Chain[j])
			}
		}
		runs[i] = r
	}
	return &g, runs, nil
}
