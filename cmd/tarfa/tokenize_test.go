package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/tokenizer"
)

var qwenTokenizerDir = filepath.Join("..", "..", "validation", "testdata", "qwen3-tokenizer")

// runCLI runs the CLI in-process with stdin and returns stdout and the error.
func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestTokenizeCommandQwen(t *testing.T) {
	in := `{"text": "Hello, world!"}
{"text": "<|im_start|>user\nhi<|im_end|>"}
{"text": ""}
`
	out, err := runCLI(t, in, "tokenize", "--tokenizer", qwenTokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ids":[9707,11,1879,0]}
{"ids":[151644,872,198,6023,151645]}
{"ids":[]}
`
	if out != want {
		t.Fatalf("tokenize output\n got  %q\n want %q", out, want)
	}
	out, err = runCLI(t, `{"ids": [9707, 11, 1879, 0]}`, "tokenize", "--decode", "--tokenizer", qwenTokenizerDir)
	if err != nil || out != "{\"text\":\"Hello, world!\"}\n" {
		t.Fatalf("tokenize --decode = %q, %v", out, err)
	}
}

func TestTemplateCommandQwen(t *testing.T) {
	in := `{"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": true, "enable_thinking": false}`
	out, err := runCLI(t, in, "template", "--tokenizer", qwenTokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if out != want {
		t.Fatalf("template output\n got  %q\n want %q", out, want)
	}
	out, err = runCLI(t, in, "template", "--ids", "--tokenizer", qwenTokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Rendered string `json:"rendered"`
		IDs      []int  `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("template --ids output %q: %v", out, err)
	}
	wantIDs := []int{151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271}
	if got.Rendered != want || !equalInts(got.IDs, wantIDs) {
		t.Fatalf("template --ids = %+v; want ids %v", got, wantIDs)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// synthDir writes a synthetic tokenizer to a temporary directory.
func synthDir(t *testing.T, vocab int) string {
	t.Helper()
	tj, cj, err := tokenizer.SyntheticFiles(vocab)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, tokenizer.TokenizerFile), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tokenizer.TokenizerConfigFile), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTokenizeCommandRoundTripSynthetic(t *testing.T) {
	dir := synthDir(t, 512)
	texts := []string{"The quick brown fox.", "<|im_start|>assistant\n<think>\n\n</think>\n\nOK<|im_end|>", "日本 😀 \t\r\n"}
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(map[string]string{"text": s})
		in.Write(b)
		in.WriteByte('\n')
	}
	out, err := runCLI(t, in.String(), "tokenize", "--tokenizer", dir)
	if err != nil {
		t.Fatal(err)
	}
	back, err := runCLI(t, out, "tokenize", "--decode", "--tokenizer", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(back, "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("decoded %d lines, want %d: %q", len(lines), len(texts), back)
	}
	for i, l := range lines {
		var rec struct{ Text string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Text != texts[i] {
			t.Errorf("line %d: %q (%v); want text %q", i, l, err, texts[i])
		}
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	dir := synthDir(t, 300)
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"no tokenizer flag", "", []string{"tokenize"}, `required flag(s) "tokenizer" not set`},
		{"missing dir", "", []string{"tokenize", "--tokenizer", filepath.Join(dir, "nope")}, "tokenizer.json"},
		{"bad json", "{\"text\": 1}\n", []string{"tokenize", "--tokenizer", dir}, "stdin record 1"},
		{"no text", "{\"txt\": \"a\"}\n", []string{"tokenize", "--tokenizer", dir}, `stdin record 1: no "text" string`},
		{"id out of range", "{\"ids\": [0, 300]}\n", []string{"tokenize", "--decode", "--tokenizer", dir}, "id 300 out of range [0, 300)"},
		{"template without messages", "{}", []string{"template", "--tokenizer", dir}, `"messages" is missing`},
		{"template with a misspelt messages", `{"message": []}`, []string{"template", "--tokenizer", dir}, `"messages" is missing`},
		{"template with messages not a list", `{"messages": 3}`, []string{"template", "--tokenizer", dir}, `"messages" must be a list`},
		{"template bad json", "{", []string{"template", "--tokenizer", dir}, "chat input"},
		{"template fails on no messages", `{"messages": []}`, []string{"template", "--tokenizer", dir}, "list object has no element 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runCLI(t, c.stdin, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v; want one containing %q", err, c.want)
			}
		})
	}
}
