package golden

import (
	"strings"
	"testing"
)

// Settings that greedy decoding would ignore, and values past the bounds,
// are refused with the line and the field, not run silently.
func TestParsePromptsRefusesIgnoredAndOutOfRange(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"prompt": "a", "seed": 3}`, `p.jsonl:1: "seed" without a "temperature" above 0`},
		{`{"prompt": "a", "top_k": 3}`, `p.jsonl:1: "top_k" without a "temperature" above 0`},
		{`{"prompt": "a", "top_p": 0.5, "temperature": 0}`, `p.jsonl:1: "top_p" without a "temperature" above 0`},
		{`{"prompt": "a", "max_tokens": 16777217}`, `p.jsonl:1: max_tokens 16777217, want 1 to 16777216`},
		{`{"prompt": "a", "temperature": 1e7}`, `p.jsonl:1: temperature 1e+07, want 0 (greedy) to 1e+06`},
	} {
		if _, err := ParsePrompts(strings.NewReader(c.line), "p.jsonl"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.line, err, c.want)
		}
	}
	if _, err := ParsePrompts(strings.NewReader(`{"prompt": "a", "seed": 3, "top_k": 2, "temperature": 0.5}`), "p.jsonl"); err != nil {
		t.Errorf("sampling settings with a temperature: %v", err)
	}
}
