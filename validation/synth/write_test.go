package synth

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/internal/outdir"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

var tiny = Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 1}

// Out-of-range options are refused, naming the option, before anything is
// allocated or written (100000 layers once took 24 GB before a byte).
func TestWriteRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Layers = -1 }, "layers -1: want 1 to 1024"},
		{func(o *Options) { o.Layers = 100000 }, "layers 100000: want 1 to 1024"},
		{func(o *Options) { o.Vocab = -5 }, "vocabulary -5"},
		{func(o *Options) { o.ShardBytes = -1 }, "shard size -1 bytes"},
		{func(o *Options) { o.Layout = "zigzag" }, `layout "zigzag"`},
		{func(o *Options) {
			o.Layers = 1024
			o.Set = map[string]any{"num_experts": 65536, "num_experts_per_tok": 2}
		}, "more than the 65536 Tarfa accepts"},
	} {
		o := tiny
		c.mod(&o)
		dir := filepath.Join(t.TempDir(), "ck")
		start := time.Now()
		err := Write(dir, o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", o, err, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%+v refused after %v", o, d)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%+v: refused options created %s", o, dir)
		}
	}
}

// Size is what Write writes.
func TestSizeIsWhatIsWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	var last, total int64
	if err := WriteContext(context.Background(), dir, tiny, WriteOptions{Progress: func(d, t int64) { last, total = d, t }}); err != nil {
		t.Fatal(err)
	}
	n, shards, err := Size(tiny)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	var idx struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
	}
	json.Unmarshal(b, &idx)
	files, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	if n != idx.Metadata.TotalSize || len(files) != shards || last != n || total != n {
		t.Errorf("Size %d bytes %d shards; wrote total_size %d in %d shards; progress %d of %d", n, shards, idx.Metadata.TotalSize, len(files), last, total)
	}
}

// An interrupted write stops at once and removes what it wrote.
func TestWriteInterrupted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var after int64
	err := WriteContext(ctx, dir, tiny, WriteOptions{Progress: func(done, total int64) {
		if done > total/2 {
			if after == 0 {
				cancel()
			}
			after++
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted write: %v", err)
	}
	if after != 1 {
		t.Errorf("%d writes after the cancellation", after-1)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(dir)
		t.Errorf("left behind: %v (%v)", ents, err)
	}
}

// What an interrupted or killed write leaves (the files it recorded in
// its write journal, their hidden temporaries, no config.json) is removed
// by the next write; anything else in the directory is refused and kept.
func TestWriteCleansLeftoversAndKeepsOthers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{".model-00001-of-00009.safetensors.tmp-123", "model-00007-of-00012.safetensors", "generation_config.json", ".tarfa.lock"} {
		os.WriteFile(filepath.Join(dir, name), []byte("stale"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, outdir.JournalName), []byte("model-00001-of-00009.safetensors\nmodel-00007-of-00012.safetensors\ngeneration_config.json\n"), 0o644)
	if err := Write(dir, tiny); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".model-00001-of-00009.safetensors.tmp-123", "model-00007-of-00012.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", name, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(left) != 0 {
		t.Errorf("temporaries left: %v", left)
	}
	if _, err := hf.Open(dir); err != nil {
		t.Errorf("the checkpoint written over leftovers: %v", err)
	}

	other := filepath.Join(t.TempDir(), "mine")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("keep me"), 0o644)
	if err := Write(other, tiny); err == nil || !strings.Contains(err.Error(), "holds notes.txt, which synth did not write") {
		t.Errorf("a directory with a foreign file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(other, "notes.txt")); string(b) != "keep me" {
		t.Error("the foreign file was changed")
	}
	if err := Write(dir, tiny); err == nil || !strings.Contains(err.Error(), "already holds a checkpoint") {
		t.Errorf("a finished checkpoint: %v", err)
	}
}

// TestWriteReplacesNothingOfTheUsers: a file named like one of synth's
// shards, or like one of its temporaries, that no synth recorded writing
// is the user's: refused and kept (synth used to delete it as "left by an
// interrupted synth"); with Force synth writes and leaves it alone unless
// it is at a name synth writes.
func TestWriteReplacesNothingOfTheUsers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	os.MkdirAll(dir, 0o755)
	user := map[string]string{"model-00007-of-00012.safetensors": "my shard", ".draft.tmp-1": "mine"}
	for n, b := range user {
		os.WriteFile(filepath.Join(dir, n), []byte(b), 0o644)
	}
	var fe *outdir.ForeignError
	if err := Write(dir, tiny); !errors.As(err, &fe) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("a directory holding the user's files: %v", err)
	}
	for n, want := range user {
		if b, err := os.ReadFile(filepath.Join(dir, n)); string(b) != want {
			t.Errorf("%s after the refusal: %q, %v", n, b, err)
		}
	}
	if err := WriteContext(context.Background(), dir, tiny, WriteOptions{Force: true}); err != nil {
		t.Fatalf("with Force: %v", err)
	}
	for n, want := range user {
		if b, err := os.ReadFile(filepath.Join(dir, n)); string(b) != want {
			t.Errorf("%s after a forced write: %q, %v", n, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, outdir.JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write journal is left after success: %v", err)
	}
}
