package runner

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

func defaultModel(t *testing.T) string {
	t.Helper()
	dir, _, err := synth.EnsureDefault(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

const prompts = `{"prompt": "The expert", "max_tokens": 6}
{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0.9, "top_p": 0.9, "seed": 3}
{"tokens": [1, 2, 3, 4], "max_tokens": 4, "temperature": 1.2, "top_k": 20, "seed": 11}
`

func TestRecordReplayAcrossThreadCounts(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	g, runs, err := r1.Record(context.Background(), ps, "test")
	if err != nil {
		t.Fatal(err)
	}
	gdir := filepath.Join(t.TempDir(), "g")
	if err := golden.Write(gdir, g, runs); err != nil {
		t.Fatal(err)
	}
	g2, runs2, err := golden.Read(gdir)
	if err != nil {
		t.Fatal(err)
	}
	for i, run := range runs2 {
		if len(run.Generated) == 0 || len(run.Generated) > ps[i].MaxTokens {
			t.Errorf("prompt %d generated %d tokens", i, len(run.Generated))
		}
	}
	r4, err := Open(context.Background(), dir, Options{Threads: 4, ExpertCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r4.Close()
	diffs, err := r4.Replay(context.Background(), g2, runs2)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		if !d.Exact() || d.MaxAbs != 0 {
			t.Errorf("replay with 4 threads is not bit-identical: %+v", d)
		}
	}
	// The chat prompt went through the chat template.
	ids, text, err := r1.EncodeChat([]byte(`[{"role":"user","content":"Hello"}]`), nil)
	if err != nil || !strings.HasPrefix(text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n") || len(ids) == 0 {
		t.Errorf("chat rendering %q %v", text, err)
	}
	if runs[1].PromptTokens[0] != ids[0] {
		t.Errorf("recorded chat prompt does not start with the rendered tokens")
	}
	// A changed logit is caught as the first divergent step.
	runs2[0].Logits[2][7] = math.Nextafter32(runs2[0].Logits[2][7], 1000)
	diffs, _ = r4.Replay(context.Background(), g2, runs2)
	if diffs[0].Exact() || diffs[0].FirstDivergent != 2 {
		t.Errorf("perturbed golden: %+v", diffs[0])
	}
}

func TestReplayRefusesOtherModel(t *testing.T) {
	dir := defaultModel(t)
	r, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g := &golden.Golden{ModelRoot: strings.Repeat("ab", 32), Vocab: r.Config.Vocab}
	if _, err := r.Replay(context.Background(), g, nil); err == nil || !strings.Contains(err.Error(), "not the same model") {
		t.Errorf("other model: %v", err)
	}
}
