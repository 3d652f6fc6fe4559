package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/verify"
)

// runCLIWith runs the command line in-process under ctx with stdin and
// returns stdout and the error.
func runCLIWith(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// flipRecordByte flips a byte in the middle of the named record of a JNF
// directory (the manifest and the tables still agree).
func flipRecordByte(t *testing.T, dir, name string) {
	t.Helper()
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	i, ok := m.Index(name)
	if !ok {
		t.Fatalf("no record %s", name)
	}
	e := m.Entries[i]
	p := filepath.Join(dir, e.File)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[e.Offset+e.Length/2] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustCLI(t *testing.T, args ...string) {
	t.Helper()
	if out, err := runCLI(t, "", args...); err != nil {
		t.Fatalf("tarfa %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestExitStatusContract runs every command on each class of input and
// checks the exit status main gives its error: 0 ok; 1 usage errors, bad
// flag values, missing input and the wrong kind of directory (a Hugging Face
// checkpoint where a JNF directory is expected, and the reverse); 3 every
// digest, root, signature, manifest or replay mismatch; 130 interrupted
// (here: a cancelled context; the signal itself is tested with the built
// binary in signal_test.go).
func TestExitStatusContract(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tmp := t.TempDir()
	hfDir := fixtures + "qwen3moe-dev-a/checkpoint"
	refDir := fixtures + "qwen3moe-dev-a"
	tok := qwenTokenizerDir
	missing := filepath.Join(tmp, "does-not-exist")

	model := filepath.Join(tmp, "m")
	mustCLI(t, "convert", hfDir, "--out", model)
	other := filepath.Join(tmp, "other")
	mustCLI(t, "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", other)
	partial := filepath.Join(tmp, "partial")
	mustCLI(t, "convert", hfDir, "--out", partial, "--layers", "1-2")

	tamperedData := copyDir(t, model) // a byte of a tensor every load reads
	flipRecordByte(t, tamperedData, "model.norm.weight")
	tamperedManifest := copyDir(t, model)
	mp := filepath.Join(tamperedManifest, "manifest.json")
	mb, _ := os.ReadFile(mp)
	os.WriteFile(mp, bytes.Replace(mb, []byte(`"complete": true`), []byte(`"complete": false`), 1), 0o644)
	noConfig := copyDir(t, model)
	os.Remove(filepath.Join(noConfig, "config.json"))

	key := filepath.Join(tmp, "key")
	mustCLI(t, "keys", "generate", "--out", key)
	otherKey := filepath.Join(tmp, "other-key")
	mustCLI(t, "keys", "generate", "--out", otherKey)
	signed := copyDir(t, model)
	mustCLI(t, "manifest", "sign", signed, "--key", key)
	signedTampered := copyDir(t, signed)
	flipRecordByte(t, signedTampered, "model.layers.1.mlp.experts.3")

	prompts := filepath.Join(tmp, "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 20], "max_tokens": 3}`+"\n"), 0o644)
	gold := filepath.Join(tmp, "g")
	mustCLI(t, "golden", "record", "--model", model, "--prompts", prompts, "--out", gold)
	goldOther := filepath.Join(tmp, "g-other")
	mustCLI(t, "golden", "record", "--model", other, "--prompts", prompts, "--out", goldOther)
	goldTampered := copyDir(t, gold)
	gp := filepath.Join(goldTampered, "golden.json")
	gb, _ := os.ReadFile(gp)
	var gj map[string]any
	json.Unmarshal(gb, &gj)
	gj["vocab"] = gj["vocab"].(float64) + 1
	gb, _ = json.Marshal(gj)
	os.WriteFile(gp, gb, 0o644)
	goldEmpty := filepath.Join(tmp, "g-empty")
	os.MkdirAll(goldEmpty, 0o755)

	// A reference whose greedy continuation the model does not produce.
	refOff := copyDir(t, refDir)
	rb, _ := os.ReadFile(filepath.Join(refOff, "reference.json"))
	var rj map[string]any
	json.Unmarshal(rb, &rj)
	g0 := rj["greedy"].(map[string]any)["prompt0.fp32"].([]any)
	g0[0] = g0[0].(float64) + 1
	rb, _ = json.Marshal(rj)
	os.WriteFile(filepath.Join(refOff, "reference.json"), rb, 0o644)

	synthDone := filepath.Join(tmp, "synth-done")
	mustCLI(t, "synth", "--out", synthDone, "--no-tokenizer")

	type tc struct {
		name  string
		args  []string
		want  int
		stdin io.Reader // nil: empty
		// cancel runs the command under a cancelled context.
		cancel bool
		// msg, if set, must be in the error.
		msg string
	}
	blocked := func() io.Reader { r, _ := io.Pipe(); return r } // stdin nobody writes to
	cases := []tc{
		// run
		{name: "run ok", args: []string{"run", "--model", model, "--tokens", "1,2,3", "--max-tokens", "2"}, want: 0},
		{name: "run flag before open", args: []string{"run", "--model", missing, "x", "--max-tokens", "0"}, want: 1, msg: "--max-tokens 0"},
		{name: "run sampling flag without temperature", args: []string{"run", "--model", missing, "x", "--top-p", "0.5"}, want: 1, msg: "--top-p applies only when sampling"},
		{name: "run no prompt", args: []string{"run", "--model", missing}, want: 1, msg: "give a PROMPT"},
		{name: "run missing model", args: []string{"run", "--model", missing, "x"}, want: 1},
		{name: "run HF dir", args: []string{"run", "--model", hfDir, "x"}, want: 1, msg: "not a JNF directory"},
		{name: "run tampered record", args: []string{"run", "--model", tamperedData, "--tokens", "1"}, want: 3, msg: "model.norm.weight"},
		{name: "run edited manifest", args: []string{"run", "--model", tamperedManifest, "--tokens", "1"}, want: 3},
		{name: "run config removed", args: []string{"run", "--model", noConfig, "--tokens", "1"}, want: 3},
		{name: "run incomplete", args: []string{"run", "--model", partial, "--tokens", "1"}, want: 3, msg: "incomplete"},
		{name: "run interrupted", args: []string{"run", "--model", model, "--tokens", "1"}, cancel: true, want: 130},
		{name: "run stdin interrupted", args: []string{"run", "--model", model, "-"}, stdin: blocked(), cancel: true, want: 130},
		// verify
		{name: "verify ok", args: []string{"verify", model}, want: 0},
		{name: "verify partial", args: []string{"verify", partial}, want: 0},
		{name: "verify bad sample", args: []string{"verify", model, "--sample", "NaN"}, want: 1},
		{name: "verify missing", args: []string{"verify", missing}, want: 1},
		{name: "verify HF dir", args: []string{"verify", hfDir}, want: 1},
		{name: "verify tampered record", args: []string{"verify", tamperedData}, want: 3, msg: "model.norm.weight"},
		{name: "verify edited manifest", args: []string{"verify", tamperedManifest}, want: 3},
		{name: "verify config removed", args: []string{"verify", noConfig}, want: 3},
		{name: "verify interrupted", args: []string{"verify", model}, cancel: true, want: 130},
		// manifest show
		{name: "manifest show ok", args: []string{"manifest", "show", model}, want: 0},
		{name: "manifest show usage", args: []string{"manifest", "show", model, model}, want: 1},
		{name: "manifest show missing", args: []string{"manifest", "show", missing}, want: 1},
		{name: "manifest show HF dir", args: []string{"manifest", "show", hfDir}, want: 1},
		{name: "manifest show edited", args: []string{"manifest", "show", tamperedManifest}, want: 3},
		{name: "manifest show config removed", args: []string{"manifest", "show", noConfig}, want: 3},
		{name: "manifest show interrupted", args: []string{"manifest", "show", model}, cancel: true, want: 130},
		// manifest sign
		{name: "manifest sign ok", args: []string{"manifest", "sign", copyDir(t, model), "--key", key}, want: 0},
		{name: "manifest sign usage", args: []string{"manifest", "sign", model}, want: 1, msg: "--key"},
		{name: "manifest sign missing", args: []string{"manifest", "sign", missing, "--key", key}, want: 1},
		{name: "manifest sign HF dir", args: []string{"manifest", "sign", hfDir, "--key", key}, want: 1},
		{name: "manifest sign signed already", args: []string{"manifest", "sign", signed, "--key", key}, want: 1, msg: "--force"},
		{name: "manifest sign edited", args: []string{"manifest", "sign", copyDir(t, tamperedManifest), "--key", key}, want: 3},
		// manifest verify
		{name: "manifest verify ok", args: []string{"manifest", "verify", signed, "--pub", key + ".pub"}, want: 0},
		{name: "manifest verify usage", args: []string{"manifest", "verify", signed}, want: 1, msg: "--pub"},
		{name: "manifest verify missing", args: []string{"manifest", "verify", missing, "--pub", key + ".pub"}, want: 1},
		{name: "manifest verify HF dir", args: []string{"manifest", "verify", hfDir, "--pub", key + ".pub"}, want: 1},
		{name: "manifest verify unsigned", args: []string{"manifest", "verify", model, "--pub", key + ".pub"}, want: 1, msg: "is not signed"},
		{name: "manifest verify tampered record", args: []string{"manifest", "verify", signedTampered, "--pub", key + ".pub"}, want: 3},
		{name: "manifest verify untrusted key", args: []string{"manifest", "verify", signed, "--pub", otherKey + ".pub"}, want: 3},
		{name: "manifest verify wrong name", args: []string{"manifest", "verify", signed, "--pub", key + ".pub", "--name", "x"}, want: 3},
		{name: "manifest verify interrupted", args: []string{"manifest", "verify", signed, "--pub", key + ".pub"}, cancel: true, want: 130},
		// convert
		{name: "convert ok", args: []string{"convert", hfDir, "--out", filepath.Join(tmp, "c-ok")}, want: 0},
		{name: "convert usage", args: []string{"convert", hfDir, "--out", filepath.Join(tmp, "c"), "--workers", "0"}, want: 1},
		{name: "convert missing", args: []string{"convert", missing, "--out", filepath.Join(tmp, "c")}, want: 1},
		{name: "convert JNF dir", args: []string{"convert", model, "--out", filepath.Join(tmp, "c")}, want: 1, msg: "is a JNF directory"},
		{name: "convert interrupted", args: []string{"convert", hfDir, "--out", filepath.Join(tmp, "c-int")}, cancel: true, want: 130},
		// inspect
		{name: "inspect ok", args: []string{"inspect", hfDir}, want: 0},
		{name: "inspect usage", args: []string{"inspect"}, want: 1},
		{name: "inspect missing", args: []string{"inspect", missing}, want: 1},
		{name: "inspect JNF dir", args: []string{"inspect", model}, want: 0},
		// golden record
		{name: "golden record ok", args: []string{"golden", "record", "--model", model, "--prompts", prompts, "--out", filepath.Join(tmp, "g-ok")}, want: 0},
		{name: "golden record usage", args: []string{"golden", "record", "--model", model, "--out", filepath.Join(tmp, "g-u")}, want: 1},
		{name: "golden record missing prompts", args: []string{"golden", "record", "--model", model, "--prompts", missing, "--out", filepath.Join(tmp, "g-m")}, want: 1},
		{name: "golden record HF dir", args: []string{"golden", "record", "--model", hfDir, "--prompts", prompts, "--out", filepath.Join(tmp, "g-hf")}, want: 1},
		{name: "golden record exists", args: []string{"golden", "record", "--model", model, "--prompts", prompts, "--out", gold}, want: 1, msg: "--force"},
		{name: "golden record tampered model", args: []string{"golden", "record", "--model", tamperedData, "--prompts", prompts, "--out", filepath.Join(tmp, "g-t")}, want: 3},
		{name: "golden record interrupted", args: []string{"golden", "record", "--model", model, "--prompts", prompts, "--out", filepath.Join(tmp, "g-i")}, cancel: true, want: 130},
		// replay
		{name: "replay ok", args: []string{"replay", "--model", model, "--golden", gold}, want: 0},
		{name: "replay usage", args: []string{"replay", "--model", model}, want: 1},
		{name: "replay missing golden", args: []string{"replay", "--model", model, "--golden", missing}, want: 1},
		{name: "replay empty golden", args: []string{"replay", "--model", model, "--golden", goldEmpty}, want: 1, msg: "holds no golden record"},
		{name: "replay HF dir", args: []string{"replay", "--model", hfDir, "--golden", gold}, want: 1},
		{name: "replay tampered golden", args: []string{"replay", "--model", model, "--golden", goldTampered}, want: 3},
		{name: "replay other model", args: []string{"replay", "--model", model, "--golden", goldOther}, want: 3, msg: "not the same model"},
		{name: "replay tampered model", args: []string{"replay", "--model", tamperedData, "--golden", gold}, want: 3},
		{name: "replay interrupted", args: []string{"replay", "--model", model, "--golden", gold}, cancel: true, want: 130},
		// validate hf
		{name: "validate ok", args: []string{"validate", "hf", "--checkpoint", hfDir, "--reference", refDir}, want: 0},
		{name: "validate usage", args: []string{"validate", "hf", "--checkpoint", hfDir}, want: 1},
		{name: "validate missing reference", args: []string{"validate", "hf", "--checkpoint", hfDir, "--reference", missing}, want: 1},
		{name: "validate JNF dir", args: []string{"validate", "hf", "--checkpoint", model, "--reference", refDir}, want: 1, msg: "is a JNF directory"},
		{name: "validate out of tolerance", args: []string{"validate", "hf", "--checkpoint", hfDir, "--reference", refOff}, want: 3},
		{name: "validate interrupted", args: []string{"validate", "hf", "--checkpoint", hfDir, "--reference", refDir}, cancel: true, want: 130},
		// synth
		{name: "synth ok", args: []string{"synth", "--out", filepath.Join(tmp, "s-ok"), "--no-tokenizer"}, want: 0},
		{name: "synth usage", args: []string{"synth", "--out", filepath.Join(tmp, "s-u"), "--layers", "0"}, want: 1, msg: "--layers 0"},
		{name: "synth over a checkpoint", args: []string{"synth", "--out", synthDone}, want: 1, msg: "already holds a checkpoint"},
		{name: "synth interrupted", args: []string{"synth", "--out", filepath.Join(tmp, "s-i")}, cancel: true, want: 130},
		// tokenize, template
		{name: "tokenize ok", args: []string{"tokenize", "--tokenizer", tok, "Hello"}, want: 0},
		{name: "tokenize usage", args: []string{"tokenize", "Hello"}, want: 1},
		{name: "tokenize missing", args: []string{"tokenize", "--tokenizer", missing, "Hello"}, want: 1},
		{name: "tokenize bad stdin", args: []string{"tokenize", "--tokenizer", tok}, stdin: strings.NewReader("hello\n"), want: 1, msg: `{"text": "..."}`},
		{name: "tokenize interrupted", args: []string{"tokenize", "--tokenizer", tok}, stdin: blocked(), cancel: true, want: 130},
		{name: "template ok", args: []string{"template", "--tokenizer", tok, "hi"}, want: 0},
		{name: "template usage", args: []string{"template", "--tokenizer", tok, "--think", "maybe", "hi"}, want: 1, msg: "want true or false"},
		{name: "template missing", args: []string{"template", "--tokenizer", missing, "hi"}, want: 1},
		{name: "template interrupted", args: []string{"template", "--tokenizer", tok}, stdin: blocked(), cancel: true, want: 130},
		// keys, version, completion
		{name: "keys ok", args: []string{"keys", "generate", "--out", filepath.Join(tmp, "k-ok")}, want: 0},
		{name: "keys usage", args: []string{"keys", "generate"}, want: 1},
		{name: "keys missing dir", args: []string{"keys", "generate", "--out", filepath.Join(missing, "k")}, want: 1, msg: "does not exist"},
		{name: "keys exists", args: []string{"keys", "generate", "--out", key}, want: 1, msg: "--force"},
		{name: "version ok", args: []string{"version"}, want: 0},
		{name: "version usage", args: []string{"version", "x"}, want: 1},
		{name: "--version", args: []string{"--version"}, want: 0},
		{name: "completion", args: []string{"completion", "bash"}, want: 0},
		{name: "unknown command", args: []string{"frobnicate"}, want: 1},
		// bench (its flags are the bench commands' own)
		{name: "bench io missing", args: []string{"bench", "io", missing}, want: 1},
		{name: "bench engine HF dir", args: []string{"bench", "engine", hfDir}, want: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				cancel()
			}
			stdin := c.stdin
			if stdin == nil {
				stdin = strings.NewReader("")
			}
			_, err := runCLIWith(ctx, stdin, c.args...)
			if got := exitCode(err); got != c.want {
				t.Fatalf("tarfa %s: exit %d, want %d (%v)", strings.Join(c.args, " "), got, c.want, err)
			}
			if c.msg != "" && (err == nil || !strings.Contains(errorMessage(err), c.msg)) {
				t.Errorf("tarfa %s: %v; want it to say %q", strings.Join(c.args, " "), err, c.msg)
			}
			if err != nil && c.want == exitInterrupted && !strings.HasPrefix(errorMessage(err), "interrupted") {
				t.Errorf("tarfa %s: interrupted, but says %q", strings.Join(c.args, " "), errorMessage(err))
			}
		})
	}
}
