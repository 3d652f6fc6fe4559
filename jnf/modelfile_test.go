package jnf

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenModelFile: a model file must be a regular file, not a link to
// one; a reopen (the tier's O_DIRECT descriptor) is refused once the path
// names another file than the one opened.
func TestOpenModelFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "layer-00000.jnf")
	os.WriteFile(p, []byte("data"), 0o644)
	link := filepath.Join(dir, "link.jnf")
	os.Symlink(p, link)
	fifo := filepath.Join(dir, "fifo.jnf")
	syscall.Mkfifo(fifo, 0o644)
	var nr *NotRegularError
	for _, bad := range []string{link, fifo, dir} {
		if f, _, err := OpenModelFile(bad); !errors.As(err, &nr) || nr.Path != bad {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenModelFile(%s): %v", bad, err)
		}
	}
	if _, err := ReadModelFileLimit(link, 100, "test"); !errors.As(err, &nr) {
		t.Errorf("ReadModelFileLimit of a link: %v", err)
	}
	f, st, err := OpenModelFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if g, err := ReopenModelFile(p, st, 0); err != nil {
		t.Errorf("reopening the same file: %v", err)
	} else {
		g.Close()
	}
	// Replaced by another file, by a link to the original, by a FIFO.
	other := filepath.Join(dir, "other")
	for _, replace := range []func(){
		func() { os.WriteFile(other, []byte("data"), 0o644); os.Rename(other, p) },
		func() { os.Remove(p); os.Link(link, p) },
		func() { os.Remove(p); syscall.Mkfifo(p, 0o644) },
	} {
		replace()
		var re *ReplacedError
		if g, err := ReopenModelFile(p, st, 0); !errors.As(err, &re) || !errors.Is(err, ErrVerification) {
			if g != nil {
				g.Close()
			}
			t.Errorf("reopening a replaced file: %v", err)
		}
	}
	// The descriptor still reads the file opened.
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "data" {
		t.Errorf("held descriptor: %q, %v", b, err)
	}
}
