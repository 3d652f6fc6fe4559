package outdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestJournal: recorded names and their temporaries are owned, nothing
// else; the journal survives a Close for the next run, Done removes it; a
// journal naming a path outside the directory is refused.
func TestJournal(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Record("layer-00001.jnf", "manifest.json"); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"layer-00001.jnf": true, ".layer-00001.jnf.partial": true, ".layer-00001.jnf.journal": true,
		".layer-00001.jnf.tmp-9": true, "..layer-00001.jnf.journal.tmp-3": true, ".manifest.json.tmp-1": true,
		"layer-00002.jnf": false, ".layer-00002.jnf.tmp-1": false, ".notes.tmp-1": false, "notes.txt": false,
	} {
		if got := j.Owns(name); got != want {
			t.Errorf("Owns(%q) = %v, want %v", name, got, want)
		}
	}
	os.WriteFile(filepath.Join(dir, ".manifest.json.tmp-1"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, ".notes.tmp-1"), nil, 0o644)
	var fe *ForeignError
	if err := j.Check("convert", nil, false); !errors.As(err, &fe) || fe.Name != ".notes.tmp-1" {
		t.Errorf("Check: %v", err)
	}
	if err := j.RemoveStaleTemps(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".manifest.json.tmp-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("recorded temporary left: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".notes.tmp-1")); err != nil {
		t.Errorf("the user's file was removed: %v", err)
	}
	if err := j.Done(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left after Done: %v", err)
	}
	os.WriteFile(filepath.Join(dir, JournalName), []byte("../../etc/passwd\n"), 0o644)
	if _, err := Open(dir); err == nil {
		t.Error("a journal naming a path outside the directory was accepted")
	}
}
