package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/verify"
)

var update = flag.Bool("update", false, "rewrite testdata/root_vector.json from the Python implementation")

// rootVector is what testdata/jnfroot.py prints: both roots and every leaf
// (the manifest leaf, then each entry's full leaf).
type rootVector struct {
	Root        string   `json:"root"`
	WeightsRoot string   `json:"weights_root"`
	Leaves      []string `json:"leaves"`
}

const vectorFixture = "../validation/testdata/fixtures/qwen3moe-dev-a/checkpoint"

func convertVectorFixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), vectorFixture, dir, convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readVector(t *testing.T) rootVector {
	t.Helper()
	b, err := os.ReadFile("testdata/root_vector.json")
	if err != nil {
		t.Fatal(err)
	}
	var v rootVector
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestIndependentRootVector pins the leaf bytes and both roots of one
// fixture conversion to the vector an independent implementation of
// SPEC.md §4–5 (testdata/jnfroot.py) computed from the files.
func TestIndependentRootVector(t *testing.T) {
	dir := convertVectorFixture(t)
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := readVector(t)
	got := []string{string(m.ManifestLeaf())}
	for i := range m.Entries {
		got = append(got, string(m.Entries[i].FullLeaf()))
	}
	if len(got) != len(want.Leaves) {
		t.Fatalf("%d leaves, the vector has %d", len(got), len(want.Leaves))
	}
	for i := range got {
		if got[i] != want.Leaves[i] {
			t.Errorf("leaf %d:\n%s\nvector:\n%s", i, got[i], want.Leaves[i])
		}
	}
	if m.Root != want.Root || m.WeightsRoot != want.WeightsRoot {
		t.Errorf("roots %s / %s, the vector says %s / %s", m.Root, m.WeightsRoot, want.Root, want.WeightsRoot)
	}
}

// TestPythonImplementationAgrees re-runs the independent implementation on
// a fresh conversion (it needs python3; CI has it).
func TestPythonImplementationAgrees(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("TARFA_TEST_DISALLOW_SKIP") != "" {
			t.Fatalf("python3 not found and TARFA_TEST_DISALLOW_SKIP is set: %v", err)
		}
		t.Skip("python3 not found")
	}
	dir := convertVectorFixture(t)
	var stderr bytes.Buffer
	cmd := exec.Command(py, "testdata/jnfroot.py", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jnfroot.py: %v\n%s", err, stderr.String())
	}
	if *update {
		if err := os.WriteFile("testdata/root_vector.json", out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got rootVector
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := readVector(t)
	if got.Root != want.Root || got.WeightsRoot != want.WeightsRoot || strings.Join(got.Leaves, "") != strings.Join(want.Leaves, "") {
		t.Errorf("jnfroot.py gives root %s / %s, the committed vector %s / %s", got.Root, got.WeightsRoot, want.Root, want.WeightsRoot)
	}
}
