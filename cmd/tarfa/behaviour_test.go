package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/verify"
)

// runCLIErr runs the command line and returns stdout, stderr and the error.
func runCLIErr(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var stderr syncBuffer
	root := newRootCommand()
	var out strings.Builder
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), stderr.String(), err
}

// convertedDevA converts the qwen3moe-dev-a fixture (no tokenizer, 512
// positions) into a new directory.
func convertedDevA(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	mustCLI(t, "convert", devACheckpoint, "--out", dir)
	return dir
}

// Bad flag values are refused before anything is opened (the model given
// does not exist: a check made after opening would report that instead),
// naming the flag, the value and what is wanted, never an internal error.
func TestFlagsCheckedFirstInTheUsersWords(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--model", missing, "x", "--seed", "-1"}, `--seed "-1": want a whole number from 0 to 18446744073709551615`},
		{[]string{"run", "--model", missing, "x", "--max-tokens", "0"}, "--max-tokens 0: want 1 to 16777216"},
		{[]string{"run", "--model", missing, "x", "--max-tokens", "abc"}, `--max-tokens "abc": want a whole number`},
		{[]string{"run", "--model", missing, "x", "--threads", "-3"}, "--threads -3: want 0 (all cores) to 256"},
		{[]string{"run", "--model", missing, "x", "--threads", "1000"}, "--threads 1000: want 0 (all cores) to 256"},
		{[]string{"run", "--model", missing, "x", "--ram-budget", "-5"}, "--ram-budget \"-5\": want a size in bytes"},
		{[]string{"run", "--model", missing, "x", "--ram-budget", "5000000TiB"}, "--ram-budget \"5000000TiB\": want a size in bytes from 0 to 4 EiB"},
		{[]string{"run", "--model", missing, "x", "--staging-budget", "0"}, "--staging-budget 0: want at least one expert"},
		{[]string{"run", "--model", missing, "x", "--device-budget", "0"}, "--device-budget 0: want at least one expert"},
		{[]string{"run", "--model", missing, "x", "--device-budget", "1MiB", "--staging-budget", "1MiB"}, "--device-budget is the old name of --staging-budget: give one of them"},
		{[]string{"run", "--model", missing, "x", "--policy", "belady"}, "--policy \"belady\": want one of"},
		{[]string{"run", "--model", missing, "x", "--policy", "oracle"}, "--policy \"oracle\": want one of"},
		{[]string{"run", "--model", missing, "x", "--readers", "-1"}, "--readers -1: want 1 to"},
		{[]string{"run", "--model", missing, "x", "--scrub", "10ms"}, "--scrub: scrub schedule \"10ms\": a pass every 10ms is more often than every 1s"},
		{[]string{"run", "--model", missing, "x", "--scrub", "on"}, `--scrub: scrub schedule "on": "on" is not "use" or a duration`},
		{[]string{"run", "--model", missing, "x", "--temperature", "NaN"}, "--temperature NaN: want a number from 0"},
		{[]string{"run", "--model", missing, "x", "--temperature", "0.5", "--top-p", "1.5"}, "--top-p 1.5: want a number"},
		{[]string{"run", "--model", missing, "x", "--top-k", "3"}, "--top-k applies only when sampling: add --temperature"},
		{[]string{"run", "--model", missing, "x", "--seed", "3", "--top-p", "0.9"}, "--top-p, --seed apply only when sampling"},
		{[]string{"run", "--model", missing, "x", "--raw", "--system", "s"}, "--system and --think apply to the chat template"},
		{[]string{"run", "--model", missing, "x", "--think", "maybe"}, `--think "maybe": want true or false`},
		{[]string{"run", "--model", missing, "--tokens", "1,-2"}, `--tokens: "-2" is not a token id`},
		{[]string{"run", "--model", missing}, "give a PROMPT"},
		{[]string{"run", "--model", missing, "Tell", "me"}, `one PROMPT argument, got 2: quote the prompt (tarfa run "Tell me")`},
		{[]string{"golden", "record", "--model", missing, "--prompts", "p", "--out", "g", "--threads", "-1"}, "--threads -1"},
		{[]string{"replay", "--model", missing, "--golden", "g", "--threads", "999"}, "--threads 999"},
		{[]string{"verify", missing, "--sample", "NaN"}, "--sample NaN: want a fraction"},
		{[]string{"verify", missing, "--sample", "0"}, "--sample 0: want a fraction"},
		{[]string{"synth", "--out", missing, "--layers", "-1"}, "--layers -1: want 1 to 1024"},
		{[]string{"synth", "--out", missing, "--layers", "0"}, "--layers 0: want 1 to 1024"},
		{[]string{"synth", "--out", missing, "--layers", "100000"}, "--layers 100000: want 1 to 1024"},
		{[]string{"synth", "--out", missing, "--shard-bytes", "-1"}, "--shard-bytes -1: want 1 to"},
		{[]string{"synth", "--out", missing, "--vocab", "0"}, "--vocab 0: want 1 to"},
		{[]string{"synth", "--out", missing, "--arch", "llama"}, `--arch "llama": want qwen3_moe or qwen3_5_moe`},
		{[]string{"synth", "--out", missing, "--experts", "0"}, "--experts 0: want 1 to 65536"},
		{[]string{"synth", "--out", missing, "--experts", "1"}, "num_experts_per_tok"},
		{[]string{"synth", "--out", missing, "--jnf", "--workers", "0"}, "--workers 0: want 1 to 64"},
		{[]string{"synth", "--out", missing, "--jnf", "--force"}, "--jnf with --force"},
		{[]string{"synth", "--out", missing, "--routing", "zipf"}, `--routing "zipf": want uniform or local`},
		{[]string{"bench", "read", missing, "--jobs", "0"}, "--jobs 0: want 1 to"},
		{[]string{"convert", missing, "--out", missing + "2", "--workers", "100000"}, "--workers 100000: want 1 to 64"},
		{[]string{"validate", "hf", "--checkpoint", missing, "--reference", missing, "--threads", "-1"}, "--threads -1"},
	} {
		_, err := runCLI(t, "", c.args...)
		if exitCode(err) != exitError || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tarfa %s: exit %d, %v; want %q", strings.Join(c.args, " "), exitCode(err), err, c.want)
			continue
		}
		for _, internal := range []string{"strconv", "engine:", "no such file"} {
			if strings.Contains(err.Error(), internal) {
				t.Errorf("tarfa %s: %v names %q", strings.Join(c.args, " "), err, internal)
			}
		}
	}
	// A sample that would check no record is refused; none of it passes as "ok".
	model := convertedDevA(t)
	if _, err := runCLI(t, "", "verify", model, "--sample", "1e-9"); exitCode(err) != exitError || !strings.Contains(err.Error(), "would re-hash none") {
		t.Errorf("--sample 1e-9: %v", err)
	}
}

// Generation stops at the model's context with stop reason "length" and
// exit 0, however large --max-tokens is; a model without a tokenizer prints
// the generated ids.
func TestRunStopsAtTheContext(t *testing.T) {
	model := convertedDevA(t)
	out, err := runCLI(t, "", "run", "--model", model, "--tokens", "1,2,3", "--max-tokens", "100000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.ContextLimit != 512 || r.MaxTokens != 510 || r.StopReason != "length" || len(r.Tokens) != 510 {
		t.Errorf("context %d, max tokens %d, stop %q, %d tokens", r.ContextLimit, r.MaxTokens, r.StopReason, len(r.Tokens))
	}
	out, stderr, err := runCLIErr(t, "", "run", "--model", model, "--tokens", "1,2,3", "--max-tokens", "5")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range r.Tokens[:5] {
		want = append(want, fmt.Sprint(id))
	}
	if out != strings.Join(want, " ")+"\n" {
		t.Errorf("ids without a tokenizer: %q, want %q", out, strings.Join(want, " ")+"\n")
	}
	for _, s := range []string{"3 prompt + 5 generated tokens", "load ", "prefill ", "decode ", "tok/s", "greedy", "stop: length (--max-tokens 5)"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("summary without %q:\n%s", s, stderr)
		}
	}
	if _, err := runCLI(t, "", "run", "--model", model, "--tokens", strings.Repeat("1,", 600)+"1"); err == nil || !strings.Contains(err.Error(), "more than the model's context of 512") {
		t.Errorf("a prompt longer than the context: %v", err)
	}
}

// The stop token is not printed unless --special; the stop reason is.
// (Seed 27 samples the end-of-turn token after 38 tokens on the embedded
// default model default-v2.)
func TestRunStopTokenAndReason(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	args := []string{"run", "Hello", "--max-tokens", "64", "--temperature", "1", "--seed", "27"}
	js, err := runCLI(t, "", append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	json.Unmarshal([]byte(js), &r)
	if r.StopReason != "eos" || r.Sampling.Greedy || r.Sampling.Seed != 27 || r.Sampling.Temperature != 1 || strings.Contains(r.Text, "<|im_end|>") {
		t.Fatalf("seeded run: %s", js)
	}
	out, stderr, err := runCLIErr(t, "", args...)
	if err != nil || strings.Contains(out, "<|im_end|>") || !strings.HasSuffix(out, "\n") {
		t.Errorf("stdout %q, %v", out, err)
	}
	if !strings.Contains(stderr, "stop: eos (<|im_end|>)") || !strings.Contains(stderr, "sampled (temperature 1, seed 27)") {
		t.Errorf("summary: %s", stderr)
	}
	if out, _ := runCLI(t, "", append(args, "--special")...); !strings.HasSuffix(out, "<|im_end|>\n") {
		t.Errorf("--special: %q", out)
	}
	// The prompt from standard input is the prompt.
	js2, err := runCLI(t, "Hello", "run", "-", "--max-tokens", "64", "--temperature", "1", "--seed", "27", "--json")
	var r2 runResult
	if json.Unmarshal([]byte(js2), &r2); err != nil || r2.Prompt != r.Prompt || fmt.Sprint(r2.Tokens) != fmt.Sprint(r.Tokens) {
		t.Errorf("run - : %v\n%s\nwant\n%s", err, js2, js)
	}
	// --think takes its value either way.
	a, _ := runCLI(t, "", "run", "Hello", "--max-tokens", "1", "--json", "--think=false")
	b, _ := runCLI(t, "", "run", "Hello", "--max-tokens", "1", "--json", "--think", "false")
	var ra, rb runResult
	json.Unmarshal([]byte(a), &ra)
	json.Unmarshal([]byte(b), &rb)
	if ra.Prompt == "" || ra.Prompt != rb.Prompt || !strings.Contains(ra.Prompt, "<think>\n\n</think>") {
		t.Errorf("--think=false %q, --think false %q", ra.Prompt, rb.Prompt)
	}
}

// tokenize and template take text arguments as well as JSON on stdin.
func TestTokenizeAndTemplateArguments(t *testing.T) {
	out, err := runCLI(t, "", "tokenize", "--tokenizer", qwenTokenizerDir, "Hello, world!", "")
	if err != nil || out != "{\"ids\":[9707,11,1879,0]}\n{\"ids\":[]}\n" {
		t.Errorf("tokenize arguments: %q %v", out, err)
	}
	out, err = runCLI(t, "", "tokenize", "--tokenizer", qwenTokenizerDir, "--decode", "9707,11,1879,0")
	if err != nil || out != "{\"text\":\"Hello, world!\"}\n" {
		t.Errorf("tokenize --decode arguments: %q %v", out, err)
	}
	fromJSON, err := runCLI(t, `{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": true, "enable_thinking": false}`,
		"template", "--tokenizer", qwenTokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "", "template", "--tokenizer", qwenTokenizerDir, "What is 2+2?", "--system", "Be brief.", "--think", "false")
	if err != nil || out != fromJSON {
		t.Errorf("template MESSAGE: %q %v; want %q", out, err, fromJSON)
	}
	if _, err := runCLI(t, "{}", "template", "--tokenizer", qwenTokenizerDir, "--think", "false"); err == nil || !strings.Contains(err.Error(), "go with a MESSAGE argument") {
		t.Errorf("--think without MESSAGE: %v", err)
	}
}

// verify says what it checked: ok only for every record of a complete model.
func TestVerifySaysWhatWasChecked(t *testing.T) {
	partial := filepath.Join(t.TempDir(), "p")
	mustCLI(t, "convert", devACheckpoint, "--out", partial, "--layers", "1-2")
	out, err := runCLI(t, "", "verify", partial)
	if err != nil || strings.Contains(out, "ok:") || !strings.Contains(out, "partial: layers 1-2 of 4 present, every record present re-hashed") {
		t.Errorf("partial: %v\n%s", err, out)
	}
	model := convertedDevA(t)
	out, err = runCLI(t, "", "verify", model, "--sample", "0.3")
	if err != nil || strings.Contains(out, "ok:") || !strings.Contains(out, "sampled: ") || !strings.Contains(out, "records re-hashed, no mismatch") {
		t.Errorf("sampled: %v\n%s", err, out)
	}
	js, err := runCLI(t, "", "verify", model, "--sample", "0.3", "--json")
	var res struct {
		Status         string `json:"status"`
		RecordsChecked int    `json:"records_checked"`
		Records        int    `json:"records"`
	}
	if json.Unmarshal([]byte(js), &res); err != nil || res.Status != "sampled" || res.RecordsChecked == 0 || res.RecordsChecked >= res.Records {
		t.Errorf("sampled --json: %v %s", err, js)
	}
	if out, err := runCLI(t, "", "verify", model, "--json"); err != nil || !strings.Contains(out, `"status":"ok"`) {
		t.Errorf("full --json: %v %s", err, out)
	}
}

// A signed model copied elsewhere verifies under the name in its signature
// (printed); a --name that differs says which name is signed; an unsigned
// directory says how to sign it.
func TestManifestVerifyNames(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "release")
	mustCLI(t, "convert", devACheckpoint, "--out", model)
	key := filepath.Join(dir, "k")
	mustCLI(t, "keys", "generate", "--out", key)
	if _, err := runCLI(t, "", "manifest", "verify", model, "--pub", key+".pub"); exitCode(err) != exitError ||
		!strings.Contains(err.Error(), "is not signed (no manifest.sig.json): sign it with tarfa manifest sign") {
		t.Errorf("unsigned: exit %d, %v", exitCode(err), err)
	}
	mustCLI(t, "manifest", "sign", model, "--key", key)
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.Rename(copyDir(t, model), copied); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "manifest", "verify", copied, "--pub", key+".pub")
	if err != nil || !strings.Contains(out, `is "release" (the name in the signature)`) {
		t.Errorf("copied model: %v %s", err, out)
	}
	_, err = runCLI(t, "", "manifest", "verify", copied, "--pub", key+".pub", "--name", filepath.Base(copied))
	if exitCode(err) != exitNotExact || !strings.Contains(err.Error(), `the signature names "release"`) || !strings.Contains(err.Error(), `--name "release"`) {
		t.Errorf("--name of the copy: exit %d, %v", exitCode(err), err)
	}
	// Signing again replaces nothing without --force.
	before, _ := os.ReadFile(filepath.Join(model, verify.SignatureFile))
	if _, err := runCLI(t, "", "manifest", "sign", model, "--key", key, "--name", "other"); err == nil || !strings.Contains(err.Error(), "pass --force") {
		t.Errorf("second sign: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(model, verify.SignatureFile)); string(after) != string(before) {
		t.Error("the signature was replaced without --force")
	}
	out, err = runCLI(t, "", "manifest", "sign", model, "--key", key, "--name", "other", "--force", "--json")
	var res manifestSignResult
	if json.Unmarshal([]byte(out), &res); err != nil || res.Name != "other" || len(res.Root) != 64 || res.KeyID == "" {
		t.Errorf("sign --force --json: %v %s", err, out)
	}
}

// Errors about output places name the directory, not a hidden temporary
// file, and suggest --force only when a file exists.
func TestOutputDirectoryErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such")
	_, err := runCLI(t, "", "keys", "generate", "--out", filepath.Join(missing, "k"))
	if err == nil || !strings.Contains(err.Error(), "directory "+missing+" does not exist") || strings.Contains(err.Error(), "--force") || strings.Contains(err.Error(), ".tmp") {
		t.Errorf("keys generate into a missing directory: %v", err)
	}
	// /sys refuses new files, also to root.
	_, err = runCLI(t, "", "keys", "generate", "--out", "/sys/k")
	if err == nil || !strings.Contains(err.Error(), "cannot write in directory /sys") || strings.Contains(err.Error(), ".tmp") {
		t.Errorf("keys generate into /sys: %v", err)
	}
	out, err := runCLI(t, "", "keys", "generate", "--out", filepath.Join(t.TempDir(), "k"), "--json")
	var kr keysGenerateResult
	if json.Unmarshal([]byte(out), &kr); err != nil || len(kr.KeyID) != 64 || !strings.HasSuffix(kr.Public, ".pub") {
		t.Errorf("keys generate --json: %v %s", err, out)
	}
	// golden record checks its output before opening the model (which
	// does not exist here).
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [1]}`+"\n"), 0o644)
	nomodel := filepath.Join(t.TempDir(), "nomodel")
	_, err = runCLI(t, "", "golden", "record", "--model", nomodel, "--prompts", prompts, "--out", "/sys/g")
	if err == nil || !strings.Contains(err.Error(), "--out /sys/g: cannot write in directory /sys") {
		t.Errorf("golden record into /sys: %v", err)
	}
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	_, err = runCLI(t, "", "golden", "record", "--model", nomodel, "--prompts", prompts, "--out", foreign)
	if err == nil || !strings.Contains(err.Error(), "is not empty and holds no golden record") {
		t.Errorf("golden record into a foreign directory: %v", err)
	}
	// synth checks the space it needs first (about 600 GB here), and
	// leaves no directory behind.
	// (Cancelled after a few seconds: were the check missing, synth
	// would fill the disk.)
	big := filepath.Join(t.TempDir(), "big")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var stderr syncBuffer
	_, err = runCLIContext(ctx, &stderr, "synth", "--arch", "qwen3_moe", "--preset", "real", "--layers", "512", "--no-tokenizer", "--out", big)
	if err == nil || !strings.Contains(err.Error(), "--out "+big+": needs ") || !strings.Contains(err.Error(), "free") {
		t.Errorf("synth larger than the disk: %v", err)
	}
	if _, err := os.Stat(big); !os.IsNotExist(err) {
		t.Errorf("refused synth left %s: %v", big, err)
	}
}

// golden record replaces a golden record only with --force.
func TestGoldenRecordForce(t *testing.T) {
	model := convertedDevA(t)
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [1, 2], "max_tokens": 2}`+"\n"), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	mustCLI(t, "golden", "record", "--model", model, "--prompts", prompts, "--out", g)
	before, _ := os.ReadFile(filepath.Join(g, "golden.json"))
	os.WriteFile(prompts, []byte(`{"tokens": [3], "max_tokens": 3}`+"\n"), 0o644)
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g); err == nil || !strings.Contains(err.Error(), "already holds a golden record: pass --force") {
		t.Errorf("second record: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(g, "golden.json")); string(after) != string(before) {
		t.Fatal("replaced without --force")
	}
	out, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g, "--force", "--json")
	var res goldenRecordResult
	if json.Unmarshal([]byte(out), &res); err != nil || res.Steps != 3 || res.Prompts != 1 {
		t.Errorf("--force --json: %v %s", err, out)
	}
	if out, err := runCLI(t, "", "replay", "--model", model, "--golden", g); err != nil || !strings.Contains(out, "exact=true") {
		t.Errorf("replay of the replaced record: %v %s", err, out)
	}
	// A prompt that does not fit the model's context is refused before any runs.
	os.WriteFile(prompts, []byte(`{"tokens": [1], "max_tokens": 4}`+"\n"+`{"tokens": [1, 2], "max_tokens": 600}`+"\n"), 0o644)
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", filepath.Join(t.TempDir(), "g2")); err == nil ||
		!strings.Contains(err.Error(), "prompt line 2: 2 prompt tokens and max_tokens 600 do not fit the model's context of 512 positions") {
		t.Errorf("prompt past the context: %v", err)
	}
}

// Every command that writes a directory holds its lock: with --no-wait a
// second writer is refused at once, naming the holder.
func TestWritersTakeTheLock(t *testing.T) {
	model := convertedDevA(t)
	key := filepath.Join(t.TempDir(), "k")
	mustCLI(t, "keys", "generate", "--out", key)
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [1]}`+"\n"), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	s := filepath.Join(t.TempDir(), "s")
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{model, []string{"manifest", "sign", model, "--key", key, "--no-wait"}},
		{g, []string{"golden", "record", "--model", model, "--prompts", prompts, "--out", g, "--no-wait"}},
		{s, []string{"synth", "--out", s, "--no-wait"}},
	} {
		os.MkdirAll(c.dir, 0o755)
		l, err := flock.TryAcquire(filepath.Join(c.dir, flock.Name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = runCLI(t, "", c.args...)
		want := fmt.Sprintf("another tarfa (pid %d) is writing %s: not waiting for it (--no-wait)", os.Getpid(), c.dir)
		if exitCode(err) != exitError || err == nil || err.Error() != want {
			t.Errorf("%s with the lock held: exit %d, %v; want %q", c.args[0], exitCode(err), err, want)
		}
		l.Unlock()
		if _, err := runCLI(t, "", c.args...); err != nil {
			t.Errorf("%s once the lock is free: %v", c.args[0], err)
		}
	}
}

// A cached embedded default model that fails verification is reported,
// naming what failed, and rebuilt.
func TestDefaultModelTamperedIsReported(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	if _, err := runCLI(t, "", "verify"); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "tarfa", "*", "jnf", "layer-00001.jnf"))
	if len(files) != 1 {
		t.Fatalf("cached model files: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)-100] ^= 1
	os.WriteFile(files[0], b, 0o644)
	_, stderr, err := runCLIErr(t, "", "run", "Hi", "--max-tokens", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "embedded default model: the cached copy in ") || !strings.Contains(stderr, "failed verification") ||
		!strings.Contains(stderr, "layer-00001.jnf") || !strings.Contains(stderr, "rebuilding it") {
		t.Errorf("tampered cache: %s", stderr)
	}
}

// Every command documents its exit statuses in its help.
func TestHelpDocumentsExitStatuses(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			switch sub.Name() {
			case "help", "completion", "bench": // cobra's own; bench is documented by its own commands' owner
				continue
			}
			if sub.HasSubCommands() {
				walk(sub)
				continue
			}
			if !strings.Contains(sub.Long, "Exit statuses") {
				t.Errorf("tarfa %s --help does not document its exit statuses", sub.CommandPath())
			}
		}
	}
	walk(newRootCommand())
}
