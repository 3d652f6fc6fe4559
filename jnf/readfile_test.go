package jnf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	data := bytes.Repeat([]byte("abc"), 5000)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFileLimit(p, int64(len(data)), "test")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("at the limit: %v, %d bytes", err, len(got))
	}
	_, err = ReadFileLimit(p, int64(len(data))-1, "test")
	var le *LimitError
	if !errors.As(err, &le) || le.Max != int64(len(data))-1 || !strings.Contains(err.Error(), "test limit") {
		t.Fatalf("over the limit: %v", err)
	}
	// A stream longer than its limit is cut off, not read to its end.
	_, err = ReadAllLimit(infinite{}, "stdin", 1<<20, "stdin")
	if !errors.As(err, &le) || le.Size != 1<<20+1 {
		t.Fatalf("endless stream: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if got, err := ReadFileLimit(empty, 10, "test"); err != nil || len(got) != 0 {
		t.Fatalf("empty file: %v %q", err, got)
	}
}

type infinite struct{}

func (infinite) Read(p []byte) (int, error) { return len(p), nil }

func TestReadFileLimitRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, what string }{
		{fifo, "named pipe"}, {link, "character device"}, {"/dev/zero", "character device"}, {dir, "directory"},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFileLimit(c.path, 1<<30, "test"); done <- err }()
		select {
		case err := <-done:
			var nr *NotRegularError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), c.what) {
				t.Errorf("%s: %v, want a NotRegularError naming a %s", c.path, err, c.what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFileLimit blocked", c.path)
		}
	}
}

// TestOpenFileRefusesSpecialFiles: a JNF file name that is a FIFO or a
// device is refused at once (a FIFO would block os.Open forever).
func TestOpenFileRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "layer-00000.jnf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(dir, "global.jnf")
	os.Symlink("/dev/zero", dev)
	for _, p := range []string{fifo, dev} {
		done := make(chan error, 1)
		go func() { _, err := OpenFile(p); done <- err }()
		select {
		case err := <-done:
			var nr *NotRegularError
			if !errors.As(err, &nr) {
				t.Errorf("%s: %v", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OpenFile(%s) blocked", p)
		}
	}
}
