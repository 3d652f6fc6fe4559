package iobench

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dropCaches writes "3" to the control file, and says what failed, wrapping
// the system's error, when it cannot.
func TestDropCachesWritesThree(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "drop_caches")
	if err := os.WriteFile(ctl, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := dropCaches(ctl); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(ctl); string(b) != "3\n" {
		t.Errorf("wrote %q, want \"3\\n\"", b)
	}
	err := dropCaches(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "dropping the page cache") {
		t.Errorf("missing control file: %v", err)
	}
}
