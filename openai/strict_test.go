package openai

import (
	"strings"
	"testing"
)

// TestRequestBodyIsStrictJSON: a request member given twice at any depth
// (encoding/json kept the last) or invalid UTF-8 in the body (replaced by
// U+FFFD) is a 400 invalid_json naming the member and byte, for both
// endpoints.
func TestRequestBodyIsStrictJSON(t *testing.T) {
	for _, c := range []struct {
		chat       bool
		body, want string
	}{
		{true, `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "max_tokens": 100000}`, `duplicate object key "max_tokens"`},
		{true, `{"messages": [{"role": "user", "content": "hi", "role": "system"}]}`, `duplicate object key "messages"[0]."role"`},
		{true, "{\"messages\": [{\"role\": \"user\", \"content\": \"h\xffi\"}]}", "not valid UTF-8 (at byte 44)"},
		{false, `{"prompt": "a", "prompt": "b"}`, `duplicate object key "prompt" (at byte 16)`},
	} {
		parse := ParseCompletion
		if c.chat {
			parse = ParseChat
		}
		_, err := parse([]byte(c.body))
		if err == nil || err.Status != 400 || err.Code == nil || *err.Code != "invalid_json" || !strings.Contains(err.Message, c.want) {
			t.Errorf("%s: %+v, want a 400 invalid_json containing %q", c.body, err, c.want)
		}
	}
}
