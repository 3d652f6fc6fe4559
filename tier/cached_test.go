//go:build linux

package tier

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/internal/pagecache"
	"github.com/tarfa-ai/tarfa/jnf"
)

// dropPages asks the kernel to drop path's clean pages from the page cache.
func dropPages(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// droppedFile writes 1 MiB of patterned bytes to a file, opens it with a
// page-cache Map of all of it and drops its pages from the page cache:
// the file, its descriptor, the Map (closed with the test) and the bytes.
func droppedFile(t *testing.T) (*os.File, int, *pagecache.Map, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := pagecache.NewMap(int(f.Fd()), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	dropPages(t, p)
	return f, int(f.Fd()), m, data
}

// readCached copies a range only when every page of it is in the page
// cache, and reports a miss otherwise without reading from the device.
func TestReadCached(t *testing.T) {
	f, fd, m, data := droppedFile(t)
	buf := make([]byte, 64<<10)
	if readCached(m, fd, buf, 128<<10, false) {
		t.Skip("the kernel reports dropped pages as cached (fadvise DONTNEED ignored here)")
	}
	if _, err := f.ReadAt(buf, 128<<10); err != nil { // brings the range into the cache
		t.Fatal(err)
	}
	clear(buf)
	if !readCached(m, fd, buf, 128<<10, false) || string(buf) != string(data[128<<10:192<<10]) {
		t.Fatal("a range just read is not served from the page cache, or not its bytes")
	}
	if readCached(m, fd, make([]byte, 64<<10), 512<<10, false) {
		t.Error("a range never read since the drop was served as cached")
	}
	// Asking started no read: the range is still not cached a while later
	// (a probe with RWF_NOWAIT starts read-ahead here, and a cold run then
	// reads every expert twice: once by it, once with O_DIRECT).
	time.Sleep(200 * time.Millisecond)
	if pagecache.Resident(fd, 512<<10, 64<<10) {
		t.Error("the probe of an uncached range brought it into the page cache")
	}
}

// With DirectAuto a model whose files are in the page cache is read from
// there (a repeat run's case), one that is not with O_DIRECT, and the
// logits are the same either way.
func TestDirectAutoReadsThePageCache(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	ref, _ := engine.Load(ck, engine.Options{})
	want, _ := run(t, ref, prompts[0], 6)
	layers, _ := filepath.Glob(filepath.Join(dir, "layer-*.jnf"))
	for _, cold := range []bool{false, true} {
		if !cold {
			inPageCache(t, dir)
		}
		st := residentRun(t, !cold, dir, func() Stats {
			h, err := New(ck, Options{StagingBudget: 4 * size, Direct: DirectAuto})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, _ := engine.Load(ck, engine.Options{Experts: h})
			if cold { // after the load, whose buffered reads of the dense tensors read ahead
				for _, l := range layers {
					dropPages(t, l)
				}
			}
			got, err := run(t, m, prompts[0], 6)
			if err != nil || !same(got, want) {
				t.Fatalf("cold %v: %v, identical %v", cold, err, same(got, want))
			}
			return h.Stats()
		})
		t.Logf("cold %v: %d cached, %d direct, %d buffered reads", cold, st.CachedReads, st.DirectReads, st.Buffered)
		if st.DirectReads == 0 && st.CachedReads == 0 {
			t.Skip("no O_DIRECT here (the file system refused it): every read buffered")
		}
		switch {
		case !cold && (st.CachedReads == 0 || st.DirectReads != 0):
			t.Errorf("files in the page cache: %d cached and %d direct reads, want all cached", st.CachedReads, st.DirectReads)
		case cold && st.DirectReads <= st.CachedReads:
			t.Errorf("files dropped from the page cache: %d O_DIRECT reads, %d cached", st.DirectReads, st.CachedReads)
		}
	}
}

// The page cache is asked only about the RAM tier's misses: a repeat of a
// prompt whose experts the RAM tier holds asks it nothing (each question
// is a system call, and a step asks for every expert it routes to).
func TestPageCacheAskedOnlyOnMisses(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	layers, _ := filepath.Glob(filepath.Join(dir, "layer-*.jnf"))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 1 << 30, StagingBudget: 4 * size, Direct: DirectAuto, PageCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	for _, l := range layers { // cold: the misses are read and admitted
		dropPages(t, l)
	}
	want, err := run(t, m, prompts[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	if st.DirectReads == 0 {
		t.Skip("no O_DIRECT here (the file system refused it): no page-cache questions")
	}
	first := h.files.asked.Load()
	if first == 0 || st.Misses == 0 {
		t.Fatalf("cold run: %d questions, %d misses; want both > 0", first, st.Misses)
	}
	got, err := run(t, m, prompts[0], 4)
	if err != nil || !same(got, want) {
		t.Fatalf("repeat: %v, identical %v", err, same(got, want))
	}
	if st2 := h.Stats(); st2.Misses != st.Misses {
		t.Fatalf("repeat: %d misses after %d; want the RAM tier to hold every expert", st2.Misses, st.Misses)
	}
	if n := h.files.asked.Load() - first; n != 0 {
		t.Errorf("repeat with every expert in the RAM tier asked the page cache %d times, want 0", n)
	}
}

// A RAM-tier miss that the page cache holds is asked about once: the read
// that copies it from there is told the answer.
func TestPageCacheAskedOncePerUse(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	inPageCache(t, dir)
	var asked int64
	st := residentRun(t, true, dir, func() Stats {
		h, err := New(ck, Options{RAMBudget: 1 << 30, StagingBudget: 4 * size, Direct: DirectAuto, PageCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		m, _ := engine.Load(ck, engine.Options{Experts: h})
		if _, err := run(t, m, prompts[0], 4); err != nil {
			t.Fatal(err)
		}
		asked = h.files.asked.Load()
		return h.Stats()
	})
	if st.PageCacheUses == 0 {
		t.Skip("no O_DIRECT here (the file system refused it): the page cache is no level")
	}
	if st.CachedReads != st.PageCacheUses || st.Misses != 0 {
		t.Fatalf("%d page-cache uses, %d cached reads, %d misses; want every use a cached read", st.PageCacheUses, st.CachedReads, st.Misses)
	}
	if asked != st.PageCacheUses {
		t.Errorf("%d page-cache uses asked the page cache %d times, want once each", st.PageCacheUses, asked)
	}
}

// A hinted expert the page cache holds is not read ahead with PageCache
// (its step copies it from there, so a read ahead hides no storage wait
// and costs a RAM-tier buffer and a copy and a hash while a step runs: the
// repeat run on the H200, BENCHMARKS.md "Repeat runs and prefetch"); the
// same model storage-cold is read ahead as before, and the logits are the
// engine's either way.
func TestReadAheadLeavesThePageCacheToTheStep(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	layers, _ := filepath.Glob(filepath.Join(dir, "layer-*.jnf"))
	ref, _ := engine.Load(ck, engine.Options{})
	const tokens = 24
	want, _ := run(t, ref, prompts[0], tokens)
	for _, cold := range []bool{false, true} {
		if !cold {
			inPageCache(t, dir)
		}
		st := residentRun(t, !cold, dir, func() Stats {
			h, err := New(ck, Options{RAMBudget: 8 * size, StagingBudget: 4 * size, Readers: 2, Direct: DirectAuto, PageCache: true, Prefetch: true})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, _ := engine.Load(ck, engine.Options{Experts: h})
			if cold {
				for _, l := range layers {
					dropPages(t, l)
				}
			}
			got, err := run(t, m, prompts[0], tokens)
			if err != nil || !same(got, want) {
				t.Fatalf("cold %v: %v, identical %v", cold, err, same(got, want))
			}
			h.Settle()
			return h.Stats()
		})
		t.Logf("cold %v: %d direct, %d cached reads; prefetch issued %d, cached %d, skipped %d, backed off %d; hints %d of %d true",
			cold, st.DirectReads, st.CachedReads, st.PrefetchIssued, st.PrefetchCached, st.PrefetchSkipped, st.PrefetchBackedOff, st.HintsTrue, st.HintsScored)
		if st.DirectReads == 0 && st.CachedReads == 0 {
			t.Skip("no O_DIRECT here (the file system refused it): the page cache is no level")
		}
		switch {
		case !cold && (st.PrefetchIssued != 0 || st.PrefetchCached == 0):
			t.Errorf("files in the page cache: %d reads ahead, %d hinted experts left to the page cache; want none read ahead", st.PrefetchIssued, st.PrefetchCached)
		case cold && (st.PrefetchCached != 0 || st.PrefetchIssued == 0):
			t.Errorf("files dropped from the page cache: %d hinted experts taken for cached, %d reads ahead; want reads ahead and none cached", st.PrefetchCached, st.PrefetchIssued)
		}
	}
}

// The page cache's answer chooses only the path (inPageCache asks about
// three pages): a read told yes of a range the page cache no longer holds
// is a buffered read of it from storage, with its bytes.
func TestReadCachedToldYesOfDroppedPages(t *testing.T) {
	_, fd, m, data := droppedFile(t)
	if pagecache.Resident(fd, 256<<10, 128<<10) {
		t.Skip("the kernel reports dropped pages as cached (fadvise DONTNEED ignored here)")
	}
	buf := make([]byte, 128<<10)
	if !readCached(m, fd, buf, 256<<10, true) || string(buf) != string(data[256<<10:384<<10]) {
		t.Fatal("a read told the range is cached, of pages dropped since, did not read its bytes")
	}
}
