package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

const devA = fixtures + "qwen3moe-dev-a/checkpoint"

func wantErr(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want an error containing %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not contain %q", what, err, w)
		}
	}
}

// copySource copies a fixture checkpoint so that a test can change it.
func copySource(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ckpt")
	os.MkdirAll(dst, 0o755)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// A conversion never writes into its source, nor reads its own output.
func TestConvertRefusesOverlappingDirectories(t *testing.T) {
	src := copySource(t, devA)
	before := listing(t, src)
	parent := filepath.Dir(src)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(src, link)
	for _, c := range []struct{ src, dst, want string }{
		{src, src, "is the source checkpoint"},
		{src, src + "/", "is the source checkpoint"},
		{src, link, "is the source checkpoint"},
		{src, filepath.Join(src, "jnf"), "is inside the source checkpoint"},
		{src, filepath.Join(link, "a", "b"), "is inside the source checkpoint"},
		{src, parent, "is inside the output directory"},
		{link, parent, "is inside the output directory"},
	} {
		_, err := Convert(context.Background(), c.src, c.dst, Options{LastLayer: -1})
		wantErr(t, c.src+" → "+c.dst, err, c.want)
	}
	if after := listing(t, src); after != before {
		t.Errorf("the source changed: %s, was %s", after, before)
	}
	// A sibling whose name shares the prefix is no overlap.
	if _, err := Convert(context.Background(), src, src+"-jnf", Options{LastLayer: -1}); err != nil {
		t.Errorf("sibling %s-jnf: %v", src, err)
	}
}

func TestConvertWorkersRange(t *testing.T) {
	for _, w := range []int{-3, -1, MaxWorkers + 1, 100000} {
		_, err := Convert(context.Background(), devA, filepath.Join(t.TempDir(), "m"), Options{LastLayer: -1, Workers: w})
		wantErr(t, "workers", err, "want 1 to 64")
	}
}

// A symbolic link in the source is refused by default, with the file and
// its target named; nothing is written. FollowSymlinks reads a link that
// stays inside the source, and what is hashed is its target's content.
func TestConvertSymlinksInSource(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(secret, []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	src := copySource(t, devA)
	link := filepath.Join(src, "tokenizer.json")
	os.Symlink(secret, link)
	for _, follow := range []bool{false, true} {
		dst := filepath.Join(t.TempDir(), "m")
		_, err := Convert(context.Background(), src, dst, Options{LastLayer: -1, FollowSymlinks: follow})
		wantErr(t, "tokenizer.json → a file outside", err, link+" is a symbolic link to "+secret, "refusing to read a file from outside the checkpoint")
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("follow=%v: output directory created for a refused source: %v", follow, err)
		}
	}
	os.Remove(link)
	os.WriteFile(filepath.Join(src, "tok-real.json"), []byte(`{"model":{}}`), 0o644)
	os.Symlink("tok-real.json", link)
	_, err := Convert(context.Background(), src, filepath.Join(t.TempDir(), "m"), Options{LastLayer: -1})
	wantErr(t, "link inside, not following", err, "refusing to follow it without --follow-symlinks")
	dst := filepath.Join(t.TempDir(), "m")
	res, err := Convert(context.Background(), src, dst, Options{LastLayer: -1, FollowSymlinks: true, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "tokenizer.json")); string(b) != `{"model":{}}` {
		t.Errorf("copied tokenizer.json = %q", b)
	}
	if st, _ := os.Lstat(filepath.Join(dst, "tokenizer.json")); !st.Mode().IsRegular() {
		t.Errorf("the output holds a link: %v", st.Mode())
	}
	for _, e := range res.Manifest.Entries {
		if e.Name == "tokenizer.json" && e.SHA256 != jnf.SHA256Bytes([]byte(`{"model":{}}`)).Hex() {
			t.Errorf("tokenizer.json entry %s", e.SHA256)
		}
	}
}

// A hub cache snapshot (links into ../../blobs) converts with
// FollowSymlinks to the same root as the plain checkpoint.
func TestConvertHubCacheSnapshot(t *testing.T) {
	_, plain := convert(t, devA, Options{LastLayer: 0})
	repo := filepath.Join(t.TempDir(), "models--tarfa--dev-a")
	snap := filepath.Join(repo, "snapshots", "0123456789abcdef0123456789abcdef01234567")
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	os.MkdirAll(snap, 0o755)
	ents, _ := os.ReadDir(devA)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(devA, e.Name()))
		sum := jnf.SHA256Bytes(b).Hex()
		os.WriteFile(filepath.Join(repo, "blobs", sum), b, 0o644)
		os.Symlink("../../blobs/"+sum, filepath.Join(snap, e.Name()))
	}
	_, err := Convert(context.Background(), snap, filepath.Join(t.TempDir(), "m"), Options{LastLayer: -1})
	wantErr(t, "hub snapshot without FollowSymlinks", err, "Hugging Face hub cache snapshot")
	res, err := Convert(context.Background(), snap, filepath.Join(t.TempDir(), "m"), Options{LastLayer: -1, FollowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Root != plain.Manifest.Root {
		t.Errorf("hub snapshot root %s, plain checkpoint %s", res.Manifest.Root, plain.Manifest.Root)
	}
}

// The lock on the output directory: a second conversion waits for the first
// (told the holder's pid), or with NoWait is refused at once.
func TestConvertWaitsForTheLock(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "m")
	os.MkdirAll(dst, 0o755)
	l, err := flock.TryAcquire(filepath.Join(dst, flock.Name))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Convert(context.Background(), devA, dst, Options{LastLayer: -1, NoWait: true})
	var held *flock.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Fatalf("NoWait while the lock is held: %v", err)
	}
	if got := listing(t, dst); got != flock.Name {
		t.Errorf("a refused conversion wrote %s", got)
	}
	waiting := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, Waiting: func(pid int) { waiting <- pid }})
		done <- err
	}()
	select {
	case pid := <-waiting:
		if pid != os.Getpid() {
			t.Errorf("waiting for pid %d, want %d", pid, os.Getpid())
		}
	case err := <-done:
		t.Fatalf("conversion did not wait for the lock: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("conversion finished while the lock was held: %v", err)
	case <-time.After(3 * flock.PollInterval):
	}
	l.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dst, ".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Two conversions into one directory at once: the second waits, then keeps
// every file the first wrote after re-verifying it. (Without the lock they
// shared partial files and one died renaming a partial the other had
// renamed, leaving a stale journal.)
func TestConcurrentConversionsIntoOneDirectory(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "m")
	var wg sync.WaitGroup
	results := make([]*Result, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Convert(context.Background(), devA, dst, Options{LastLayer: -1, Workers: 2})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("conversion %d: %v", i, err)
		}
	}
	a, b := results[0], results[1]
	if len(a.Written) > 0 == (len(b.Written) > 0) || len(a.Written)+len(b.Written) != 5 || a.Manifest.Root != b.Manifest.Root {
		t.Errorf("written %v and %v, resumed %v and %v", a.Written, b.Written, a.Resumed, b.Resumed)
	}
	if rep := check(t, dst); !rep.OK() {
		t.Errorf("result does not verify: %v", rep.Problems)
	}
	if left, _ := filepath.Glob(filepath.Join(dst, ".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// The free-space check runs before anything is written and asks for
// exactly the files still to write (their planned sizes) plus 2 KiB per
// record for the manifest.
func TestConvertChecksFreeSpace(t *testing.T) {
	clean, _ := convert(t, devA, Options{LastLayer: 0})
	var files, records int64
	for _, f := range []string{"global.jnf", "layer-00000.jnf", "layer-00001.jnf", "layer-00002.jnf", "layer-00003.jnf"} {
		st, _ := os.Stat(filepath.Join(clean, f))
		files += st.Size()
		records += int64(len(fileRecords(t, clean, f)))
	}
	need := uint64(files + 2048*records)
	dst := filepath.Join(t.TempDir(), "m")
	var asked string
	_, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, freeSpace: func(dir string) (uint64, bool, error) {
		asked = dir
		return need - 1, true, nil
	}})
	var se *SpaceError
	if !errors.As(err, &se) || se.Need != need || se.Free != need-1 || se.Files != 5 || asked != dst {
		t.Fatalf("one byte short: %v (%+v), want a SpaceError needing %d bytes", err, se, need)
	}
	wantErr(t, "one byte short", err, dst+": ", "free on its file system", "convert part of the model with --layers")
	if got := listing(t, dst); got != "" {
		t.Errorf("wrote %s with too little space", got)
	}
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, freeSpace: func(string) (uint64, bool, error) { return need, true, nil }}); err != nil {
		t.Fatalf("exactly enough space: %v", err)
	}
	// Nothing left to write: no space needed.
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, freeSpace: func(string) (uint64, bool, error) { return 0, true, nil }}); err != nil {
		t.Fatalf("nothing to write: %v", err)
	}
}

// Progress counts all the work in one total: the whole-shard hashing, the
// record copies, and with Verify the comparison and the re-hash, ending at
// done = total.
func TestProgressCountsHashingAndVerify(t *testing.T) {
	clean, _ := convert(t, devA, Options{LastLayer: 0})
	files := []string{"global.jnf", "layer-00000.jnf", "layer-00001.jnf", "layer-00002.jnf", "layer-00003.jnf"}
	records := sumLengths(layerRecords(t, clean))
	shards := hashedBy(t, clean, files...)
	var mu sync.Mutex
	var last, total int64
	progress := func(done, tot int64) {
		mu.Lock()
		defer mu.Unlock()
		if done > tot || done < last {
			t.Errorf("progress %d of %d after %d", done, tot, last)
		}
		last, total = done, tot
	}
	dst := filepath.Join(t.TempDir(), "m")
	if _, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, Workers: 1, Verify: true, Progress: progress}); err != nil {
		t.Fatal(err)
	}
	if want := shards + 3*records; last != want || total != want {
		t.Errorf("progress ended at %d of %d, want %d (shards %d + records %d copied, compared and re-hashed)", last, total, want, shards, records)
	}
	// A resumed conversion re-verifies every record and hashes no shard.
	last, total = 0, 0
	res, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, Verify: true, Progress: progress})
	if err != nil || res.ShardsHashed != 0 || last != records || total != records {
		t.Errorf("resume: %v, %d shards hashed, progress %d of %d, want %d", err, res.ShardsHashed, last, total, records)
	}
}

// withHugeIgnoredTensor adds a 4 GiB mtp.* tensor (ignored, never copied,
// but inside a shard that is hashed whole) to the shard of
// model.embed_tokens.weight, as a sparse file.
func withHugeIgnoredTensor(t *testing.T, src string) (dir string, size int64) {
	t.Helper()
	dir = copySource(t, src)
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	var idx map[string]any
	b, _ := os.ReadFile(idxPath)
	json.Unmarshal(b, &idx)
	wm := idx["weight_map"].(map[string]any)
	shard := wm["model.embed_tokens.weight"].(string)
	p := filepath.Join(dir, shard)
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	var specs []safetensors.Spec
	data := map[string][]byte{}
	for _, tt := range f.Tensors {
		specs = append(specs, safetensors.Spec{Name: tt.Name, DType: tt.DType, Shape: tt.Shape})
		_, data[tt.Name], _ = f.ReadTensor(tt.Name)
	}
	f.Close()
	const huge = 2 << 30 // elements: 4 GiB of BF16
	specs = append(specs, safetensors.Spec{Name: "mtp.huge", DType: jnf.BF16, Shape: []int64{huge}})
	hdr, sorted, err := safetensors.EncodeHeader(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), hdr...)
	for _, s := range sorted {
		out = append(out, data[s.Name]...)
	}
	if sorted[len(sorted)-1].Name != "mtp.huge" {
		t.Fatalf("mtp.huge is not the last tensor: %v", sorted)
	}
	size = int64(len(out)) + 2*huge
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	wm["mtp.huge"] = shard
	b, _ = json.Marshal(idx)
	os.WriteFile(idxPath, b, 0o644)
	return dir, size
}

// Ctrl-C during the whole-shard hashing of a large shard stops the
// conversion within a second, with the context's error (the CLI then says
// how to resume).
func TestCancelStopsShardHashingPromptly(t *testing.T) {
	src, size := withHugeIgnoredTensor(t, devA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var cancelled time.Time
	_, err := Convert(ctx, src, filepath.Join(t.TempDir(), "m"), Options{LastLayer: -1, Workers: 1, Progress: func(done, total int64) {
		if done > 64<<20 { // well inside the 4 GiB shard
			once.Do(func() { cancelled = time.Now(); cancel() })
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled conversion: %v", err)
	}
	if cancelled.IsZero() {
		t.Fatalf("no progress during the hashing of a %d-byte shard", size)
	}
	if d := time.Since(cancelled); d > time.Second {
		t.Errorf("conversion returned %v after the cancel", d)
	}
}

// convert --verify compares every byte of every record of every file with
// the source: a differing byte in a middle record or the very last byte of
// the last record of the last file is found by the comparison itself. The
// partial file is made to differ from the source with its journal agreeing
// (so the table digests, which a later check would catch, agree too).
func TestVerifyFindsADifferenceInAnyRecord(t *testing.T) {
	clean, _ := convert(t, devA, Options{LastLayer: 0, Workers: 1})
	const last = "layer-00003.jnf"
	recs := fileRecords(t, clean, last)
	for _, c := range []struct {
		name string
		rec  int
		off  func(r jnf.Record) int64
	}{
		{"middle record, first byte", len(recs) / 2, func(r jnf.Record) int64 { return r.Offset }},
		{"last record, last byte", len(recs) - 1, func(r jnf.Record) int64 { return r.Offset + r.Length - 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "m")
			// Interrupt once every record of the last file is written and
			// journaled: in its comparison with the source.
			path := filepath.Join(dst, last)
			ctx, cancel := context.WithCancel(context.Background())
			_, err := Convert(ctx, devA, dst, Options{LastLayer: -1, Workers: 1, Verify: true, Progress: func(done, total int64) {
				if j, err := os.ReadFile(journalName(path)); err == nil && bytes.Count(j, []byte("\n")) == len(recs)+1 {
					cancel()
				}
			}})
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted conversion: %v", err)
			}
			r := recs[c.rec]
			off := c.off(r)
			flipByte(t, jnf.PartialName(path), off)
			data, _ := os.ReadFile(jnf.PartialName(path))
			d := jnf.SumBytes(data[r.Offset : r.Offset+r.Length])
			j, _ := os.ReadFile(journalName(path))
			if bytes.Count(j, []byte("\n")) != len(recs)+1 {
				t.Fatalf("journal has %d lines, want all %d records", bytes.Count(j, []byte("\n"))-1, len(recs))
			}
			j = bytes.Replace(j, []byte(r.SHA256), []byte(d.SHA256.Hex()), 1)
			j = bytes.Replace(j, []byte(r.BLAKE3), []byte(d.BLAKE3.Hex()), 1)
			os.WriteFile(journalName(path), j, 0o644)

			var logBuf bytes.Buffer
			res, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, Workers: 1, Verify: true,
				Log: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			wantErr(t, "resume with --verify", err, last+": record "+r.Name+": byte at offset "+itoa(off)+" is ")
			if !errors.Is(err, jnf.ErrVerification) {
				t.Errorf("a byte that differs from the source does not match jnf.ErrVerification: %v", err)
			}
			if res != nil {
				t.Errorf("result %+v", res)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A journal larger than any journal of its plan is discarded (the file is
// written afresh), not read whole.
func TestOversizedJournalIsDiscarded(t *testing.T) {
	clean, ref := convert(t, devA, Options{LastLayer: 0, Workers: 1})
	dst := filepath.Join(t.TempDir(), "m")
	layer1 := fileRecords(t, clean, "layer-00001.jnf")
	interrupt(t, devA, dst, hashedBy(t, clean, "global.jnf", "layer-00000.jnf", "layer-00001.jnf")+
		sumLengths(fileRecords(t, clean, "global.jnf"))+sumLengths(fileRecords(t, clean, "layer-00000.jnf"))+sumLengths(layer1[:len(layer1)/2]))
	jp := journalName(filepath.Join(dst, "layer-00001.jnf"))
	if err := os.Truncate(jp, maxJournalSize(len(layer1))+1); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	res, err := Convert(context.Background(), devA, dst, Options{LastLayer: -1, Log: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if res.SalvagedRecords != 0 || res.Manifest.Root != ref.Manifest.Root || !strings.Contains(logBuf.String(), "journal is larger than any journal of its plan") {
		t.Errorf("salvaged %d records, root %s (want %s), log %s", res.SalvagedRecords, res.Manifest.Root, ref.Manifest.Root, logBuf.String())
	}
}

// The auxiliary files copied are the bytes hf.Open checked: config.json is
// the parsed bytes, not a second read.
func TestConfigCopiedIsTheParsedConfig(t *testing.T) {
	ck, err := hf.Open(devA)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	b, _ := os.ReadFile(filepath.Join(devA, "config.json"))
	got, err := ck.ReadAux("config.json")
	if err != nil || !bytes.Equal(got, b) || &got[0] != &ck.ConfigBytes[0] {
		t.Errorf("ReadAux(config.json) is not the parsed bytes: %v", err)
	}
}
