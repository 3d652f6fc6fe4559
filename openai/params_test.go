package openai

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestParseNoops: the parameters frameworks send by default are accepted
// at their neutral values; a value that would change what the response
// means is a 400 naming the parameter.
func TestParseNoops(t *testing.T) {
	chat := func(extra string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`)
	}
	bigMeta := make([]string, MaxMetadata+1)
	for i := range bigMeta {
		bigMeta[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	for _, ok := range []string{
		`,"response_format":{"type":"text"}`, `,"response_format":null`,
		`,"store":false`, `,"store":null`,
		`,"metadata":{"trace":"abc","user":"u1"}`, `,"metadata":{}`, `,"metadata":{` + strings.Join(bigMeta[:MaxMetadata], ",") + `}`,
		`,"metadata":{"` + strings.Repeat("k", MaxMetadataKey) + `":"` + strings.Repeat("v", MaxMetadataValue) + `"}`,
		`,"reasoning_effort":"medium"`, `,"service_tier":"auto"`, `,"service_tier":"default"`,
		`,"response_format":{"type":"text"},"store":false,"metadata":{"a":"b"},"service_tier":"auto","parallel_tool_calls":true,"user":"x"`,
	} {
		if _, e := ParseChat(chat(ok)); e != nil {
			t.Errorf("%s: %v", ok, e)
		}
	}
	for _, c := range []struct{ extra, param, says string }{
		{`,"response_format":{"type":"json_object"}`, "response_format", "json_object"},
		{`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`, "response_format", "json_schema"},
		{`,"response_format":"text"`, "response_format", "type"},
		{`,"store":true`, "store", "true"},
		{`,"metadata":{"n":5}`, "metadata", "string values"},
		{`,"metadata":[1]`, "metadata", "object"},
		{`,"metadata":{` + strings.Join(bigMeta, ",") + `}`, "metadata", fmt.Sprintf("%d pairs", MaxMetadata+1)},
		{`,"metadata":{"` + strings.Repeat("k", MaxMetadataKey+1) + `":"v"}`, "metadata", "key"},
		{`,"metadata":{"k":"` + strings.Repeat("v", MaxMetadataValue+1) + `"}`, "metadata", "values"},
		{`,"reasoning_effort":"high"`, "reasoning_effort", `"high"`},
		{`,"service_tier":"priority"`, "service_tier", `"priority"`},
		{`,"service_tier":"flex"`, "service_tier", `"flex"`},
	} {
		_, e := ParseChat(chat(c.extra))
		if e == nil || e.Status != http.StatusBadRequest || e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.says) {
			t.Errorf("%.80s: %+v, want a 400 naming %s and saying %s", c.extra, e, c.param, c.says)
		}
	}
}

// TestParseTopK: top_k is taken by both endpoints; 0 and -1 (vLLM's
// default) are off; a value below -1 or a non-integer is refused.
func TestParseTopK(t *testing.T) {
	for _, body := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":%s}`, `{"model":"m","prompt":"x","top_k":%s}`} {
		parse := ParseChat
		if strings.Contains(body, "prompt") {
			parse = ParseCompletion
		}
		for v, want := range map[string]int{"5": 5, "1": 1, "0": 0, "-1": 0, fmt.Sprint(MaxTopK): MaxTopK} {
			p, e := parse(fmt.Appendf(nil, body, v))
			if e != nil || p.TopK != want {
				t.Errorf("top_k %s: %+v %v, want %d", v, p, e, want)
			}
		}
		for _, v := range []string{"-2", fmt.Sprint(MaxTopK + 1), `"5"`, "2.5"} {
			_, e := parse(fmt.Appendf(nil, body, v))
			if e == nil || e.Param == nil || *e.Param != "top_k" {
				t.Errorf("top_k %s: %+v, want a 400 naming top_k", v, e)
			}
		}
	}
}

// TestParseMaxTokensZero: max_tokens and max_completion_tokens 0 are
// refused naming the parameter (0 is not "the default").
func TestParseMaxTokensZero(t *testing.T) {
	for _, c := range []struct {
		parse func([]byte) (*Params, *Error)
		body  string
		param string
	}{
		{ParseChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, "max_tokens"},
		{ParseChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}`, "max_completion_tokens"},
		{ParseCompletion, `{"model":"m","prompt":"x","max_tokens":0}`, "max_tokens"},
		{ParseCompletion, `{"model":"m","prompt":"x","max_tokens":-3}`, "max_tokens"},
	} {
		p, e := c.parse([]byte(c.body))
		if e == nil || e.Status != http.StatusBadRequest || e.Param == nil || *e.Param != c.param {
			t.Errorf("%s: %+v %+v, want a 400 naming %s", c.body, p, e, c.param)
		}
	}
	if p, e := ParseCompletion([]byte(`{"model":"m","prompt":"x","max_tokens":1}`)); e != nil || p.MaxTokens != 1 {
		t.Errorf("max_tokens 1: %+v %v", p, e)
	}
}
