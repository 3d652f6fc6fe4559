package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritersReplaceNothingWithoutForce: convert and synth refuse an
// output directory holding a file of the user's (a hidden ".*.tmp-*" file,
// a file named like a synth shard), naming it, and leave it as it is; with
// --force they write and still leave it. --trace and --save-trace refuse
// an existing file instead of truncating it.
func TestWritersReplaceNothingWithoutForce(t *testing.T) {
	kept := func(t *testing.T, path, want string) {
		t.Helper()
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want it untouched", path, b, err)
		}
	}
	t.Run("convert", func(t *testing.T) {
		out := t.TempDir()
		user := filepath.Join(out, ".notes.tmp-1")
		os.WriteFile(user, []byte("mine"), 0o644)
		src := fixtures + "qwen3moe-dev-a/checkpoint"
		_, err := runCLI(t, "", "convert", src, "--out", out)
		if err == nil || !strings.Contains(err.Error(), ".notes.tmp-1") || !strings.Contains(err.Error(), "--force") || exitCode(err) != 1 {
			t.Fatalf("convert into a directory of the user's: %v", err)
		}
		kept(t, user, "mine")
		if _, err := runCLI(t, "", "convert", src, "--out", out, "--force"); err != nil {
			t.Fatalf("convert --force: %v", err)
		}
		kept(t, user, "mine")
	})
	t.Run("synth", func(t *testing.T) {
		out := t.TempDir()
		user := filepath.Join(out, "model-00001-of-00001.safetensors")
		os.WriteFile(user, []byte("my shard"), 0o644)
		notes := filepath.Join(out, "notes.txt")
		os.WriteFile(notes, []byte("mine"), 0o644)
		args := []string{"synth", "--arch", "qwen3_moe", "--preset", "tiny", "--out", out}
		_, err := runCLI(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), "model-00001-of-00001.safetensors") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("synth into a directory of the user's: %v", err)
		}
		kept(t, user, "my shard")
		if _, err := runCLI(t, "", append(args, "--force")...); err != nil {
			t.Fatalf("synth --force: %v", err)
		}
		kept(t, notes, "mine")
	})
	t.Run("save-trace", func(t *testing.T) {
		tr := filepath.Join(t.TempDir(), "trace.jsonl")
		os.WriteFile(tr, []byte("mine"), 0o644)
		_, err := runCLI(t, "", simArgs("--synthetic", "zipf:s=1,reuse=0.5", "--tokens", "5", "--save-trace", tr)...)
		if err == nil || !strings.Contains(err.Error(), "--save-trace "+tr+" exists") {
			t.Fatalf("--save-trace over a file: %v", err)
		}
		kept(t, tr, "mine")
	})
}
