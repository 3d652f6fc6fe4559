package golden

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

const root = "0b21276f0d7d96469e245061ceb0c28ca5836ffd5cd7b2369b852af7f4687cc8"

func sampleRuns() []Run {
	row := func(seed float32) []float32 {
		r := make([]float32, 8)
		for i := range r {
			r[i] = seed * float32(i-3)
		}
		return r
	}
	return []Run{
		{PromptTokens: []int{1, 2, 3}, Generated: []int{7, 7}, MaxTokens: 2, Logits: [][]float32{row(1), row(2)}},
		{PromptTokens: []int{4}, Generated: []int{0, 7, 7}, MaxTokens: 3, Sampling: Sampling{Temperature: 0.7, TopP: 0.9, Seed: 5}, Logits: [][]float32{row(-1), row(3), row(0.5)}},
	}
}

func write(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "g")
	g := &Golden{ModelRoot: root, Arch: "qwen3_moe", Vocab: 8, Backend: "cpu", Prompts: make([]PromptRecord, 2)}
	if err := Write(dir, g, sampleRuns()); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := write(t)
	g, runs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleRuns()
	for i := range want {
		d := Compare(i, &want[i], &runs[i])
		if !d.Exact() || d.Identical != len(want[i].Logits) {
			t.Errorf("prompt %d: %+v", i, d)
		}
	}
	if len(g.Prompts[1].Chain) != 3 || g.Prompts[1].Sampling.Seed != 5 {
		t.Errorf("metadata %+v", g.Prompts[1])
	}
	// Different model root → different chain.
	r := sampleRuns()[0]
	var other [32]byte
	if Chain(other, &r)[0] == g.Prompts[0].Chain[0] {
		t.Error("chain does not bind the model root")
	}
}

func TestTamperedGoldenRejected(t *testing.T) {
	dir := write(t)
	p := filepath.Join(dir, LogitsFile)
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 0x01 // last logit of the last prompt
	os.WriteFile(p, b, 0o644)
	_, _, err := Read(dir)
	if err == nil || !strings.Contains(err.Error(), "prompt 1 step 2") {
		t.Errorf("tampered logits: %v", err)
	}
	dir = write(t)
	mp := filepath.Join(dir, MetaFile)
	var m map[string]any
	b, _ = os.ReadFile(mp)
	json.Unmarshal(b, &m)
	m["prompts"].([]any)[0].(map[string]any)["prompt_tokens"] = []int{1, 2, 4}
	b, _ = json.Marshal(m)
	os.WriteFile(mp, b, 0o644)
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "prompts hash to prompt_set") {
		t.Errorf("tampered prompt: %v", err)
	}
}

func TestCompare(t *testing.T) {
	g := sampleRuns()[1]
	r := sampleRuns()[1]
	r.Logits[1] = append([]float32(nil), r.Logits[1]...)
	r.Logits[1][2] = math.Nextafter32(r.Logits[1][2], 100)
	d := Compare(0, &g, &r)
	if d.Exact() || d.FirstDivergent != 1 || d.Identical != 2 || d.Top1Agree != 3 || d.MaxAbs == 0 || d.MaxAbs > 1e-6 || d.MaxKL < 0 {
		t.Errorf("one-ulp change: %+v", d)
	}
	r = sampleRuns()[1]
	r.Generated = []int{0, 6, 7}
	d = Compare(0, &g, &r)
	if d.Exact() || d.FirstDivergent != 1 || d.Compared != 2 || !strings.Contains(d.Note, "token 1 differs") {
		t.Errorf("token change: %+v", d)
	}
	r = sampleRuns()[1]
	r.PromptTokens = []int{5}
	if d := Compare(0, &g, &r); d.Exact() || d.FirstDivergent != 0 {
		t.Errorf("prompt change: %+v", d)
	}
	s := CompareStep([]float32{0, 10}, []float32{10, 0})
	if s.Top1Agree || s.KL < 9 {
		t.Errorf("swapped distribution: %+v", s)
	}
}

func TestParsePrompts(t *testing.T) {
	in := `{"prompt": "hello", "max_tokens": 4}

{"messages": [{"role": "user", "content": "hi"}], "seed": 9, "temperature": 0.8, "top_p": 0.95, "top_k": 40}
{"tokens": [1, 2, 3], "stop": [2]}
`
	ps, err := ParsePrompts(strings.NewReader(in), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || *ps[0].Text != "hello" || ps[0].MaxTokens != 4 || ps[1].Sampling.Seed != 9 || ps[1].Sampling.TopK != 40 ||
		ps[1].MaxTokens != DefaultMaxTokens || len(ps[2].Tokens) != 3 || ps[2].Stop[0] != 2 || ps[2].Line != 4 {
		t.Errorf("parsed %+v", ps)
	}
	for _, bad := range []string{`{"prompt": "a", "tokens": [1]}`, `{}`, `{"prompt": "a", "colour": 1}`, `{"tokens": []}`, `{"prompt": "a", "top_p": 1.5}`, `not json`, ``} {
		if _, err := ParsePrompts(strings.NewReader(bad), "p.jsonl"); err == nil || !strings.Contains(err.Error(), "p.jsonl") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A member of the wrong type is named in the file's words, with the file
// and line: never Go's "cannot unmarshal ... into Go struct field".
func TestParsePromptsTypeErrors(t *testing.T) {
	for line, want := range map[string]string{
		`{"prompt": 5}`:                            `p.jsonl:2: "prompt" must be a string, got a number`,
		`{"tokens": ["a"]}`:                        `p.jsonl:2: "tokens" must be a list of token ids (whole numbers from 0), got a string`,
		`{"prompt": "a", "max_tokens": 1.5}`:       `p.jsonl:2: "max_tokens" must be a whole number, got a number 1.5`,
		`{"prompt": "a", "enable_thinking": "no"}`: `p.jsonl:2: "enable_thinking" must be true or false, got a string`,
		`{"prompt": "a", "temperature": "hot"}`:    `p.jsonl:2: "temperature" must be a number, got a string`,
		`{"prompt": ["a"]}`:                        `p.jsonl:2: "prompt" must be a string, got an array`,
	} {
		_, err := ParsePrompts(strings.NewReader("{\"prompt\": \"ok\"}\n"+line), "p.jsonl")
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s: %v, want %q", line, err, want)
		}
	}
}

func FuzzParsePrompts(f *testing.F) {
	f.Add([]byte(`{"prompt": "hello", "max_tokens": 4}` + "\n" + `{"tokens": [1, 2], "top_p": 0.5}`))
	f.Add([]byte(`{"messages": [{"role": "user", "content": "hi"}], "seed": 1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := ParsePrompts(strings.NewReader(string(b)), "f.jsonl")
		if err != nil {
			return
		}
		for _, p := range ps {
			n := 0
			if p.Text != nil {
				n++
			}
			if len(p.Messages) > 0 {
				n++
			}
			if p.Tokens != nil {
				n++
			}
			if n != 1 || p.MaxTokens <= 0 || p.Sampling.Temperature < 0 || p.Sampling.TopP < 0 || p.Sampling.TopP > 1 {
				t.Fatalf("accepted inconsistent prompt %+v", p)
			}
		}
	})
}

// Data after the JSON value is refused, not silently dropped: a second
// object on a prompt line, anything after golden.json's object.
func TestTrailingJSONRefused(t *testing.T) {
	if _, err := ParsePrompts(strings.NewReader(`{"prompt": "a"} {"prompt": "b"}`), "p.jsonl"); err == nil || !strings.Contains(err.Error(), "p.jsonl:1") {
		t.Errorf("two prompts on one line: %v", err)
	}
	dir := write(t)
	mp := filepath.Join(dir, MetaFile)
	b, _ := os.ReadFile(mp)
	os.WriteFile(mp, append(b, []byte(`{"format": "x"}`)...), 0o644)
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "trailing data") {
		t.Errorf("golden.json with a second object: %v", err)
	}
}

// TestPromptSetCommitted: a golden record cannot lose, gain, reorder or
// share prompts without being refused.
func TestPromptSetCommitted(t *testing.T) {
	edit := func(f func(m map[string]any)) string {
		dir := write(t)
		mp := filepath.Join(dir, MetaFile)
		var m map[string]any
		b, _ := os.ReadFile(mp)
		json.Unmarshal(b, &m)
		f(m)
		b, _ = json.Marshal(m)
		os.WriteFile(mp, b, 0o644)
		return dir
	}
	prompts := func(m map[string]any) []any { return m["prompts"].([]any) }
	set := func(m map[string]any) map[string]any { return m["prompt_set"].(map[string]any) }
	for _, c := range []struct {
		name string
		f    func(m map[string]any)
		want string
	}{
		{"empty", func(m map[string]any) { m["prompts"] = []any{}; set(m)["count"] = 0 }, "at least one"},
		{"one removed", func(m map[string]any) { m["prompts"] = prompts(m)[:1] }, "prompt_set says 2 prompts"},
		{"one removed, count fixed", func(m map[string]any) { m["prompts"] = prompts(m)[:1]; set(m)["count"] = 1 }, "prompts hash to prompt_set"},
		{"sampling edited", func(m map[string]any) {
			prompts(m)[1].(map[string]any)["sampling"].(map[string]any)["seed"] = 6
		}, "prompts hash to prompt_set"},
		{"generated edited", func(m map[string]any) { prompts(m)[0].(map[string]any)["generated"] = []int{7, 6} }, "prompts hash to prompt_set"},
		{"reordered", func(m map[string]any) { p := prompts(m); p[0], p[1] = p[1], p[0] }, "prompt_set"},
		{"shared tensor", func(m map[string]any) {
			prompts(m)[1].(map[string]any)["logits_tensor"] = "prompt0.logits"
		}, "both name the logits tensor"},
	} {
		dir := edit(c.f)
		_, _, err := Read(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, jnf.ErrVerification) {
			t.Errorf("%s: %v, want an ErrVerification containing %q", c.name, err, c.want)
		}
	}
	// The ID is stable and names the set.
	g1, _, err := Read(write(t))
	if err != nil {
		t.Fatal(err)
	}
	g2, _, _ := Read(write(t))
	if g1.ID() != g2.ID() || !strings.HasPrefix(g1.ID(), "sha256:") || len(g1.ID()) != 71 {
		t.Errorf("IDs %s %s", g1.ID(), g2.ID())
	}
}

// TestLogitsFileMatchesThePromptSet: the logits file must hold exactly the
// prompts' tensors and repeat the prompt-set digest.
func TestLogitsFileMatchesThePromptSet(t *testing.T) {
	rewrite := func(dir string, extra bool, meta map[string]string) {
		p := filepath.Join(dir, LogitsFile)
		f, err := safetensors.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		var specs []safetensors.Spec
		data := map[string][]byte{}
		for _, tn := range f.Tensors {
			_, b, _ := f.ReadTensor(tn.Name)
			specs = append(specs, safetensors.Spec{Name: tn.Name, DType: tn.DType, Shape: tn.Shape})
			data[tn.Name] = b
		}
		if meta == nil {
			meta = f.Metadata
		}
		f.Close()
		if extra {
			specs = append(specs, safetensors.Spec{Name: "prompt9.logits", DType: jnf.F32, Shape: []int64{1, 8}})
			data["prompt9.logits"] = make([]byte, 32)
		}
		err = safetensors.WriteFile(p, specs, meta, func(s safetensors.Spec, w io.Writer) error { _, err := w.Write(data[s.Name]); return err })
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := write(t)
	rewrite(dir, true, nil)
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), `holds tensor "prompt9.logits", which no prompt names`) {
		t.Errorf("extra tensor: %v", err)
	}
	dir = write(t)
	rewrite(dir, false, map[string]string{"format": Format, "model_root": root, "prompt_set": strings.Repeat("0", 64)})
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "was written for prompt set") {
		t.Errorf("logits file of another prompt set: %v", err)
	}
}
