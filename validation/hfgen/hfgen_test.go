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
	checkCommitted(t, WriteAll, Variants, "synthref")
}

// The same for the FP8 checkpoints (validation/testdata/synthref-fp8).
func TestCommittedFP8CheckpointsAreReproducible(t *testing.T) {
	checkCommitted(t, WriteFP8, FP8Variants, "synthref-fp8")
}

func checkCommitted(t *testing.T, write func(string) error, vs []Variant, under string) {
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		got := filepath.Join(dir, v.Name, "checkpoint")
		want := filepath.Join("..", "testdata", under, v.Name, "checkpoint")
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
