package iobench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tarfa-ai/tarfa/validation/benchrun"
)

const fixture = "../../validation/testdata/fixtures/qwen35moe-dev-e-long/checkpoint"

func TestRunOnFixture(t *testing.T) {
	drops := 0
	scratch := t.TempDir()
	var lastDone, lastTotal int64
	res, err := Run(context.Background(), fixture, scratch, Options{Workers: 2, Repeat: 3, Warm: true,
		DropCaches: func() error { drops++; return nil },
		Progress: func(done, total int64) {
			if done < lastDone {
				t.Errorf("progress went back from %d to %d", lastDone, done)
			}
			lastDone, lastTotal = done, total
		}})
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{"raw copy (shards → files, fsync, 2 workers)", ArmConvert, ArmConvertVerify, ArmRead, ArmVerify, ArmReadWarm, ArmVerifyWarm}
	if !slices.Equal(res.Order, wantOrder) || len(res.Figures) != len(wantOrder) {
		t.Fatalf("order %q, %d figures", res.Order, len(res.Figures))
	}
	// One probe, then one drop before every run of the five cold arms.
	if want := 1 + 3*5; drops != want || !res.CacheDropped || res.CacheError != "" {
		t.Errorf("%d cache drops, want %d; dropped %v %q", drops, want, res.CacheDropped, res.CacheError)
	}
	if lastDone <= 0 || lastTotal <= 0 {
		t.Errorf("progress %d of %d", lastDone, lastTotal)
	}
	wantCache := []string{CacheCold, CacheCold, CacheCold, CacheDirect, CacheCold, CacheWarm, CacheWarm}
	for i, f := range res.Figures {
		if f.Seconds.N != 3 || f.GBps.N != 3 || f.Bytes <= 0 || len(f.Rounds) != 3 || benchrun.Summarize(f.Rounds) != f.Seconds {
			t.Errorf("figure %+v", f)
		}
		if want := wantCache[i]; f.Cache != want && !(f.Name == ArmRead && f.Cache == CacheCold && strings.Contains(f.Note, "O_DIRECT refused")) {
			t.Errorf("%s: cache %q, want %q", f.Name, f.Cache, want)
		}
		if f.Baseline == "" {
			if f.Ratio != 0 {
				t.Errorf("baseline %s has ratio %g", f.Name, f.Ratio)
			}
			continue
		}
		base := res.Figure(f.Baseline)
		if base == nil {
			t.Fatalf("%s: no baseline %q", f.Name, f.Baseline)
		}
		// A figure and its baseline process the same bytes; the ratio is
		// the ratio of the medians of this run.
		if f.Bytes != base.Bytes || f.Ratio != f.GBps.Median/base.GBps.Median || f.PairRatio.N != 3 {
			t.Errorf("%s vs %s: bytes %d vs %d, ratio %g, medians %g / %g, pairs %+v", f.Name, base.Name, f.Bytes, base.Bytes, f.Ratio, f.GBps.Median, base.GBps.Median, f.PairRatio)
		}
	}
	shards, jnfFiles := res.Figures[0].Bytes, res.Figure(ArmRead).Bytes
	if jnfFiles < shards*9/10 || jnfFiles > shards*2 {
		t.Errorf("JNF directory %d bytes for %d shard bytes", jnfFiles, shards)
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("scratch directory not cleaned: %v", left)
	}
}

// The user's files in the scratch directory, even under the names the
// benchmark uses inside its own directory, are left alone.
func TestRunLeavesScratchAlone(t *testing.T) {
	scratch := t.TempDir()
	for _, d := range []string{"jnf", "rawcopy"} {
		if err := os.MkdirAll(filepath.Join(scratch, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, d, "keep"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Run(context.Background(), fixture, scratch, Options{Repeat: 1, DropCaches: func() error { return nil }}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"jnf", "rawcopy"} {
		if b, err := os.ReadFile(filepath.Join(scratch, d, "keep")); err != nil || string(b) != "mine" {
			t.Errorf("%s/keep: %q, %v", d, b, err)
		}
	}
	if left, _ := os.ReadDir(scratch); len(left) != 2 {
		t.Errorf("scratch holds %d entries, want the user's 2", len(left))
	}
	if _, err := Run(context.Background(), fixture, filepath.Join(scratch, "missing"), Options{Repeat: 1, DropCaches: func() error { return nil }}); err == nil || !strings.Contains(err.Error(), "scratch") {
		t.Errorf("missing scratch directory: %v", err)
	}
}

func TestRunCancelledCleansUp(t *testing.T) {
	scratch := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Run(ctx, fixture, scratch, Options{Repeat: 3, DropCaches: func() error { return nil },
		Progress: func(done, total int64) {
			if done > total/4 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("scratch not cleaned after the interrupt: %v", left)
	}
}

func TestRunWarmWhenCacheCannotBeDropped(t *testing.T) {
	res, err := Run(context.Background(), fixture, t.TempDir(), Options{Repeat: 2,
		DropCaches: func() error { return errors.New("permission denied") }})
	if err != nil {
		t.Fatal(err)
	}
	if res.CacheDropped || !strings.Contains(res.CacheError, "permission denied") {
		t.Errorf("dropped %v, %q", res.CacheDropped, res.CacheError)
	}
	if res.Figure(ArmRead) != nil || res.Figure(ArmVerifyWarm) == nil {
		t.Errorf("order %q: want the warm read pair instead of the cold one", res.Order)
	}
	for _, f := range res.Figures {
		if f.Cache != CacheWarm || !strings.Contains(f.Note, "permission denied") {
			t.Errorf("%s: cache %q note %q", f.Name, f.Cache, f.Note)
		}
	}
}

// The raw read reads every byte of files whose sizes are not multiples of
// the O_DIRECT alignment.
func TestReadOddSizes(t *testing.T) {
	dir := t.TempDir()
	var files []string
	var want int64
	for i, n := range []int{1, 4095, 4096, 4097, 8<<20 + 3, 17 << 20} {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		want += int64(n)
	}
	for _, direct := range []bool{false, true} {
		b := &bench{opt: Options{Workers: 2}}
		var progressed atomic.Int64
		n, err := b.read(context.Background(), files, direct, func(k int64) { progressed.Add(k) })
		if err != nil || n != want || progressed.Load() != want {
			t.Errorf("direct %v: read %d bytes (progress %d), want %d: %v", direct, n, progressed.Load(), want, err)
		}
		if direct && b.directErr != nil {
			t.Logf("O_DIRECT refused here, fell back to buffered reads: %v", b.directErr)
		}
	}
	b := &bench{opt: Options{Workers: 1}}
	if _, err := b.read(context.Background(), []string{filepath.Join(dir, "none")}, true, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// DropCaches either works (root on Linux, /proc/sys writable) or says why
// not, wrapping the system's error.
func TestDropCaches(t *testing.T) {
	err := DropCaches()
	if err == nil {
		return
	}
	var pe *os.PathError
	if benchrun.ThisHost().GOOS == "linux" && !errors.As(err, &pe) {
		t.Errorf("error does not wrap the system's: %v", err)
	}
	if !strings.Contains(err.Error(), "page cache") {
		t.Errorf("error does not say what failed: %v", err)
	}
}

// The copy and the read loops notice a cancelled context between chunks,
// not at the end of the file.
func TestCopyAndReadStopWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	const size = 64 << 20
	if err := os.WriteFile(src, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	buf := make([]byte, 8<<20)
	n, err := copyFile(ctx, src, filepath.Join(dir, "dst"), buf, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) || n != int64(len(buf)) {
		t.Errorf("copy: %d bytes, %v; want one chunk and context.Canceled", n, err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel = context.WithCancel(context.Background())
	n, err = readAll(ctx, f, buf, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) || n != int64(len(buf)) {
		t.Errorf("read: %d bytes, %v; want one chunk and context.Canceled", n, err)
	}
}
