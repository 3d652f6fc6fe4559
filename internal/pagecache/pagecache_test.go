//go:build linux

package pagecache

import (
	"os"
	"path/filepath"
	"testing"
)

// A file just written is resident; an offset off the page grid, or an
// empty or negative range, is refused rather than rounded.
func TestResidentBounds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 4*pageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if !Resident(fd, 0, 4*pageSize) {
		t.Skip("a file just written is not reported resident here")
	}
	for _, c := range []struct {
		off int64
		n   int
	}{{1, pageSize}, {int64(pageSize) / 2, pageSize}, {0, 0}, {-int64(pageSize), pageSize}} {
		if Resident(fd, c.off, c.n) {
			t.Errorf("Resident(off %d, n %d) = true, want false", c.off, c.n)
		}
	}
}
