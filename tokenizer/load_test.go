package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLoadErrors checks that unsupported or inconsistent files are refused
// with an error that names what is wrong.
func TestLoadErrors(t *testing.T) {
	base, _, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, _ := json.Marshal(m)
		return out
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	for _, c := range []struct {
		name string
		tj   []byte
		cfg  string
		want string
	}{
		{"not json", []byte("{"), "", "tokenizer.json"},
		{"wordpiece", edit(func(m map[string]any) { model(m)["type"] = "WordPiece" }), "", `model.type "WordPiece" is not supported`},
		{"other pattern", edit(func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+`}
		}), "", `unsupported Split pattern "\\s+"`},
		{"gpt2 byte level", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
		}), "", `pre_tokenizer type "ByteLevel" is not supported`},
		{"lowercase normaliser", edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }), "", `normalizer type "Lowercase" is not supported`},
		{"missing byte", edit(func(m map[string]any) { delete(model(m)["vocab"].(map[string]any), "Ġ") }), "", `lacks the byte-level symbol "Ġ" for byte 0x20`},
		{"bad merge", edit(func(m map[string]any) {
			model(m)["merges"] = append(model(m)["merges"].([]any), []any{"q", "zz-not-a-token"})
		}), "", `["q", "zz-not-a-token"]: token not in model.vocab`},
		{"added id", edit(func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["id"] = 299 }), "", "would assign id 295"},
		{"clean up", base, `{"clean_up_tokenization_spaces": true}`, "clean_up_tokenization_spaces true is not supported"},
		{"eos unknown", base, `{"eos_token": "<eos>"}`, `eos_token "<eos>" is not in the vocabulary`},
		{"template list without default", base, `{"chat_template": [{"name": "tool_use", "template": "x"}]}`, `no template named "default" among ["tool_use"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cj []byte
			if c.cfg != "" {
				cj = []byte(c.cfg)
			}
			_, err := Parse(c.tj, cj)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse error = %v; want one containing %q", err, c.want)
			}
		})
	}
	// An unparsable chat template does not stop tokenisation; ChatTemplate
	// reports it.
	tok, err := Parse(base, []byte(`{"chat_template": "{% include 'x' %}"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.ChatTemplate(); err == nil || !strings.Contains(err.Error(), `unsupported statement "include"`) {
		t.Fatalf("ChatTemplate error = %v", err)
	}
	if _, err := (&Tokenizer{}).ChatTemplate(); err == nil || !strings.Contains(err.Error(), "no chat template") {
		t.Fatalf("ChatTemplate on a tokenizer without one: %v", err)
	}
}
