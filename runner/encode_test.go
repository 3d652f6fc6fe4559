package runner

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tarfa-ai/tarfa/tokenizer"
)

// TestEncodeChatToolsNeedsTemplate: tools offered to a chat template that
// never reads "tools" are an error, not silently dropped; the model's own
// template (which reads them) renders them.
func TestEncodeChatToolsNeedsTemplate(t *testing.T) {
	r, err := Open(context.Background(), defaultModel(t), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msgs := []json.RawMessage{json.RawMessage(`{"role":"user","content":"weather?"}`)}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"get_weather"}}`)}
	if _, text, err := r.EncodeChatTools(msgs, tools); err != nil || !strings.Contains(text, "get_weather") {
		t.Fatalf("the model's template: %q %v, want the tool rendered", text, err)
	}

	aux, err := r.Checkpoint.AuxFS()
	if err != nil {
		t.Fatal(err)
	}
	tj, err := fs.ReadFile(aux, tokenizer.TokenizerFile)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadFS(fstest.MapFS{
		tokenizer.TokenizerFile:    {Data: tj},
		tokenizer.ChatTemplateFile: {Data: []byte(`{% for m in messages %}{{ m.content }}{% endfor %}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Tok = tok
	if _, text, err := r.EncodeChatTools(msgs, nil); err != nil || text != "weather?" {
		t.Fatalf("no tools: %q %v", text, err)
	}
	_, text, err := r.EncodeChatTools(msgs, tools)
	if err == nil || !strings.Contains(err.Error(), `does not read "tools"`) {
		t.Fatalf("tools to a template without them: %q %v, want an error", text, err)
	}
}
