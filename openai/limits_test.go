package openai

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestParseLimits: each request limit refuses the first value past it
// with a 400 naming the parameter, and accepts the value at it.
func TestParseLimits(t *testing.T) {
	msg := `{"role":"user","content":"hi"}`
	tool := `{"type":"function","function":{"name":"f"}}`
	chat := func(extra string, messages int) string {
		return fmt.Sprintf(`{"model":"m","messages":[%s]%s}`, strings.TrimSuffix(strings.Repeat(msg+",", messages), ","), extra)
	}
	stops := func(n, size int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("%q", strings.Repeat(string(rune('a'+i)), size))
		}
		return `,"stop":[` + strings.Join(s, ",") + `]`
	}
	tools := func(n int) string {
		return `,"tools":[` + strings.TrimSuffix(strings.Repeat(tool+",", n), ",") + `]`
	}
	comp := func(logprobs int) string { return fmt.Sprintf(`{"model":"m","prompt":"x","logprobs":%d}`, logprobs) }
	for _, c := range []struct {
		name      string
		parse     func([]byte) (*Params, *Error)
		at, past  string
		wantParam string
	}{
		{"stop sequences", ParseChat, chat(stops(MaxStop, 1), 1), chat(stops(MaxStop+1, 1), 1), "stop"},
		{"stop length", ParseChat, chat(stops(1, MaxStopLen), 1), chat(stops(1, MaxStopLen+1), 1), "stop"},
		{"messages", ParseChat, chat("", MaxMessages), chat("", MaxMessages+1), "messages"},
		{"tools", ParseChat, chat(tools(MaxTools), 1), chat(tools(MaxTools+1), 1), "tools"},
		{"completions logprobs", ParseCompletion, comp(MaxCompLogprob), comp(MaxCompLogprob + 1), "logprobs"},
	} {
		if _, e := c.parse([]byte(c.at)); e != nil {
			t.Errorf("%s at the limit: %v", c.name, e)
		}
		_, e := c.parse([]byte(c.past))
		if e == nil || e.Status != http.StatusBadRequest || e.Param == nil || *e.Param != c.wantParam {
			t.Errorf("%s past the limit: %+v, want a 400 naming %q", c.name, e, c.wantParam)
		}
	}
}
