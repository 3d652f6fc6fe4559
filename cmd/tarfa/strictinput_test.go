package main

import (
	"strings"
	"testing"
)

// TestTokenizeStdinIsStrictJSON: each line of `tarfa tokenize` input (and
// of --decode input) is one JSON object read strictly: a key given twice
// (encoding/json kept the last: [0, 1] became [2]), invalid UTF-8 (it was
// replaced by U+FFFD and encoded), or a second value on the line is an
// error naming the record and the byte; the lines before it are answered.
func TestTokenizeStdinIsStrictJSON(t *testing.T) {
	dir := synthDir(t, 300)
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"ids twice", "{\"ids\": [0]}\n{\"ids\": [0, 1], \"ids\": [2]}\n", []string{"--decode"}, `stdin record 2: duplicate object key "ids" (at byte 16)`},
		{"text twice", "{\"text\": \"a\", \"text\": \"b\"}\n", nil, `stdin record 1: duplicate object key "text"`},
		{"text in two cases", "{\"text\": \"a\", \"Text\": \"b\"}\n", nil, `stdin record 1: object keys "text" and "Text"`},
		{"invalid UTF-8", "{\"text\": \"a\xffb\"}\n", nil, "stdin record 1: JSON is not valid UTF-8 (at byte 11)"},
		{"two values on a line", "{\"text\": \"a\"} {\"text\": \"b\"}\n", nil, "stdin record 1: trailing data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := runCLI(t, c.stdin, append([]string{"tokenize", "--tokenizer", dir}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v; want one containing %q", err, c.want)
			}
			if strings.Count(c.stdin, "\n") != strings.Count(out, "\n")+1 {
				t.Errorf("output %q: want one line for each record before the bad one", out)
			}
		})
	}
}
