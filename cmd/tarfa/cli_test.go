package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/verify"
)

const fixtures = "../../validation/testdata/fixtures/"

func TestConvertVerifyManifestSign(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	out, err := runCLI(t, "", "convert", fixtures+"qwen3moe-dev-a/checkpoint", "--out", dir, "--verify", "--workers", "3")
	if err != nil || !strings.Contains(out, "compared byte for byte") {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	if out, err = runCLI(t, "", "verify", dir); err != nil || !strings.Contains(out, "ok: root") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	js, err := runCLI(t, "", "manifest", "show", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Root    string `json:"root"`
		Entries []struct {
			Name, File, SHA256 string
			Offset, Length     int64
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(js), &m); err != nil || len(m.Root) != 64 || len(m.Entries) == 0 {
		t.Fatalf("manifest show --json: %v", err)
	}
	for _, e := range m.Entries {
		if e.Name == "" || e.File == "" || len(e.SHA256) != 64 || e.Length <= 0 {
			t.Fatalf("entry %+v", e)
		}
	}
	key := filepath.Join(t.TempDir(), "k")
	if _, err := runCLI(t, "", "keys", "generate", "--out", key); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "", "manifest", "sign", dir, "--key", key); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub"); err != nil || !strings.Contains(out, "ok:") {
		t.Fatalf("manifest verify: %v %s", err, out)
	}
	// Corrupt one expert byte: verify and manifest verify exit 3, verify naming layer, expert and offset.
	p := filepath.Join(dir, "layer-00002.jnf")
	b, _ := os.ReadFile(p)
	b[len(b)-2000] ^= 0x10
	os.WriteFile(p, b, 0o644)
	_, err = runCLI(t, "", "verify", dir)
	if exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "layer 2 expert 7") || !strings.Contains(err.Error(), "offset") {
		t.Errorf("corrupted verify: exit %d, %v", exitCode(err), err)
	}
	if _, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub"); exitCode(err) != exitNotExact {
		t.Errorf("manifest verify of a corrupted record: exit %d (%v)", exitCode(err), err)
	}
	if out, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub", "--unsafe-skip-data"); err != nil || !strings.Contains(out, "UNSAFE") {
		t.Errorf("--unsafe-skip-data: %v %s", err, out)
	}
	if _, err := runCLI(t, "", "verify", dir, "--sample", "2"); exitCode(err) != exitError {
		t.Errorf("bad --sample: %v", err)
	}
	// A manifest byte changed: manifest verify fails with exit 3.
	mp := filepath.Join(dir, "manifest.json")
	mb, _ := os.ReadFile(mp)
	os.WriteFile(mp, []byte(strings.Replace(string(mb), `"complete": true`, `"complete": false`, 1)), 0o644)
	if _, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub"); exitCode(err) != exitNotExact {
		t.Errorf("edited manifest: exit %d (%v)", exitCode(err), err)
	}
}

func TestConvertLayersFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	out, err := runCLI(t, "", "convert", fixtures+"qwen3moe-dev-a/checkpoint", "--out", dir, "--layers", "1-2")
	if err != nil || !strings.Contains(out, "incomplete: layers present [1 2] of 4") {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, bad := range []string{"2-1", "a-b", "-1"} {
		if _, err := runCLI(t, "", "convert", fixtures+"qwen3moe-dev-a/checkpoint", "--out", dir, "--layers", bad); err == nil {
			t.Errorf("--layers %s accepted", bad)
		}
	}
}

func TestInspectJSON(t *testing.T) {
	out, err := runCLI(t, "", "inspect", fixtures+"qwen35moe-dev-c/checkpoint-official", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s["expert_layout"] != "fused" || s["bytes_per_expert"].(float64) != 12288 || s["ignored_tensors"].(float64) == 0 {
		t.Errorf("inspect: %v", s)
	}
	if _, err := runCLI(t, "", "inspect", t.TempDir()); err == nil {
		t.Error("inspect of an empty directory succeeded")
	}
}

func TestGoldenRecordReplayAndValidate(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m")
	if _, err := runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", model); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 5}
{"tokens": [17], "max_tokens": 4, "temperature": 0.8, "seed": 42}
`), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g, "--threads", "1"); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "replay", "--model", model, "--golden", g, "--threads", "3")
	if err != nil || !strings.Contains(out, "exact=true") || !strings.Contains(out, "5/5") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	// A replay on another model (the fused official layout differs in F32 tensors) is refused.
	other := filepath.Join(t.TempDir(), "o")
	runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint-official", "--out", other)
	if _, err := runCLI(t, "", "replay", "--model", other, "--golden", g); err == nil || !strings.Contains(err.Error(), "not the same model") {
		t.Errorf("replay on another model: %v", err)
	}
	if _, err := runCLI(t, "", "replay", "--model", model, "--golden", g, "--backend", "cuda"); err == nil {
		t.Error("cuda backend accepted in a CPU-only build")
	}
	out, err = runCLI(t, "", "validate", "hf", "--checkpoint", fixtures+"qwen3moe-dev-a/checkpoint", "--reference", fixtures+"qwen3moe-dev-a", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Pass    bool
		Prompts []struct {
			MaxAbs float64 `json:"max_abs"`
		}
	}
	if json.Unmarshal([]byte(out), &rep); !rep.Pass || len(rep.Prompts) != 3 {
		t.Errorf("validate: %s", out)
	}
}

func TestRunDefaultModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	type result struct {
		Tokens     []int  `json:"tokens"`
		Text       string `json:"text"`
		Mode       string `json:"mode"`
		StopReason string `json:"stop_reason"`
		Threads    int    `json:"threads"`
		Sampling   struct {
			Greedy bool `json:"greedy"`
		} `json:"sampling"`
		Timing struct {
			DecodeTokS float64 `json:"decode_tokens_per_second"`
		} `json:"timing"`
		Levels map[string]struct {
			Uses int64 `json:"uses"`
			Hits int64 `json:"hits"`
		} `json:"expert_levels"`
		Placement struct {
			Host   int64 `json:"host"`
			Device int64 `json:"device"`
		} `json:"placement"`
	}
	var r, r1 result
	out, err := runCLI(t, "", "run", "Hello", "--max-tokens", "5", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Tokens) == 0 || len(r.Tokens) > 5 || r.Mode != "exact" ||
		(r.StopReason != "length" && r.StopReason != "eos") || !r.Sampling.Greedy || (len(r.Tokens) > 1 && r.Timing.DecodeTokS <= 0) {
		t.Errorf("run: %v %s", err, out)
	}
	// The hierarchy's levels: every use of a layer's experts is a RAM
	// tier's (no device), and each of its misses a read, from the page
	// cache (where the model's files are, as here after an earlier test)
	// or from storage.
	if ram, pc, st := r.Levels["ram"], r.Levels["page_cache"], r.Levels["storage"]; ram.Uses == 0 || ram.Uses != ram.Hits+pc.Uses+st.Uses || pc.Uses+st.Uses == 0 {
		t.Errorf("run --json expert_levels: %+v", r.Levels)
	}
	// Every use was computed on the cpu backend: none beside it on the host.
	if r.Placement.Device != r.Levels["ram"].Uses || r.Placement.Host != 0 {
		t.Errorf("run --json placement: %+v, %d uses", r.Placement, r.Levels["ram"].Uses)
	}
	out1, _ := runCLI(t, "", "run", "Hello", "--max-tokens", "5", "--json", "--threads", "1")
	if err := json.Unmarshal([]byte(out1), &r1); err != nil || r1.Threads != 1 || !slices.Equal(r1.Tokens, r.Tokens) || r1.Text != r.Text {
		t.Errorf("1 thread and all threads differ:\n%s\n%s", out, out1)
	}
	// --device-prefetch reaches the hierarchy (its counters are reported)
	// and changes no token; the cpu backend has no device level, so it
	// copies nothing.
	var rp struct {
		Tokens []int `json:"tokens"`
		Levels struct {
			DevicePrefetch *struct {
				Copied int64 `json:"copied"`
			} `json:"device_prefetch"`
		} `json:"expert_levels"`
	}
	outp, err := runCLI(t, "", "run", "Hello", "--max-tokens", "5", "--json", "--device-prefetch")
	if err := errors.Join(err, json.Unmarshal([]byte(outp), &rp)); err != nil || !slices.Equal(rp.Tokens, r.Tokens) ||
		rp.Levels.DevicePrefetch == nil || rp.Levels.DevicePrefetch.Copied != 0 {
		t.Errorf("run --device-prefetch: %v\n%s", err, outp)
	}
	if strings.Contains(out, "device_prefetch") {
		t.Errorf("run without --device-prefetch reports it:\n%s", out)
	}
}

func TestConvertResumesInterruptedFile(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	dir := filepath.Join(t.TempDir(), "m")
	// Interrupt a conversion about two thirds in, as Ctrl-C would, once a
	// file is part written (a record journaled; progress counts the source
	// shards' hashing too).
	ctx, cancel := context.WithCancel(context.Background())
	_, err := convert.Convert(ctx, src, dir, convert.Options{LastLayer: -1, Workers: 1, Progress: func(done, total int64) {
		journals, _ := filepath.Glob(filepath.Join(dir, ".*.journal"))
		if done > total*2/3 && len(journals) == 1 {
			if b, _ := os.ReadFile(journals[0]); strings.Count(string(b), "\n") >= 2 {
				cancel()
			}
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted conversion: %v", err)
	}
	partials, _ := filepath.Glob(filepath.Join(dir, ".*.partial"))
	if len(partials) != 1 {
		t.Fatalf("partial files after the interruption: %v", partials)
	}
	out, err := runCLI(t, "", "convert", src, "--out", dir, "--verify", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Resumed         []string `json:"resumed"`
		SalvagedRecords int      `json:"salvaged_records"`
		SalvagedBytes   int64    `json:"salvaged_bytes"`
		Root            string   `json:"root"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.SalvagedRecords == 0 || res.SalvagedBytes == 0 || len(res.Resumed) == 0 {
		t.Fatalf("resumed conversion: %v %s", err, out)
	}
	if out, err := runCLI(t, "", "verify", dir); err != nil || !strings.Contains(out, "ok: root "+res.Root) {
		t.Fatalf("verify after resume: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A directory that is no JNF directory is a usage error (exit 1); a JNF
// directory missing one of its files failed verification (exit 3).
func TestNotJNFIsAUsageError(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	for _, args := range [][]string{{"verify", src}, {"manifest", "show", src}, {"run", "--model", src, "hi"}} {
		_, err := runCLI(t, "", args...)
		if exitCode(err) != exitError || !strings.Contains(err.Error(), "is a Hugging Face checkpoint, not a JNF directory: convert it first") {
			t.Errorf("%v: exit %d, %v", args, exitCode(err), err)
		}
	}
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := runCLI(t, "", "convert", src, "--out", dir); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "layer-00001.jnf"))
	if _, err := runCLI(t, "", "verify", dir); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "layer-00001.jnf") {
		t.Errorf("verify with a layer file missing: exit %d, %v", exitCode(err), err)
	}
	if _, err := runCLI(t, "", "replay", "--model", dir, "--golden", filepath.Join(dir, "nope")); exitCode(err) != exitError {
		t.Errorf("replay with a missing golden directory: exit %d, %v", exitCode(err), err)
	}
}

func TestRunSystemAndThink(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var r struct {
		Prompt       string `json:"prompt"`
		PromptTokens []int  `json:"prompt_tokens"`
	}
	out, err := runCLI(t, "", "run", "Hello", "--max-tokens", "1", "--json", "--system", "Be brief.", "--think=false")
	if err != nil || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("run: %v %s", err, out)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if r.Prompt != want {
		t.Errorf("rendered prompt %q; want %q", r.Prompt, want)
	}
	plain, _ := runCLI(t, "", "run", "Hello", "--max-tokens", "1", "--json")
	var p struct {
		Prompt string `json:"prompt"`
	}
	json.Unmarshal([]byte(plain), &p)
	if p.Prompt != "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("default rendering %q", p.Prompt)
	}
	if _, err := runCLI(t, "", "run", "Hello", "--raw", "--system", "x"); err == nil {
		t.Error("--system with --raw accepted")
	}
}

// TestTamperedNonExpertTensorStopsGeneration: a byte flipped in an
// attention or norm tensor after conversion stops run, golden record and
// replay with a digest error naming the tensor, exit status 3. (The
// manifest and tables still agree: only the record bytes changed, which
// nothing but run-time verification can see.)
func TestTamperedNonExpertTensorStopsGeneration(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m")
	if _, err := runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", model); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 3}`+"\n"), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.layers.3.self_attn.k_proj.weight", "model.layers.0.post_attention_layernorm.weight"} {
		m, _, err := verify.LoadManifest(model)
		if err != nil {
			t.Fatal(err)
		}
		i, _ := m.Index(name)
		e := m.Entries[i]
		p := filepath.Join(model, e.File)
		b, _ := os.ReadFile(p)
		b[e.Offset+e.Length/2] ^= 0x20
		os.WriteFile(p, b, 0o644)
		for _, args := range [][]string{
			{"run", "--model", model, "--tokens", "5,9,200", "--max-tokens", "2"},
			{"golden", "record", "--model", model, "--prompts", prompts, "--out", filepath.Join(t.TempDir(), "g2")},
			{"replay", "--model", model, "--golden", g},
		} {
			_, err := runCLI(t, "", args...)
			if exitCode(err) != exitNotExact || !strings.Contains(fmt.Sprint(err), name) || !strings.Contains(fmt.Sprint(err), "digest mismatch") {
				t.Errorf("%s after flipping a byte of %s: exit %d, %v", args[0], name, exitCode(err), err)
			}
		}
		b[e.Offset+e.Length/2] ^= 0x20
		os.WriteFile(p, b, 0o644)
	}
}

// TestReplayUnderTinyBudgets: a golden record replays bit for bit with a
// RAM tier and staging buffers far below the model's working set (constant
// eviction, streaming through the slots), with O_DIRECT on and off; the
// routing trace of the replay is written.
func TestReplayUnderTinyBudgets(t *testing.T) {
	prompts := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200, 17], "max_tokens": 8}
{"tokens": [17], "max_tokens": 6, "temperature": 0.8, "seed": 42}
`), 0o644)
	g := filepath.Join(t.TempDir(), "g")
	if _, err := runCLI(t, "", "golden", "record", "--prompts", prompts, "--out", g); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--ram-budget", "128KiB", "--staging-budget", "64KiB"},
		{"--ram-budget", "0", "--device-budget", "12KiB", "--readers", "1", "--direct", "off"},
		{"--ram-budget", "48KiB", "--staging-budget", "24KiB", "--policy", "lru", "--partition", "per-layer", "--scrub", "use,1s"},
	} {
		tr := filepath.Join(t.TempDir(), "trace.jsonl")
		out, err := runCLI(t, "", append([]string{"replay", "--golden", g, "--trace", tr}, args...)...)
		if err != nil || !strings.Contains(out, "exact=true") {
			t.Fatalf("replay %v: %v\n%s", args, err, out)
		}
		b, err := os.ReadFile(tr)
		if err != nil || !strings.Contains(string(b), `"source":"measured"`) || strings.Count(string(b), "\n") < 1+(4+1)*4 {
			t.Errorf("trace of replay %v: %v\n%.300s", args, err, b)
		}
	}
}
