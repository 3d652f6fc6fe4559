//go:build unix

package golden

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A prompt file is read as a bounded regular file: a FIFO is refused at
// once instead of blocking.
func TestReadPromptFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.jsonl")
	os.WriteFile(p, []byte(`{"tokens": [1, 2]}`+"\n"), 0o644)
	ps, err := ReadPromptFile(p)
	if err != nil || len(ps) != 1 || len(ps[0].Tokens) != 2 {
		t.Fatalf("ReadPromptFile: %v %+v", err, ps)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPromptFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
	if _, err := ReadPromptFile(filepath.Join(dir, "nope.jsonl")); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}
