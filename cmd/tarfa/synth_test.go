package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// synth --jnf writes the model synth then convert write, root and all,
// with the experts --experts asks for, and it verifies.
func TestSynthJNFIsSynthThenConvert(t *testing.T) {
	tmp := t.TempDir()
	ck, a, b := filepath.Join(tmp, "ck"), filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	flags := []string{"--preset", "tiny", "--layers", "3", "--experts", "12", "--shard-bytes", "50000"}
	mustCLI(t, append([]string{"synth", "--out", ck}, flags...)...)
	mustCLI(t, "convert", ck, "--out", a)
	out := mustOut(t, append([]string{"synth", "--out", b, "--jnf", "--workers", "3", "--json"}, flags...)...)
	var res synthResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Format != "jnf" || res.Experts != 12 || res.TopK != 2 || res.Layers != 3 {
		t.Fatalf("synth --jnf: %+v", res)
	}
	va, vb := mustOut(t, "verify", a), mustOut(t, "verify", b)
	if !strings.Contains(vb, "ok: root "+strings.TrimPrefix(res.Root, "sha256:")) || va != strings.ReplaceAll(vb, b, a) {
		t.Fatalf("synth then convert:\n%s\nsynth --jnf (root %s):\n%s", va, res.Root, vb)
	}
	if m, _ := filepath.Glob(filepath.Join(tmp, ".tarfa-synth-meta-*")); len(m) > 0 {
		t.Fatalf("synth --jnf left %v", m)
	}
}
