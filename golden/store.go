package golden

import (
	"encoding/binary"
	"encoding/hex"
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
	if len(g.Prompts) == 0 {
		return fmt.Errorf("golden: no prompts")
	}
	d := promptSetDigest(root, g.Prompts)
	g.PromptSet = PromptSet{Count: len(g.Prompts), SHA256: hex.EncodeToString(d[:])}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err = safetensors.WriteFile(filepath.Join(dir, LogitsFile), specs, map[string]string{"format": Format, "model_root": g.ModelRoot, "prompt_set": g.PromptSet.SHA256},
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

// Read loads a golden directory and checks it against itself: golden.json
// (a regular file of at most jnf.MaxJSONMetaSize bytes, strict JSON) must
// commit to its prompt set (count and digest, see the package comment),
// every prompt must name its own tensor, the logits file must hold exactly
// those tensors and repeat the prompt-set digest, and every stored step must
// match its chain value — so a golden record edited after recording, or with
// prompts removed, is rejected. Every such failure matches
// jnf.ErrVerification.
func Read(dir string) (*Golden, []Run, error) {
	meta := filepath.Join(dir, MetaFile)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("golden %s: %s: %w", dir, fmt.Sprintf(format, a...), jnf.ErrVerification)
	}
	b, err := jnf.ReadFileLimit(meta, jnf.MaxJSONMetaSize, MetaFile)
	if err != nil {
		return nil, nil, err
	}
	var g Golden
	if err := jnf.DecodeJSON(b, &g); err != nil {
		return nil, nil, bad("%s: %v", MetaFile, err)
	}
	if g.Format != Format || g.Version != Version {
		return nil, nil, bad("%s: format %q version %d, want %q version %d", MetaFile, g.Format, g.Version, Format, Version)
	}
	root, err := parseRoot(g.ModelRoot)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if g.Vocab <= 0 {
		return nil, nil, bad("vocab %d", g.Vocab)
	}
	if len(g.Prompts) == 0 || g.PromptSet.Count != len(g.Prompts) {
		return nil, nil, bad("prompt_set says %d prompts, golden.json has %d (a golden record has at least one)", g.PromptSet.Count, len(g.Prompts))
	}
	if d := promptSetDigest(root, g.Prompts); hex.EncodeToString(d[:]) != g.PromptSet.SHA256 {
		return nil, nil, bad("the prompts hash to prompt_set %x, golden.json records %s (prompts edited, added or removed?)", d, g.PromptSet.SHA256)
	}
	f, err := safetensors.Open(filepath.Join(dir, LogitsFile))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if got := f.Metadata["prompt_set"]; got != g.PromptSet.SHA256 || f.Metadata["model_root"] != g.ModelRoot {
		return nil, nil, bad("%s was written for prompt set %q of model %q, golden.json is %s of %s", LogitsFile, got, f.Metadata["model_root"], g.PromptSet.SHA256, g.ModelRoot)
	}
	named := map[string]int{}
	for i, p := range g.Prompts {
		if p.Index != i {
			return nil, nil, bad("prompt record %d has index %d", i, p.Index)
		}
		if prev, dup := named[p.Tensor]; dup {
			return nil, nil, bad("prompts %d and %d both name the logits tensor %q", prev, i, p.Tensor)
		}
		named[p.Tensor] = i
	}
	for _, name := range f.Names() {
		if _, ok := named[name]; !ok {
			return nil, nil, bad("%s holds tensor %q, which no prompt names", LogitsFile, name)
		}
	}
	runs := make([]Run, len(g.Prompts))
	for i, p := range g.Prompts {
		t, ok := f.Lookup(p.Tensor)
		if !ok {
			return nil, nil, bad("prompt %d: %s has no tensor %q", i, LogitsFile, p.Tensor)
		}
		steps := len(p.Generated)
		if t.DType != jnf.F32 || len(t.Shape) != 2 || t.Shape[0] != int64(steps) || t.Shape[1] != int64(g.Vocab) {
			return nil, nil, bad("tensor %s is %s %v, want F32 [%d %d]", p.Tensor, t.DType, t.Shape, steps, g.Vocab)
		}
		_, data, err := f.ReadTensor(p.Tensor)
		if err != nil {
			return nil, nil, err
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
			return nil, nil, bad("prompt %d has %d chain values for %d steps", i, len(p.Chain), len(chain))
		}
		for j := range chain {
			if chain[j] != p.Chain[j] {
				return nil, nil, bad("prompt %d step %d: stored logits hash to chain %s, golden.json records %s (edited after recording?)", i, j, chain[j], p.Chain[j])
			}
		}
		runs[i] = r
	}
	return &g, runs, nil
}
