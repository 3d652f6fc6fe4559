package hfgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The committed checkpoints are exactly what WriteAll produces today, so the
// committed HF references still describe them.
func TestCommittedCheckpointsAreReproducible(t *testing.T) {
	dir := t.TempDir()
	if err := WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, v := range Variants {
		got := filepath.Join(dir, v.Name, "checkpoint")
		want := filepath.Join("..", "testdata", "synthref", v.Name, "checkpoint")
		ents, err := os.ReadDir(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			a, _ := os.ReadFile(filepath.Join(got, e.Name()))
			b, err := os.ReadFile(filepath.Join(want, e.Name()))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s/%s differs from the committed file (%v): regenerate the references", v.Name, e.Name(), err)
			}
		}
	}
}
