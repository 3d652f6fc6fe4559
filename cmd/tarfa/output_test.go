package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\tindented": "plain text\n\tindented",
		"st\b\x05t":              `st\x08\x05t`,
		"\x1b[2J\x1b]0;title\a":  `\x1b[2J\x1b]0;title\x07`,
		"cr\rdel\x7f":            `cr\x0ddel\x7f`,
		"c1 \u009b csi \u0085":   `c1 \u009b csi \u0085`,
		"ünïcödé ✓ \u00a0":       "ünïcödé ✓ \u00a0",
	} {
		if got := escapeControls(in); got != want {
			t.Errorf("escapeControls(%q) = %q, want %q", in, got, want)
		}
	}
}

// On a terminal, stdout escapes controls, keeps a character split across
// writes whole, and EndLine ends an unfinished line.
func TestStdoutWriter(t *testing.T) {
	var buf bytes.Buffer
	s := &stdout{w: &buf, terminal: true}
	check := "✓"
	s.Write([]byte("a\x1b"))
	s.Write([]byte(check[:1]))
	s.Write([]byte(check[1:]))
	s.EndLine()
	if got := buf.String(); got != `a\x1b`+check+"\n" {
		t.Errorf("terminal output %q", got)
	}
	buf.Reset()
	s.Write([]byte("done\n"))
	s.EndLine()
	if buf.String() != "done\n" {
		t.Errorf("EndLine after a newline wrote %q", buf.String())
	}
	buf.Reset()
	p := &stdout{w: &buf}
	p.Write([]byte("raw\x1b"))
	p.EndLine()
	if buf.String() != "raw\x1b\n" {
		t.Errorf("piped output %q", buf.String())
	}
}

func TestLayerRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, "none"}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 7, 9, 10}, "0-3, 7, 9-10"}} {
		if got := layerRanges(c.in); got != c.want {
			t.Errorf("layerRanges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if !strings.Contains(flagError(newRootCommand(), errNotAFlag).Error(), "see tarfa --help") {
		t.Error("flag errors point to the help")
	}
}

var errNotAFlag = bytes.ErrTooLarge
