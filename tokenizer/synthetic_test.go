package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSyntheticFilesTooSmall(t *testing.T) {
	for _, v := range []int{-1, 0, 256, 299} {
		if _, _, err := SyntheticFiles(v); err == nil || !strings.Contains(err.Error(), "below the minimum 300") {
			t.Errorf("SyntheticFiles(%d) error = %v; want one naming the minimum 300", v, err)
		}
	}
}

func TestSyntheticTemplateIsQwen3(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(qwenDir, TokenizerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ChatTemplate != qwen3ChatTemplate {
		t.Fatalf("embedded qwen3ChatTemplate (%d bytes) differs from the fixture's chat_template (%d bytes)", len(qwen3ChatTemplate), len(cfg.ChatTemplate))
	}
}

func TestSyntheticTokenizer(t *testing.T) {
	english := "The people of the town were talking about the weather, and the answer was always the same: it will change soon."
	for _, v := range []int{300, 301, 512, 1024, 4096} {
		tj, cj, err := SyntheticFiles(v)
		if err != nil {
			t.Fatalf("SyntheticFiles(%d): %v", v, err)
		}
		tj2, cj2, _ := SyntheticFiles(v)
		if !bytes.Equal(tj, tj2) || !bytes.Equal(cj, cj2) {
			t.Fatalf("SyntheticFiles(%d) is not deterministic", v)
		}
		tok, err := Parse(tj, cj)
		if err != nil {
			t.Fatalf("Parse(SyntheticFiles(%d)): %v", v, err)
		}
		if tok.VocabSize() != v {
			t.Fatalf("vocab %d: VocabSize() = %d", v, tok.VocabSize())
		}
		for id := range v {
			if _, err := tok.Token(id); err != nil {
				t.Fatalf("vocab %d: id %d has no token: %v", v, id, err)
			}
		}
		for i, s := range syntheticSpecialTokens {
			if id, ok := tok.TokenID(s); !ok || id != v-5+i {
				t.Errorf("vocab %d: %s has id %d (%v); want %d", v, s, id, ok, v-5+i)
			}
			if tok.IsSpecial(v-5+i) != (i < 3) {
				t.Errorf("vocab %d: IsSpecial(%s) = %v", v, s, !(i < 3))
			}
		}
		if eos, ok := tok.EOS(); !ok || eos != v-3 {
			t.Errorf("vocab %d: EOS() = %d, %v; want %d (<|im_end|>)", v, eos, ok, v-3)
		}
		for _, s := range []string{english, "<|im_start|>user\nhi there<|im_end|>\n<think>\n\n</think>\n\n", "日本語 😀 naïve\r\n\t x", ""} {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= v {
					t.Fatalf("vocab %d: Encode(%q) gave id %d", v, s, id)
				}
			}
			if back, err := tok.Decode(ids); err != nil || back != s {
				t.Errorf("vocab %d: Decode(Encode(%q)) = %q, %v", v, s, back, err)
			}
		}
		ids := tok.Encode("<|im_start|>user\nhi<|im_end|>")
		if ids[0] != v-4 || ids[len(ids)-1] != v-3 {
			t.Errorf("vocab %d: special tokens not recognised: %v", v, ids)
		}
		tmpl, err := tok.ChatTemplate()
		if err != nil {
			t.Fatal(err)
		}
		no := false
		out, err := tmpl.Render(ChatRequest{Messages: []Message{{Role: "user", Content: "Hi"}}, AddGenerationPrompt: true, EnableThinking: &no})
		if err != nil || out != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" {
			t.Errorf("vocab %d: rendering = %q, %v", v, out, err)
		}
		if v >= 1024 {
			n := len(tok.Encode(english))
			if float64(n) > 0.5*float64(len(english)) {
				t.Errorf("vocab %d: %d tokens for %d bytes of English; want at most half", v, n, len(english))
			}
			t.Logf("vocab %d: %d bytes of English -> %d tokens", v, len(english), n)
		}
	}
}
