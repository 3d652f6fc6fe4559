package tokenizer

import (
	"bytes"
	"strings"
	"testing"
)

// TestStrictJSON: tokenizer.json, tokenizer_config.json and chat input are
// read with the strict JSON rules of jnf/SPEC.md: a key given twice (where
// encoding/json and Python keep the last one, other readers the first), a
// key matching a field only ignoring case, or invalid UTF-8 is an error
// naming the file and where, never a silent choice.
func TestStrictJSON(t *testing.T) {
	tj, cfg, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(tj, cfg); err != nil {
		t.Fatal(err)
	}
	once := func(b []byte, old, new string) []byte {
		t.Helper()
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%q not in the synthetic files", old)
		}
		return bytes.Replace(b, []byte(old), []byte(new), 1)
	}
	for _, c := range []struct {
		name    string
		tj, cfg []byte
		want    []string
	}{
		{"vocab key twice", once(tj, `"vocab": {`, `"vocab": {"a": 7, `), cfg,
			[]string{"tokenizer.json", `duplicate object key "model"."vocab"."a"`, "at byte"}},
		{"member twice", once(tj, `"version": "1.0",`, `"version": "1.0", "added_tokens": [],`), cfg,
			[]string{"tokenizer.json", `duplicate object key "added_tokens"`}},
		{"invalid UTF-8", once(tj, `"<|im_start|>"`, "\"<|im_start\xff|>\""), cfg,
			[]string{"tokenizer.json", "not valid UTF-8 (at byte"}},
		{"added token member in two cases", once(tj, `"content": "<think>",`, `"content": "<think>", "Content": "<nothink>",`), cfg,
			[]string{"tokenizer.json", `added_tokens`, `"Content"`, `differ only in case`}},
		{"config key twice", tj, once(cfg, `"eos_token": "<|im_end|>",`, `"eos_token": "<|im_end|>", "eos_token": "<|endoftext|>",`),
			[]string{"tokenizer_config.json", `duplicate object key "eos_token"`}},
		{"config key in two cases", tj, once(cfg, `"eos_token": "<|im_end|>",`, `"eos_token": "<|im_end|>", "EOS_TOKEN": "<|endoftext|>",`),
			[]string{"tokenizer_config.json", `"EOS_TOKEN"`}},
		{"config invalid UTF-8", tj, once(cfg, `"errors": "replace"`, "\"errors\": \"repl\xc3ace\""),
			[]string{"tokenizer_config.json", "not valid UTF-8"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.tj, c.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	tok, err := Parse(tj, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := tok.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	in := `{"messages": [{"role": "user", "content": "hi", "content": "bye"}], "add_generation_prompt": true}`
	if _, err := ct.RenderJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), `duplicate object key "messages"[0]."content"`) {
		t.Errorf("chat input with a key twice: %v", err)
	}
}
