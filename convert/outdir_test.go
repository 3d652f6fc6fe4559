package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/internal/outdir"
)

// TestConvertReplacesNothingOfTheUsers: convert deletes or replaces only
// what a conversion into the directory recorded writing. A directory
// holding any other file (a hidden ".*.tmp-*" one too, which it used to
// delete) is refused before anything is written, naming the file; with
// Force it converts and leaves those files alone. A finished conversion is
// extended and a killed one resumed without Force.
func TestConvertReplacesNothingOfTheUsers(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "m")
	os.MkdirAll(dst, 0o755)
	user := map[string]string{".notes.tmp-1": "mine", "notes.txt": "also mine"}
	for n, b := range user {
		os.WriteFile(filepath.Join(dst, n), []byte(b), 0o644)
	}
	_, err := Convert(context.Background(), devA, dst, Options{LastLayer: 0})
	var fe *outdir.ForeignError
	if !errors.As(err, &fe) || fe.Name != ".notes.tmp-1" {
		t.Fatalf("a directory holding the user's files: %v", err)
	}
	wantErr(t, "refused", err, dst, ".notes.tmp-1", "--force")
	if got := listing(t, dst); got != ".notes.tmp-1 notes.txt" {
		t.Errorf("after the refusal the directory holds %q", got)
	}
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: 0, Force: true}); err != nil {
		t.Fatalf("with Force: %v", err)
	}
	for n, want := range user {
		if b, err := os.ReadFile(filepath.Join(dst, n)); err != nil || string(b) != want {
			t.Errorf("%s after a forced conversion: %q, %v", n, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, outdir.JournalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write journal is left after success: %v", err)
	}

	// A finished conversion (its manifest lists its files) is extended
	// without Force.
	dst = filepath.Join(t.TempDir(), "m")
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(context.Background(), devA, dst, Options{FirstLayer: 1, LastLayer: -1}); err != nil {
		t.Fatalf("extending a finished conversion: %v", err)
	}
	// A killed run's temporaries, recorded in its journal, are removed; a
	// file the journal does not cover is still refused.
	os.WriteFile(filepath.Join(dst, outdir.JournalName), []byte("manifest.json\n"), 0o644)
	tmp := filepath.Join(dst, ".manifest.json.tmp-42")
	os.WriteFile(tmp, []byte("torn"), 0o644)
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1}); err != nil {
		t.Fatalf("resuming: %v", err)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the recorded temporary is left: %v", err)
	}
	os.WriteFile(filepath.Join(dst, ".layer-00009.jnf.tmp-7"), nil, 0o644)
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1}); !errors.As(err, &fe) {
		t.Errorf("an unrecorded temporary: %v", err)
	}
}
