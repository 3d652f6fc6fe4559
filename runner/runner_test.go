package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/trace"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

func defaultModel(t testing.TB) string {
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
	g, runs, err := r1.Record(context.Background(), ps, "test", nil)
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
	r4, err := Open(context.Background(), dir, Options{Threads: 4, Tier: &tier.Options{RAMBudget: tier.Auto, StagingBudget: tier.Auto}})
	if err != nil {
		t.Fatal(err)
	}
	defer r4.Close()
	diffs, err := r4.Replay(context.Background(), g2, runs2, nil)
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
	diffs, _ = r4.Replay(context.Background(), g2, runs2, nil)
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
	if _, err := r.Replay(context.Background(), g, nil, nil); err == nil || !strings.Contains(err.Error(), "not the same model") {
		t.Errorf("other model: %v", err)
	}
}

// Open stops with the context's error when it is cancelled (the engine
// load checks between tensors), and the hierarchy and files are released.
func TestOpenCancelled(t *testing.T) {
	dir := defaultModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, dir, Options{Tier: &tier.Options{StagingBudget: 1 << 20}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v", err)
	}
}

// Open reports the bytes of non-expert tensors verified as it loads them,
// up to their total, and stops when cancelled partway through: the bytes
// left are never read.
func TestOpenProgress(t *testing.T) {
	dir := defaultModel(t)
	var last, total int64
	calls := 0
	r, err := Open(context.Background(), dir, Options{Progress: func(done, tot int64) {
		if done < last || tot < done {
			t.Errorf("progress %d of %d after %d", done, tot, last)
		}
		last, total = done, tot
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if calls < 3 || last != total || total != r.Checkpoint.TensorBytes() {
		t.Errorf("%d progress calls, last %d of %d; the model has %d bytes of tensors", calls, last, total, r.Checkpoint.TensorBytes())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var at int64
	_, err = Open(ctx, dir, Options{Progress: func(done, tot int64) {
		if done > 0 && at == 0 {
			at = done
			cancel()
		}
		if done > at && at > 0 {
			t.Errorf("read %d bytes after the cancellation at %d", done, at)
		}
	}})
	if !errors.Is(err, context.Canceled) || at == 0 || at >= total {
		t.Errorf("cancelled at %d of %d bytes: %v", at, total, err)
	}
}

// TestTierAndTrace: generation through the streaming hierarchy gives the
// default path's tokens and logits; the trace records every MoE layer of
// every position of every generation, as a measured trace of this model.
func TestTierAndTrace(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	g, runs, err := ref.Record(context.Background(), ps, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	var tr bytes.Buffer
	r, err := Open(context.Background(), dir, Options{Tier: &tier.Options{RAMBudget: 128 << 10, StagingBudget: 64 << 10, Readers: 3}, Trace: &tr})
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := r.Replay(context.Background(), g, runs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		if !d.Exact() {
			t.Errorf("prompt %d through the hierarchy: %+v", d.Index, d)
		}
	}
	st := r.Tier.Stats()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Misses+st.Streamed == 0 || st.Evictions == 0 || st.MaxMapped > (128+64)<<10 {
		t.Errorf("hierarchy stats %+v", st)
	}
	rd, err := trace.NewReader(&tr)
	if err != nil {
		t.Fatal(err)
	}
	if h := rd.Header(); h.Source != trace.Measured || h.ModelRoot != r.Checkpoint.Root().String() || h.Layers != 4 || h.TopK != 2 {
		t.Errorf("trace header %+v", h)
	}
	positions := 0
	for _, run := range runs {
		positions += len(run.PromptTokens) + len(run.Generated) - 1
	}
	n := 0
	for {
		if _, err := rd.Next(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		n++
	}
	if n != positions*4 {
		t.Errorf("trace holds %d records, want %d positions × 4 MoE layers", n, positions)
	}
}

// MaxNewTokens keeps prompt + generated tokens within the model's context.
func TestContextLimit(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	limit := r.ContextLimit()
	if limit != r.Config.MaxPositions || limit <= 0 {
		t.Fatalf("ContextLimit %d, max_position_embeddings %d", limit, r.Config.MaxPositions)
	}
	prompt := make([]int, limit-2)
	n := r.MaxNewTokens(len(prompt))
	if n != 3 || r.MaxNewTokens(limit) != 1 || r.MaxNewTokens(limit+1) != 0 {
		t.Fatalf("MaxNewTokens: %d %d %d", n, r.MaxNewTokens(limit), r.MaxNewTokens(limit+1))
	}
	// Exactly n tokens fit; one more runs past the context.
	run, res, err := r.Generate(context.Background(), prompt, n, nil, golden.Sampling{}, false, nil)
	if err != nil || len(run.Generated) != n || res.StopReason != engine.StopLength {
		t.Fatalf("%d tokens after a %d-token prompt: %v, %d generated, stop %q", n, len(prompt), err, len(run.Generated), res.StopReason)
	}
	if _, _, err := r.Generate(context.Background(), prompt, n+1, nil, golden.Sampling{}, false, nil); err == nil {
		t.Fatalf("%d tokens after a %d-token prompt fit a context of %d", n+1, len(prompt), limit)
	}
}
