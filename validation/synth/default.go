package synth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/engine/tokenizer"
	"github.com/tarfa-ai/tarfa/jnf/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/verify"
)

// DefaultVersion names the embedded default model; bump it when its recipe
// changes so caches are rebuilt.
const DefaultVersion = "default-v1"

// DefaultOptions is the recipe of the embedded default model: a tiny
// Qwen3.5-MoE (Gated DeltaNet, gated attention, shared expert) with a real
// synthetic tokenizer.
func DefaultOptions() (Options, error) {
	o := Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 1}
	_, cfg, err := Config(o)
	if err != nil {
		return o, err
	}
	tok, tokCfg, err := tokenizer.SyntheticFiles(cfg.Vocab)
	if err != nil {
		return o, err
	}
	o.Extra = map[string][]byte{"tokenizer.json": tok, "tokenizer_config.json": tokCfg}
	return o, nil
}

// WithTokenizer adds a synthetic tokenizer sized to the model's vocabulary.
func WithTokenizer(o Options) (Options, error) {
	_, cfg, err := Config(o)
	if err != nil {
		return o, err
	}
	tok, tokCfg, err := tokenizer.SyntheticFiles(cfg.Vocab)
	if err != nil {
		return o, fmt.Errorf("synthetic tokenizer for vocabulary %d: %w", cfg.Vocab, err)
	}
	if o.Extra == nil {
		o.Extra = map[string][]byte{}
	}
	o.Extra["tokenizer.json"], o.Extra["tokenizer_config.json"] = tok, tokCfg
	return o, nil
}

// EnsureDefault returns the JNF directory of the embedded default model under
// cacheDir, building it on first use (synth → convert --verify → verify). An
// existing copy is re-verified from the raw bytes every time; one that fails
// is rebuilt. built reports whether it was (re)built now.
func EnsureDefault(ctx context.Context, cacheDir string) (dir string, built bool, err error) {
	base := filepath.Join(cacheDir, DefaultVersion)
	dir = filepath.Join(base, "jnf")
	if rep, err := verify.Check(ctx, dir, verify.CheckOptions{}); err == nil && rep.OK() && rep.Complete {
		return dir, false, nil
	}
	if err := os.RemoveAll(base); err != nil {
		return "", false, err
	}
	tmp := base + ".tmp"
	os.RemoveAll(tmp)
	o, err := DefaultOptions()
	if err != nil {
		return "", false, err
	}
	if err := Write(filepath.Join(tmp, "hf"), o); err != nil {
		return "", false, err
	}
	if _, err := convert.Convert(ctx, filepath.Join(tmp, "hf"), filepath.Join(tmp, "jnf"), convert.Options{LastLayer: -1, Verify: true}); err != nil {
		return "", false, err
	}
	rep, err := verify.Check(ctx, filepath.Join(tmp, "jnf"), verify.CheckOptions{})
	if err != nil {
		return "", false, err
	}
	if !rep.OK() {
		return "", false, fmt.Errorf("default model does not verify: %v", rep.Problems[0])
	}
	if err := os.Rename(tmp, base); err != nil {
		return "", false, err
	}
	return dir, true, nil
}
