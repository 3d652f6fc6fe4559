package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// Tests of the newcomer review of December 2026: each names its finding.

// p3, F35, F44: argument errors say what the command takes and show its
// usage line, in the user's words; an argument that looks like a flag
// ("-5 degrees?") gets the hint to put -- before it.
func TestUsageErrorsShowTheUsageLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"inspect"}, []string{"inspect: want 1 argument, got none", "usage: tarfa inspect DIR", "see tarfa inspect --help"}},
		{[]string{"verify", "a", "b"}, []string{"verify: want at most 1 argument, got 2", "usage: tarfa verify [DIR]"}},
		{[]string{"golden", "record", "x"}, []string{`golden record: takes no arguments, got "x"`, "usage: tarfa golden record"}},
		{[]string{"run", "-5 degrees?"}, []string{"unknown shorthand flag", `put -- before it: tarfa run -- "-5 degrees?"`}},
		{[]string{"run", "--max-tokens", "3", "-5"}, []string{`tarfa run -- "-5"`}},
	} {
		_, err := runCLI(t, "", c.args...)
		if exitCode(err) != exitError {
			t.Errorf("%q: exit %d (%v)", c.args, exitCode(err), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q lacks %q", c.args, err, w)
			}
		}
		if strings.Contains(err.Error(), "arg(s)") {
			t.Errorf("%q: cobra's words: %q", c.args, err)
		}
	}
	// A mistyped flag is not an argument: no hint.
	if _, err := runCLI(t, "", "run", "--modle", "x"); err == nil || strings.Contains(err.Error(), "put --") {
		t.Errorf("--modle: %v", err)
	}
}

// p4, F36: golden record and replay default to the embedded model, and
// their usage lines show --model as optional.
func TestGoldenUsageShowsModelOptional(t *testing.T) {
	root := newRootCommand()
	for _, path := range [][]string{{"golden", "record"}, {"replay"}} {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		if use := c.UseLine(); !strings.Contains(use, "[--model DIR]") {
			t.Errorf("%s: usage %q shows --model as required", c.CommandPath(), use)
		}
		if f := c.Flags().Lookup("model"); f == nil || f.DefValue != "" || !strings.Contains(f.Usage, "default: the embedded default model") {
			t.Errorf("%s: --model %+v", c.CommandPath(), f)
		}
	}
}

// p5: keys generate without --out says so as the other commands do.
func TestKeysGenerateNeedsOut(t *testing.T) {
	_, err := runCLI(t, "", "keys", "generate")
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "--out NAME is required") {
		t.Errorf("keys generate: %v", err)
	}
}

// m7, F39: verify's problem table fits an 80-column terminal (digests cut
// to 12 hex digits, long problems broken over lines, the records of a
// missing file on one row); the error message and --json keep the full
// digests.
func TestVerifyProblemTableFitsATerminal(t *testing.T) {
	dir := convertedDevA(t)
	flipRecordByte(t, dir, "model.layers.1.mlp.experts.7")
	if err := os.Remove(filepath.Join(dir, "layer-00002.jnf")); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "verify", dir)
	if exitCode(err) != exitNotExact {
		t.Fatalf("verify: exit %d (%v)", exitCode(err), err)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 && !strings.Contains(line, dir) {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	full := regexp.MustCompile(`[0-9a-f]{64}`)
	if !strings.Contains(out, "layer 1 expert 7") || !regexp.MustCompile(`got [0-9a-f]{12}…`).MatchString(out) || full.MatchString(out) ||
		!strings.Contains(out, "17 records") || !strings.Contains(out, "--json") {
		t.Errorf("table:\n%s", out)
	}
	if !strings.Contains(err.Error(), "18 problems, first: ") {
		t.Errorf("error: %v", err)
	}
	js, _ := runCLI(t, "", "verify", dir, "--json")
	if len(full.FindAllString(js, -1)) < 2 {
		t.Errorf("--json lacks the full digests: %s", js)
	}
}

// p1, F33: counts agree with their nouns: "1 thread", "1 prompt",
// "1 client", "1 problem" ("0 replies", "2 threads").
func TestCountsAgreeWithTheirNouns(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 replies"}, {1, "1 reply"}, {2, "2 replies"}} {
		if got := plural(c.n, "reply", "replies"); got != c.want {
			t.Errorf("plural(%d) = %q", c.n, got)
		}
	}
	model := convertedDevA(t)
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 3}`+"\n"), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	mustCLI(t, "golden", "record", "--model", model, "--prompts", prompts, "--out", g, "--threads", "1")
	out, stderr, err := runCLIErr(t, "", "replay", "--model", model, "--golden", g, "--threads", "1")
	if err != nil || !strings.Contains(out, "(1 prompt) · backend cpu, 1 thread (recorded on cpu, 1 thread)") || !strings.Contains(stderr, "backend cpu (1 thread)") {
		t.Errorf("replay: %v\n%s\n%s", err, out, stderr)
	}
	out, err = runCLI(t, "", "bench", "serve", "--model", model, "--clients", "1", "--max-tokens", "2", "--prompt-tokens", "2", "--threads", "1")
	if err != nil || !strings.Contains(out, "1 client:") || strings.Contains(out, "1 clients") || !strings.Contains(out, "tokens computed per batch step") {
		t.Errorf("bench serve: %v\n%s", err, out)
	}
	flipRecordByte(t, model, "model.layers.1.mlp.experts.7")
	if _, err := runCLI(t, "", "verify", model); err == nil || !strings.Contains(err.Error(), ": 1 problem, first") {
		t.Errorf("verify: %v", err)
	}
}

// m8: a --ram-budget above the machine's memory is flagged, saying whether
// the experts fit all the same; the banner says what the tier holds.
func TestRAMBudgetAboveMemoryIsFlagged(t *testing.T) {
	const gib = 1 << 30
	if w := ramBudgetWarning(64*gib, 32, 12<<10, 23*gib); !strings.Contains(w, "--ram-budget 64.0 GiB is more than this machine's memory (23.0 GiB)") || !strings.Contains(w, "holds at most 384.0 KiB here, which fits") {
		t.Errorf("experts that fit: %q", w)
	}
	if w := ramBudgetWarning(64*gib, 4000, 16<<20, 23*gib); !strings.Contains(w, "may grow to 62.5 GiB") {
		t.Errorf("experts that do not fit: %q", w)
	}
	if w := ramBudgetWarning(16*gib, 4000, 16<<20, 23*gib); w != "" {
		t.Errorf("a budget within the memory: %q", w)
	}
	if w := ramBudgetWarning(64*gib, 32, 12<<10, 0); w != "" {
		t.Errorf("memory unknown: %q", w)
	}
	if tier.TotalMemory() <= 0 {
		t.Skip("the machine's memory is unknown here")
	}
	model := convertedDevA(t)
	_, stderr, err := runCLIErr(t, "", "run", "--model", model, "--tokens", "1,2", "--max-tokens", "1", "--ram-budget", "1000TiB")
	if err != nil || !strings.Contains(stderr, "warning: --ram-budget 1000.0 TiB is more than this machine's memory") || !strings.Contains(stderr, "(all of them, ") {
		t.Errorf("run: %v\n%s", err, stderr)
	}
}

// m11: synth --layers states the effective maximum of the preset (the
// real presets are bounded by the routed experts of the whole model), in
// its help and in the error, before anything is written; that maximum is
// accepted.
func TestSynthLayersStatesTheEffectiveMaximum(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x")
	for _, c := range []struct {
		arch, layers, want string
	}{
		{"qwen3_5_moe", "1024", "--layers 1024: want 1 to 256 for the real preset of qwen3_5_moe (256 routed experts a layer"},
		{"qwen3_5_moe", "257", "want 1 to 256"},
		{"qwen3_moe", "513", "want 1 to 512 for the real preset of qwen3_moe (128 routed experts a layer"},
	} {
		_, err := runCLI(t, "", "synth", "--arch", c.arch, "--preset", "real", "--layers", c.layers, "--out", out)
		if exitCode(err) != exitError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s --layers %s: %v", c.arch, c.layers, err)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out was created: %v", err)
	}
	// Options that fail at one layer for another reason say that reason,
	// not a range of layers.
	if _, err := runCLI(t, "", "synth", "--arch", "qwen3_5_moe", "--preset", "real", "--layers", "1", "--experts", "4", "--out", out); exitCode(err) != exitError ||
		!strings.Contains(err.Error(), "num_experts_per_tok 8 > number of experts 4") {
		t.Errorf("--layers 1 --experts 4 (below top-k 8): %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out was created: %v", err)
	}
	most, experts := maxSynthLayers(synth.Options{Arch: hf.Qwen35MoE, Preset: "real", Layout: hf.LayoutPerExpert})
	if most != 256 || experts != 256 {
		t.Errorf("maxSynthLayers: %d layers of %d experts", most, experts)
	}
	c, _, _ := newRootCommand().Find([]string{"synth"})
	if u := c.Flags().Lookup("layers").Usage; !strings.Contains(u, "with --preset real 1 to 256 (512 with --arch qwen3_moe)") {
		t.Errorf("--layers help: %q", u)
	}
}

// p11, F24: validate hf converts into a new directory under --scratch,
// removes it when done and leaves what was there alone; a --scratch that
// is no directory is refused before converting.
func TestValidateScratch(t *testing.T) {
	scratch := t.TempDir()
	keep := filepath.Join(scratch, "keep")
	os.WriteFile(keep, []byte("data"), 0o644)
	args := []string{"validate", "hf", "--checkpoint", devACheckpoint, "--reference", fixtures + "qwen3moe-dev-a"}
	if _, err := runCLI(t, "", append(args, "--scratch", scratch)...); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 1 || ents[0].Name() != "keep" {
		t.Errorf("--scratch left %v", ents)
	}
	_, err := runCLI(t, "", append(args, "--scratch", keep)...)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "--scratch "+keep+": not a directory") {
		t.Errorf("--scratch a file: %v", err)
	}
}

// m9: convert's summary gives its rate over the bytes of every pass it
// made (what the time was spent on), and a rerun on a complete directory
// says it was converted already.
func TestConvertSummary(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	out, err := runCLI(t, "", "convert", devACheckpoint, "--out", dir, "--verify")
	if err != nil || !regexp.MustCompile(`: 5 files written \(549\.4 KiB\); [0-9.]+ MiB read over every pass in [0-9.]+m?s \([0-9.]+ [KMG]iB/s\)`).MatchString(out) {
		t.Errorf("first run: %v\n%s", err, out)
	}
	out, err = runCLI(t, "", "convert", devACheckpoint, "--out", dir)
	if err != nil || !strings.Contains(out, "already converted: ") || !strings.Contains(out, "5 files re-verified, nothing to write (549.4 KiB re-hashed in ") ||
		strings.Contains(out, "0 files written") {
		t.Errorf("rerun: %v\n%s", err, out)
	}
	res := &convert.Result{Written: []string{"layer-00001.jnf"}, Resumed: []string{"a", "b"}, Bytes: 3 << 30}
	if s := convertSummary("s", "d", res, 12<<30, 4); s != "converted s → d: 1 file written (3.0 GiB), 2 files kept after re-verification; 12.0 GiB read over every pass in 4s (3.0 GiB/s)" {
		t.Errorf("summary %q", s)
	}
}

// m6: a trace recorded by run carries its model's expert size and sim
// projects with it (not the 122B's); a measured trace of another model
// without one is refused unless --expert-bytes is given; sim policies'
// defaults adapt to a short trace of a small model and say so.
func TestSimTakesTheTracesModel(t *testing.T) {
	model := convertedDevA(t)
	tr := filepath.Join(t.TempDir(), "t.trace")
	mustCLI(t, "run", "--model", model, "--tokens", "1,2,3", "--max-tokens", "40", "--trace", tr)
	b, err := os.ReadFile(tr)
	if err != nil || !strings.Contains(strings.SplitN(string(b), "\n", 2)[0], `"expert_bytes":12288`) {
		t.Fatalf("trace header: %v %.200s", err, b)
	}
	out, err := runCLI(t, "", "sim", "--trace", tr)
	if err != nil || !strings.Contains(out, "4 MoE layers × 8 experts, top-2, 12288 bytes per expert") {
		t.Errorf("sim: %v\n%s", err, out)
	}
	out, stderr, err := runCLIErr(t, "", "sim", "policies", "--trace", tr)
	if err != nil || !strings.Contains(stderr, "the default --warmup 100 is more than half of the trace's 42 tokens: warming up 10") ||
		!strings.Contains(stderr, "10% hold fewer than the 8 experts a tier needs here") || !strings.Contains(out, "per-layer") {
		t.Errorf("sim policies: %v\n%s\n%s", err, stderr, out)
	}
	// Explicit values are the user's: still refused when they do not fit.
	if _, err := runCLI(t, "", "sim", "policies", "--trace", tr, "--capacities", "10"); exitCode(err) != exitError || !strings.Contains(err.Error(), "per-layer needs at least 8") {
		t.Errorf("--capacities 10: %v", err)
	}
	old := filepath.Join(t.TempDir(), "old.trace")
	os.WriteFile(old, []byte(strings.Replace(string(b), `"expert_bytes":12288,`, "", 1)), 0o644)
	if _, err := runCLI(t, "", "sim", "--trace", old); exitCode(err) != exitError || !strings.Contains(err.Error(), "records no expert size") {
		t.Errorf("a trace without expert_bytes: %v", err)
	}
	if out, err := runCLI(t, "", "sim", "--trace", old, "--expert-bytes", "4096"); err != nil || !strings.Contains(out, "4096 bytes per expert") {
		t.Errorf("--expert-bytes 4096: %v\n%s", err, out)
	}
}

// unwritableDir returns a directory nothing can be created in: mode 0555,
// and for root (whom modes do not stop) immutable (chattr +i, undone at
// cleanup); it skips when neither holds here.
func unwritableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o555)
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	probe := filepath.Join(dir, "probe")
	if err := os.Mkdir(probe, 0o755); err == nil {
		os.Remove(probe)
		if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot make an unwritable directory here (root, and chattr +i: %v %s)", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	}
	return dir
}

// F41: a read-only or immutable output directory is named by its flag,
// for convert (which said only "mkdir …" or "lock open …") as for the
// other writers.
func TestUnwritableOutputNamesTheFlag(t *testing.T) {
	dir := unwritableDir(t)
	for _, out := range []string{dir, filepath.Join(dir, "m")} {
		_, err := runCLI(t, "", "convert", devACheckpoint, "--out", out)
		if exitCode(err) != exitError || !strings.HasPrefix(err.Error(), "--out "+out+": cannot write there: ") {
			t.Errorf("convert --out %s: %v", out, err)
		}
	}
	if _, err := runCLI(t, "", "synth", "--preset", "tiny", "--out", filepath.Join(dir, "s")); exitCode(err) != exitError || !strings.Contains(err.Error(), "cannot write in directory") {
		t.Errorf("synth: %v", err)
	}
}

// m14: the embedded default model's reply depends on the prompt: chat
// prompts that differ only before the fixed template tail get different
// replies (default-v1 gave every one the same).
func TestDefaultModelRepliesDependOnThePrompt(t *testing.T) {
	seen := map[string]string{}
	for _, p := range []string{"Tell me about experts.", "Explain expert routing.", "Hello", "Tell me a long story"} {
		out, err := runCLI(t, "", "run", p, "--max-tokens", "6", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var r runResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Tokens) != 6 {
			t.Fatalf("%q: %v %s", p, err, out)
		}
		key := fmt.Sprint(r.Tokens)
		if q, ok := seen[key]; ok {
			t.Errorf("%q and %q get the same reply %v", p, q, r.Tokens)
		}
		seen[key] = p
	}
}
