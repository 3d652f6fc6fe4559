package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/validation/synth"
)

// fp8Checkpoint is a block-FP8 checkpoint in the official layout
// (validation/testdata/synthref-fp8/PROVENANCE.md).
const fp8Checkpoint = "../../validation/testdata/synthref-fp8/q35-fp8/checkpoint"

// TestFP8EndToEnd: a block-FP8 checkpoint goes through every command a
// user relies on, and every place the mode shows says which precision ran
// ("exact, fp8 checkpoint"), never just "exact": run's banner and --json,
// the signed run report and its verification (with a replay), and a golden
// record replayed at another thread count, exact.
func TestFP8EndToEnd(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "m")
	mustCLI(t, "convert", fp8Checkpoint, "--out", model, "--verify")
	out, stderr, err := runCLIErr(t, "", "run", "--model", model, "--tokens", "1,2,3", "--max-tokens", "4", "--json")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	var res struct {
		Mode   string `json:"mode"`
		Tokens []int  `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Mode != "exact, fp8 checkpoint" || len(res.Tokens) != 4 {
		t.Errorf("run --json: mode %q, %d tokens (%v)\n%s", res.Mode, len(res.Tokens), err, out)
	}
	if !strings.Contains(stderr, "EXACT mode, FP8 CHECKPOINT (e4m3, 16×16 blocks, dynamic activation scales)") {
		t.Errorf("run's banner does not name the precision:\n%s", stderr)
	}

	prompts := filepath.Join(tmp, "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 5}
{"tokens": [17, 3], "max_tokens": 4, "temperature": 0.8, "seed": 42}
`), 0o644)
	g := filepath.Join(tmp, "g")
	mustCLI(t, "golden", "record", "--model", model, "--prompts", prompts, "--out", g, "--threads", "1")
	if out, err := runCLI(t, "", "replay", "--model", model, "--golden", g, "--threads", "3", "--ram-budget", "0"); err != nil || !strings.Contains(out, "exact=true") {
		t.Fatalf("replay: %v\n%s", err, out)
	}

	key := filepath.Join(tmp, "k")
	mustCLI(t, "keys", "generate", "--out", key)
	report := filepath.Join(tmp, "r.json")
	if out, err := runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", report, "--golden", g); err != nil || !strings.Contains(out, "exact=true") {
		t.Fatalf("attest run: %v\n%s", err, out)
	}
	out, err = runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--model", model, "--replay", "--threads", "2")
	if err != nil || !strings.Contains(out, "EXACT, FP8 CHECKPOINT mode, model root") || !strings.Contains(out, `mode "exact, fp8 checkpoint": the precision of the model's config.json (fp8 (e4m3, 16×16 blocks, dynamic activation scales))`) || !strings.Contains(out, "replay of 2 prompts") {
		t.Fatalf("attest verify --replay: %v\n%s", err, out)
	}
}

// TestFP8Chat: chat on a local block-FP8 model says the precision in its
// banner, its prompt and /stats before any reply, and in each reply's
// label after.
func TestFP8Chat(t *testing.T) {
	o, err := synth.DefaultOptions()
	if err != nil {
		t.Fatal(err)
	}
	o.DType = synth.DTypeFP8
	model, err := synth.Converted(context.Background(), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCLIErr(t, "/stats\nHello\n", "chat", "--model", model, "--max-tokens", "3")
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "tarfa chat · EXACT mode, FP8 CHECKPOINT (e4m3, 128×128 blocks, dynamic activation scales) · model") {
		t.Errorf("banner:\n%s", stderr)
	}
	for _, want := range []string{"[exact, fp8 checkpoint] you> ", "mode exact, fp8 checkpoint · 0 replies", "[exact, fp8 checkpoint · 3 tokens · "} {
		if !strings.Contains(out, want) {
			t.Errorf("chat output lacks %q:\n%s", want, out)
		}
	}
}
