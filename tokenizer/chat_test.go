package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRenderTyped renders hf_goldens.json's tool-calling conversation through
// the typed API (ChatRequest) rather than raw JSON.
func TestRenderTyped(t *testing.T) {
	tok := loadQwen(t)
	tmpl, err := tok.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	g := readHFGoldens(t)
	c := g.QwenChat[3]
	var want string
	if err := json.Unmarshal(c["rendered"], &want); err != nil {
		t.Fatal(err)
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(c["tools"], &tools); err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	if err := json.Unmarshal(c["messages"], &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 6 || len(msgs[1].ToolCalls) != 1 {
		t.Fatalf("unexpected golden case: %+v", msgs)
	}
	got, err := tmpl.Render(ChatRequest{Messages: msgs, Tools: tools, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Render\n got  %q\n want %q", got, want)
	}
	thinking := true
	got, err = tmpl.Render(ChatRequest{Messages: []Message{{Role: "user", Content: "x"}}, AddGenerationPrompt: true, EnableThinking: &thinking})
	if err != nil || got != "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("Render with enable_thinking true = %q, %v", got, err)
	}
}

func TestChatTemplateWithNow(t *testing.T) {
	tj, _, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(tj, []byte(`{"chat_template": "{{ bos_token is defined }} {{ eos_token }} {{ strftime_now('%d %B %Y') }}", "eos_token": "<|im_end|>"}`))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := tok.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	fixed := tmpl.WithNow(time.Date(2025, 3, 7, 0, 0, 0, 0, time.UTC))
	got, err := fixed.RenderJSON([]byte(`{"messages": []}`))
	if err != nil || got != "False <|im_end|> 07 March 2025" {
		t.Fatalf("render = %q, %v", got, err)
	}
	if got, err := tmpl.RenderJSON([]byte(`{"messages": []}`)); err != nil || strings.Contains(got, "2025") && time.Now().Year() != 2025 {
		t.Fatalf("WithNow changed the original template: %q, %v", got, err)
	}
}

// TestChatTemplateLimits checks that a chat template from a checkpoint is
// bounded: a hostile one fails ChatTemplate (syntax nested too deep) or
// RenderJSON (a budget), quickly, with an error that names the limit.
func TestChatTemplateLimits(t *testing.T) {
	tj, _, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tmpl, want string
		atParse    bool
	}{
		{"{{ 'a'|indent(1000000000000) }}", "line 1: template exceeds its value budget of 128 MiB (filter indent)", false},
		{"{{ " + strings.Repeat("(", 100_000) + "1" + strings.Repeat(")", 100_000) + " }}", "template nests deeper than its limit of 1000 (parsing)", true},
		{"{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}", "template exceeds its budget of 10000000 steps", false},
		{"{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "template exceeds its value budget of 128 MiB ('+')", false},
	} {
		cfg, err := json.Marshal(map[string]string{"chat_template": c.tmpl})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tok, err := Parse(tj, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := tok.ChatTemplate()
		if err == nil {
			if c.atParse {
				t.Fatalf("%.40q: ChatTemplate succeeded", c.tmpl)
			}
			_, err = tmpl.RenderJSON([]byte(`{"messages": []}`))
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%.40q: %v; want %q", c.tmpl, err, c.want)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%.40q: took %v", c.tmpl, d)
		}
	}
}
