package weights

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAuxFileReplacedAfterOpen: an auxiliary file replaced after Open (by
// a FIFO, or by a symbolic link to other bytes) is not opened: AuxFile
// serves the file Open hashed, read through the descriptor Open kept.
func TestAuxFileReplacedAfterOpen(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	m := open(t, dir)
	want, err := m.AuxFile("generation_config.json")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "generation_config.json")
	for _, kind := range []string{"fifo", "symlink"} {
		os.Remove(p)
		switch kind {
		case "fifo":
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		case "symlink":
			other := filepath.Join(t.TempDir(), "other.json")
			os.WriteFile(other, []byte(`{"do_sample": true}`), 0o644)
			if err := os.Symlink(other, p); err != nil {
				t.Fatal(err)
			}
		}
		got, err := m.AuxFile("generation_config.json")
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("replaced by a %s: %q, %v; want the bytes opened with the model", kind, got, err)
		}
	}
}
