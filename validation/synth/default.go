package synth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/tokenizer"
	"github.com/tarfa-ai/tarfa/verify"
)

// DefaultVersion names the embedded default model; bump it when its recipe
// changes so caches are rebuilt.
const DefaultVersion = "default-v2"

// defaultAttnStd is the spread of the default model's attention weights
// (Options.AttnStd), so that attention moves the residual stream as much as
// the last token's embedding does and the reply depends on the whole
// prompt. With the initializer's 0.02 everywhere (default-v1) the last
// token's embedding dominated, and every chat prompt, which ends in the
// same template tokens, got the same reply.
const defaultAttnStd = 0.6

// DefaultOptions is the recipe of the embedded default model: a tiny
// Qwen3.5-MoE (Gated DeltaNet, gated attention, shared expert) with a real
// synthetic tokenizer.
func DefaultOptions() (Options, error) {
	o := Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 1, AttnStd: defaultAttnStd}
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

// DefaultRoot is the manifest root of the embedded default model. Its
// recipe is deterministic and build-invariant, so every build writes exactly
// this model; a cached copy with any other root (however consistent with
// itself) is not the default model and is rebuilt. Change it only together
// with the recipe (and DefaultVersion).
const DefaultRoot = "7de94bd967451577eabadf7d0b8f8992bb8465559f765bb6478af182a95e2818"

// EnsureOptions reports what EnsureDefaultWith does.
type EnsureOptions struct {
	// Rebuilding, if set, is told why the cached copy is not used before it
	// is rebuilt ("no cached copy", what failed verification, another root).
	Rebuilding func(reason string)
	// Waiting, if set, is called while another process holds the cache's
	// lock (building the model), with its pid.
	Waiting func(pid int)
}

// Converted writes the checkpoint of o into DIR/hf and converts it (with
// --verify) into DIR/jnf, whose path it returns: synth then convert, e.g.
// for the default model's recipe in block FP8 (o.DType = DTypeFP8).
func Converted(ctx context.Context, dir string, o Options) (string, error) {
	if err := WriteContext(ctx, filepath.Join(dir, "hf"), o, WriteOptions{}); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "jnf")
	if _, err := convert.Convert(ctx, filepath.Join(dir, "hf"), out, convert.Options{LastLayer: -1, Verify: true}); err != nil {
		return "", err
	}
	return out, nil
}

// EnsureDefault is EnsureDefaultWith without reports.
func EnsureDefault(ctx context.Context, cacheDir string) (dir string, built bool, err error) {
	return EnsureDefaultWith(ctx, cacheDir, EnsureOptions{})
}

// EnsureDefaultWith returns the JNF directory of the embedded default model
// under cacheDir, building it on first use (synth → convert --verify →
// verify). An existing copy is re-verified from the raw bytes every time and
// must have the pinned DefaultRoot; one that does not is rebuilt (saying
// why). Concurrent first uses by several processes are safe: one builds
// while the others wait on cacheDir's lock, then use its copy. built reports
// whether it was (re)built now.
func EnsureDefaultWith(ctx context.Context, cacheDir string, opt EnsureOptions) (dir string, built bool, err error) {
	base := filepath.Join(cacheDir, DefaultVersion)
	dir = filepath.Join(base, "jnf")
	if checkDefault(ctx, dir) == nil {
		return dir, false, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", false, err
	}
	lock, err := flock.Acquire(ctx, filepath.Join(cacheDir, DefaultVersion+".lock"), opt.Waiting)
	if err != nil {
		return "", false, err
	}
	defer lock.Unlock()
	// Another process may have built it while this one waited.
	why := checkDefault(ctx, dir)
	if why == nil {
		return dir, false, nil
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if opt.Rebuilding != nil {
		opt.Rebuilding(why.Error())
	}
	tmp := base + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", false, err
	}
	o, err := DefaultOptions()
	if err != nil {
		return "", false, err
	}
	if _, err := Converted(ctx, tmp, o); err != nil {
		return "", false, err
	}
	if err := checkDefault(ctx, filepath.Join(tmp, "jnf")); err != nil {
		return "", false, fmt.Errorf("the default model's recipe did not produce the model this binary pins (a bug in this build): %w", err)
	}
	if err := os.RemoveAll(base); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp, base); err != nil {
		return "", false, err
	}
	return dir, true, nil
}

// checkDefault verifies dir from the raw bytes and requires DefaultRoot;
// the error says what is wrong with it, for people.
func checkDefault(ctx context.Context, dir string) error {
	rep, err := verify.Check(ctx, dir, verify.CheckOptions{})
	var nj *verify.NotJNFError
	switch {
	case errors.As(err, &nj):
		return fmt.Errorf("no cached copy in %s", dir)
	case err != nil:
		return fmt.Errorf("the cached copy in %s could not be checked: %w", dir, err)
	case !rep.OK():
		return fmt.Errorf("the cached copy in %s failed verification (%d %s), first: %v", dir, len(rep.Problems), map[bool]string{true: "problem", false: "problems"}[len(rep.Problems) == 1], rep.Problems[0])
	case !rep.Complete:
		return fmt.Errorf("the cached copy in %s is incomplete", dir)
	case rep.Root != DefaultRoot:
		return fmt.Errorf("the cached copy in %s has root %s, the embedded default model is %s (a model made to look like it)", dir, rep.Root, DefaultRoot)
	}
	return nil
}
