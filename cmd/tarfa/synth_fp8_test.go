package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// synth --dtype fp8 writes the package's FP8 checkpoint, file for file;
// without --dtype (and with --dtype bf16) the BF16 one, as before.
func TestSynthFP8(t *testing.T) {
	tmp := t.TempDir()
	flags := []string{"--arch", "qwen3_moe", "--preset", "tiny", "--seed", "9", "--no-tokenizer"}
	for _, c := range []struct {
		name string
		args []string
		o    synth.Options
	}{
		{"fp8", []string{"--dtype", "fp8"}, synth.Options{DType: synth.DTypeFP8}},
		{"bf16", nil, synth.Options{}},
		{"bf16-flag", []string{"--dtype", "bf16"}, synth.Options{}},
	} {
		out := filepath.Join(tmp, c.name)
		res := mustOut(t, append(append([]string{"synth", "--out", out, "--json"}, flags...), c.args...)...)
		var r synthResult
		if err := json.Unmarshal([]byte(res), &r); err != nil {
			t.Fatalf("%v: %s", err, res)
		}
		want := filepath.Join(tmp, c.name+"-want")
		o := c.o
		o.Arch, o.Preset, o.Seed = hf.Qwen3MoE, "tiny", 9
		if err := synth.Write(want, o); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(want)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			a, _ := os.ReadFile(filepath.Join(out, e.Name()))
			b, _ := os.ReadFile(filepath.Join(want, e.Name()))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from the package's", c.name, e.Name())
			}
		}
		cfg, _ := os.ReadFile(filepath.Join(out, "config.json"))
		if got := strings.Contains(string(cfg), `"quant_method": "fp8"`); got != (c.name == "fp8") {
			t.Errorf("%s: quantization_config in config.json: %v", c.name, got)
		}
		if wantDT := map[bool]string{true: "fp8", false: "bf16"}[c.name == "fp8"]; r.DType != wantDT {
			t.Errorf("%s: --json dtype %q, want %q", c.name, r.DType, wantDT)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dtype", "fp16"}, `--dtype "fp16": want bf16 or fp8`},
		{[]string{"--dtype", "fp8", "--layout", "fused"}, "--dtype fp8 with --layout fused: the FP8 releases store experts per expert"},
	} {
		_, stderr, err := runCLIErr(t, "", append([]string{"synth", "--out", filepath.Join(tmp, "refused")}, c.args...)...)
		if err == nil || !strings.Contains(stderr+err.Error(), c.want) {
			t.Errorf("%v: %v %s; want %q", c.args, err, stderr, c.want)
		}
	}
}
