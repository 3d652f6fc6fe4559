//go:build linux

package pagecache

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// zeroFile writes n zero bytes to a file and opens it for reading and
// writing (closed with the test): the file and its descriptor.
func zeroFile(t *testing.T, n int) (*os.File, int) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, int(f.Fd())
}

// A file just written is resident; an offset off the page grid, or an
// empty or negative range, is refused rather than rounded.
func TestResidentBounds(t *testing.T) {
	_, fd := zeroFile(t, 4*pageSize)
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

// A Map gives Resident's answers for every range of the file, and refuses
// what Resident refuses and what lies past the file's size when mapped.
func TestMapAgreesWithResident(t *testing.T) {
	f, fd := zeroFile(t, 8*pageSize)
	if !Resident(fd, 0, 8*pageSize) {
		t.Skip("a file just written is not reported resident here")
	}
	m, err := NewMap(fd, 8*int64(pageSize))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		off  int64
		n    int
		want bool
	}{
		{0, 8 * pageSize, true}, {int64(pageSize), 3*pageSize + 1, true}, {7 * int64(pageSize), pageSize, true},
		{1, pageSize, false}, {0, 0, false}, {-int64(pageSize), pageSize, false},
		{7 * int64(pageSize), pageSize + 1, false}, {8 * int64(pageSize), pageSize, false},
	} {
		if got := m.Resident(c.off, c.n); got != c.want {
			t.Errorf("Map.Resident(off %d, n %d) = %v, want %v", c.off, c.n, got, c.want)
		}
	}
	// Pages dropped from the page cache are reported gone, as Resident
	// reports them.
	if err := f.Sync(); err != nil { // dirty pages are not dropped
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if Resident(fd, 0, 8*pageSize) {
		t.Skip("FADV_DONTNEED kept the pages here")
	}
	if m.Resident(0, 8*pageSize) {
		t.Error("Map.Resident = true after the pages were dropped, Resident says false")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Resident(0, pageSize) {
		t.Error("a closed Map answered yes")
	}
}

// The cost of one question about a routed expert of Qwen3.5-122B-A10B
// (18.9 MB, every page resident): Resident maps and unmaps the range, a Map
// asks mincore alone.
func BenchmarkResidentExpert(b *testing.B) {
	const n = 3 * 3072 * 1024 * 2
	p := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	m, err := NewMap(fd, n)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.Run("Resident", func(b *testing.B) {
		for b.Loop() {
			if !Resident(fd, 0, n) {
				b.Fatal("not resident")
			}
		}
	})
	b.Run("Map", func(b *testing.B) {
		for b.Loop() {
			if !m.Resident(0, n) {
				b.Fatal("not resident")
			}
		}
	})
	b.Run("Likely", func(b *testing.B) {
		for b.Loop() {
			if !m.Likely(0, n) {
				b.Fatal("not resident")
			}
		}
	})
}

// Likely asks about the first, middle and last pages of a range: it says
// no when any of them is gone, yes when only others are, and refuses what
// Resident refuses. The range is 9 chunks of 2 MiB, dropped one at a
// time (a page cache of large folios drops no less than a folio).
func TestLikelySamplesThreePages(t *testing.T) {
	const chunks, chunk = 9, 2 << 20
	n := chunks * chunk
	f, fd := zeroFile(t, n)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := NewMap(fd, int64(n))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := make([]byte, n)
	// drop drops chunk i alone (-1: none) after every page is read back in.
	drop := func(i int) {
		t.Helper()
		if _, err := f.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		if i >= 0 {
			if err := unix.Fadvise(fd, int64(i*chunk), chunk, unix.FADV_DONTNEED); err != nil {
				t.Fatal(err)
			}
		}
	}
	drop(-1)
	if !m.Resident(0, n) || !m.Likely(0, n) {
		t.Skip("pages read back are not reported resident here")
	}
	for i := range chunks {
		drop(i)
		if Resident(fd, int64(i*chunk), chunk) {
			t.Skip("FADV_DONTNEED kept the chunk here")
		}
		// The sampled pages: the first (chunk 0), the middle (chunk 4:
		// page n/2/pageSize) and the last (chunk 8).
		want := i == 0 || i == chunks/2 || i == chunks-1
		if got := !m.Likely(0, n); got != want {
			t.Errorf("chunk %d of %d dropped: Likely = %v, want %v (it samples the first, middle and last pages)", i, chunks, !got, !want)
		}
		if m.Resident(0, n) {
			t.Errorf("chunk %d dropped: Resident says every page is there", i)
		}
	}
	for _, c := range []struct {
		off int64
		n   int
	}{{1, pageSize}, {0, 0}, {-int64(pageSize), pageSize}, {int64(pageSize), n}} {
		if m.Likely(c.off, c.n) {
			t.Errorf("Likely(off %d, n %d) = true, want false", c.off, c.n)
		}
	}
	// A range of less than a page asks about its one page.
	drop(-1)
	if !m.Likely(int64(2*pageSize), 100) {
		t.Error("Likely of 100 bytes of a resident page = false")
	}
}
