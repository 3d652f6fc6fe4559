package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// stdout is the commands' standard output. On a terminal it escapes control
// characters (escapeControls: generated text and names read from files can
// hold any byte), and it remembers whether the last byte written ended a
// line, so that an error message can start on a line of its own.
type stdout struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	pending  []byte // on a terminal: an incomplete UTF-8 sequence held back
	midLine  bool   // the last byte written was not a newline
}

func newStdout(f *os.File) *stdout {
	return &stdout{w: f, terminal: term.IsTerminal(int(f.Fd()))}
}

// IsTerminal reports whether the output goes to a terminal.
func (s *stdout) IsTerminal() bool { return s.terminal }

func (s *stdout) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	out := p
	if s.terminal {
		data := append(append([]byte(nil), s.pending...), p...)
		cut := len(data)
		// A character split across two writes is escaped whole, not as
		// two invalid halves.
		for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
			if utf8.RuneStart(data[i]) {
				if !utf8.FullRune(data[i:]) {
					cut = i
				}
				break
			}
		}
		s.pending = append(s.pending[:0], data[cut:]...)
		out = []byte(escapeControls(string(data[:cut])))
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	s.midLine = out[len(out)-1] != '\n'
	return len(p), nil
}

// EndLine writes what is held back and a newline if the output does not
// end with one.
func (s *stdout) EndLine() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) > 0 {
		io.WriteString(s.w, escapeControls(string(s.pending)))
		s.pending, s.midLine = nil, true
	}
	if s.midLine {
		io.WriteString(s.w, "\n")
		s.midLine = false
	}
}

// isTerminal reports whether w is a terminal (the commands' stdout, or a
// terminal *os.File such as stderr).
func isTerminal(w any) bool {
	switch f := w.(type) {
	case interface{ IsTerminal() bool }:
		return f.IsTerminal()
	case *os.File:
		return term.IsTerminal(int(f.Fd()))
	}
	return false
}

// contextReader reads r until ctx is done: then its reads fail with ctx's
// error at once, even while a read of r (a terminal, a pipe nobody writes
// to) is blocked. That read is left to finish on its own; the command
// returns. Close it when done.
func contextReader(ctx context.Context, r io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	return readCloser{pr, func() error { stop(); return pr.Close() }}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// writeJSON writes v as one line of JSON (--json outputs: typed structs,
// with <, > and & left as they are).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// plural writes n and the noun in the number n needs: "1 thread",
// "2 threads", "0 threads".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
