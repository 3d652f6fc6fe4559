package jnf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestAtomicFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a")
	if err := WriteFileAtomic(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Errorf("content %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	f, _ := CreateAtomic(p, 0o644)
	f.WriteString("two")
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Error("uncommitted data visible under the final name")
	}
	if err := f.CommitNoReplace(); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CommitNoReplace over an existing file: %v", err)
	}
	g, _ := CreateAtomic(p, 0o644)
	g.WriteString("three")
	g.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d directory entries after abort and failed commit", len(ents))
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Errorf("content %q", b)
	}
}

func TestOpenPartialResumes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "layer.jnf")
	f, err := OpenPartial(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("first half|")
	if err := f.Suspend(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("suspended file visible under its final name: %v", err)
	}
	g, err := OpenPartial(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("second half"), int64(len("first half|"))); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first half|second half" {
		t.Errorf("content %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d directory entries after commit", len(ents))
	}
}
