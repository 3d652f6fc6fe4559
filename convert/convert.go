// Package convert turns a Hugging Face checkpoint into a JNF directory:
// streaming (bounded memory), parallel over files, atomic per file (temp +
// rename), resumable per record (finished files and the finished records of
// interrupted ones are re-verified, not trusted; see journal.go) and
// deterministic (same input → byte-identical output and the same root).
package convert

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/internal/outdir"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
	"github.com/tarfa-ai/tarfa/verify"
)

// MaxWorkers bounds Options.Workers: files are converted in parallel to
// keep a disk busy, and more than this many concurrent files only thrash it
// (each worker also holds a 4 MiB copy buffer and open files).
const MaxWorkers = 64

// Options controls a conversion.
type Options struct {
	// FirstLayer, LastLayer select an inclusive layer range; LastLayer < 0
	// means through the last layer. The global tensors are always converted.
	FirstLayer, LastLayer int
	Workers               int  // files converted in parallel, 1 to MaxWorkers (0: 2)
	Verify                bool // re-read every written byte and compare it with the source
	// FollowSymlinks reads symbolic links in the source whose resolved
	// target stays inside it (hf.Options.FollowSymlinks). Without it a link
	// is an error: whatever it points to would be hashed into the root and
	// published with the model.
	FollowSymlinks bool
	// Shards, if set, gives the content of the source's safetensors
	// shards in place of its files (hf.Options.Shards): a synthetic
	// checkpoint converted without being written out.
	Shards func(name string) (safetensors.ReaderAtCloser, int64, error)
	// NoWait makes Convert fail at once, with a *flock.HeldError, when
	// another conversion is writing the output directory; by default it
	// waits for that one to finish.
	NoWait bool
	// Force converts into a directory that holds files no conversion into
	// it wrote (see internal/outdir): they are left alone, except those
	// at the names conversion writes, which are replaced. Without it such
	// a directory is refused, naming the file.
	Force bool
	// Waiting, if set, is called when Convert starts to wait for another
	// conversion into the output directory, with its process id (0 if
	// unknown).
	Waiting func(pid int)
	// Progress, if set, is called with bytes done and total (from several
	// goroutines). The work counted is every byte read: source shards
	// hashed whole, records copied (or re-hashed, for files kept from an
	// earlier run), and with Verify the records compared with the source
	// and re-hashed. total can grow when a file kept from an earlier run
	// fails its re-verification.
	Progress func(done, total int64)
	Log      *slog.Logger

	// freeSpace reports the bytes available to an unprivileged writer on
	// dir's file system (tests replace it).
	freeSpace func(dir string) (uint64, bool, error)
}

// Result summarises a conversion.
type Result struct {
	Manifest *verify.Manifest
	Written  []string // files written in this run
	Resumed  []string // files already present, re-verified and kept
	Bytes    int64    // record bytes copied from the source in this run
	// Salvaged counts the record bytes (SalvagedRecords the records) of
	// files interrupted in an earlier run that this run kept after
	// re-hashing them against the interrupted run's journal.
	Salvaged        int64
	SalvagedRecords int
	Verified        int64 // bytes compared with the source (Verify)
	// ShardsHashed counts source shards read for their whole-file SHA-256
	// in this run (only shards that files written in this run draw from).
	ShardsHashed int
}

type unit struct {
	layer   int
	file    string
	tensors []hf.TensorRef
	experts []hf.ExpertRef
}

func (u *unit) records() []jnf.Record {
	var recs []jnf.Record
	for _, t := range u.tensors {
		recs = append(recs, jnf.Record{Kind: jnf.KindTensor, Name: t.Name, Layer: u.layer, Expert: -1, DType: t.DType, Shape: t.Shape,
			Length: t.Source.Length, Source: []jnf.SourceRange{jnf.SourceRange(t.Source)}})
	}
	for _, e := range u.experts {
		r := jnf.Record{Kind: jnf.KindExpert, Name: e.Name(), Layer: e.Layer, Expert: e.Expert}
		off := int64(0)
		for _, p := range e.Parts {
			r.Parts = append(r.Parts, jnf.Part{Name: p.Name, DType: p.DType, Shape: p.Shape, Offset: off, Length: p.Source.Length, Source: jnf.SourceRange(p.Source)})
			off += p.Source.Length
		}
		r.Length = off
		recs = append(recs, r)
	}
	return recs
}

func (u *unit) shards() []string {
	set := map[string]bool{}
	for _, t := range u.tensors {
		set[t.Source.File] = true
	}
	for _, e := range u.experts {
		for _, p := range e.Parts {
			set[p.Source.File] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Convert converts src into dst. It refuses a dst that is src or inside it
// (or the reverse), holds dst's lock file (flock.Name) while it writes, so
// that two conversions into one directory run one after the other, and
// checks before writing that dst's file system has room for the files it
// will write.
func Convert(ctx context.Context, src, dst string, opt Options) (*Result, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	workers := opt.Workers
	if workers == 0 {
		workers = 2
	}
	if workers < 1 || workers > MaxWorkers {
		return nil, fmt.Errorf("workers = %d: want 1 to %d", opt.Workers, MaxWorkers)
	}
	if err := checkDisjoint(src, dst); err != nil {
		return nil, err
	}
	ck, err := hf.OpenWith(src, hf.Options{FollowSymlinks: opt.FollowSymlinks, Shards: opt.Shards})
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	cfg := ck.Config
	first, last := opt.FirstLayer, opt.LastLayer
	if last < 0 {
		last = cfg.Layers - 1
	}
	if first < 0 || first > last || last >= cfg.Layers {
		return nil, fmt.Errorf("layer range %d-%d is outside the model's layers 0-%d", opt.FirstLayer, last, cfg.Layers-1)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockDir(ctx, dst, opt)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	// What is in dst must be what a convert into it wrote: recorded in its
	// write journal (a run that was interrupted), or listed by the manifest
	// a finished run wrote. Anything else is the user's, and is neither
	// deleted nor replaced without Force.
	wj, err := outdir.Open(dst)
	if err != nil {
		return nil, err
	}
	defer wj.Close()
	prev := previousOutputs(dst)
	if err := wj.Check("convert", func(name string) bool { return prev[name] }, opt.Force); err != nil {
		return nil, err
	}
	if err := wj.RemoveStaleTemps(); err != nil {
		return nil, err
	}
	cfgSum := jnf.SHA256Bytes(ck.ConfigBytes).Hex()

	units := []*unit{{layer: -1, file: jnf.FileName(-1)}}
	for l := first; l <= last; l++ {
		units = append(units, &unit{layer: l, file: jnf.FileName(l), experts: ck.Experts[l]})
	}
	for _, t := range ck.Tensors {
		if t.Layer < 0 {
			units[0].tensors = append(units[0].tensors, t)
		} else if t.Layer >= first && t.Layer <= last {
			units[t.Layer-first+1].tensors = append(units[t.Layer-first+1].tensors, t)
		}
	}
	var ignored []jnf.Ignored
	for _, ig := range ck.Ignored {
		ignored = append(ignored, jnf.Ignored(ig))
	}

	// The work ahead: every record is copied or re-verified once; the
	// shards the files still to write draw from are hashed whole; with
	// Verify those files are compared with the source and re-hashed. Shards are hashed
	// once, on first need: files kept by a resumed conversion never cause a
	// shard to be hashed.
	m := &meter{fn: opt.Progress}
	sums := &shardSums{ck: ck, m: map[string]*shardSum{}, log: log, meter: m}
	var toWrite []*unit
	for _, u := range units {
		m.grow(u.length())
		if _, err := os.Lstat(filepath.Join(dst, u.file)); err != nil {
			toWrite = append(toWrite, u)
			m.grow(sums.plan(u.shards()))
			if opt.Verify {
				m.grow(2 * u.length()) // compared with the source, then re-hashed
			}
		}
	}
	if err := checkSpace(ck, dst, toWrite, cfgSum, ignored, opt.freeSpace); err != nil {
		return nil, err
	}
	// Every name this run may write, recorded before anything is written.
	written := append([]string{verify.ManifestFile}, ck.Aux...)
	for _, u := range units {
		written = append(written, u.file)
	}
	if err := wj.Record(written...); err != nil {
		return nil, err
	}
	if err := copyAux(ck, dst); err != nil {
		return nil, err
	}

	res := &Result{}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var mu sync.Mutex
	for _, u := range units {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err // after a failure: leave the remaining files alone
			}
			// A file already there (an earlier run) is re-verified completely
			// and kept, or removed and written again.
			path := filepath.Join(dst, u.file)
			if _, err := os.Lstat(path); err == nil {
				var checked int64
				err := reverify(ctx, path, u, cfgSum, func(n int64) { checked += n; m.add(n) })
				if err == nil {
					// A kill between the rename and the journal's removal
					// leaves a journal behind.
					err = removePartial(path)
				}
				if err == nil {
					mu.Lock()
					res.Resumed = append(res.Resumed, u.file)
					mu.Unlock()
					return nil
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				log.Warn("existing file does not check out; rewriting it", "file", u.file, "err", err)
				if err := os.Remove(path); err != nil {
					return err
				}
				// Not planned for: its bytes again, its shards, the comparison.
				m.grow(checked + sums.plan(u.shards()))
				if opt.Verify {
					m.grow(2 * u.length())
				}
			}
			ur, err := writeUnit(ctx, ck, dst, u, cfgSum, sums, ignored, opt.Verify, m.add, log.Warn)
			if err != nil {
				return err
			}
			mu.Lock()
			res.Written = append(res.Written, u.file)
			res.Bytes += ur.written
			res.Salvaged += ur.salvaged
			res.SalvagedRecords += ur.records
			res.Verified += ur.verified
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sort.Strings(res.Written)
	sort.Strings(res.Resumed)
	res.ShardsHashed = sums.hashed()
	man, err := verify.Build(dst)
	if err != nil {
		return nil, err
	}
	if err := man.Write(dst); err != nil {
		return nil, err
	}
	// Finished: the manifest now lists what was written.
	if err := wj.Done(); err != nil {
		return nil, err
	}
	res.Manifest = man
	return res, nil
}

// previousOutputs is the set of files a finished conversion into dir
// wrote, as its manifest lists them (with the manifest itself); empty if
// dir holds no manifest that checks against itself.
func previousOutputs(dir string) map[string]bool {
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		return nil
	}
	out := map[string]bool{verify.ManifestFile: true}
	for _, e := range m.Entries {
		out[e.File] = true
	}
	return out
}

// lockDir takes dst's lock: waiting for another conversion into dst to
// finish, or refusing at once with NoWait.
func lockDir(ctx context.Context, dst string, opt Options) (*flock.Lock, error) {
	path := filepath.Join(dst, flock.Name)
	if opt.NoWait {
		return flock.TryAcquire(path)
	}
	return flock.Acquire(ctx, path, opt.Waiting)
}

// length is the total record bytes of u.
func (u *unit) length() int64 {
	var n int64
	for _, t := range u.tensors {
		n += t.Source.Length
	}
	for _, e := range u.experts {
		n += e.Length()
	}
	return n
}

// meter counts the bytes of work done against the work planned.
type meter struct {
	done, total atomic.Int64
	fn          func(done, total int64)
	// mu orders the calls of fn: workers add at once, and a count taken
	// before another's must not be reported after it (progress never
	// runs backwards).
	mu sync.Mutex
}

func (m *meter) grow(n int64) { m.total.Add(n) }

func (m *meter) add(n int64) {
	if m.fn == nil {
		m.done.Add(n)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fn(m.done.Add(n), m.total.Load())
}

// copyAux copies config and tokenizer files. A directory that already holds
// a different config.json belongs to another model: refuse to mix them.
func copyAux(ck *hf.Checkpoint, dst string) error {
	for _, a := range ck.Aux {
		b, err := ck.ReadAux(a)
		if err != nil {
			return err
		}
		p := filepath.Join(dst, a)
		if old, err := jnf.ReadFileLimit(p, jnf.MaxAuxFileSize, a); err == nil {
			if bytes.Equal(old, b) {
				continue
			}
			if a == "config.json" {
				return fmt.Errorf("%s holds a different config.json than %s: refusing to mix two models in one directory", dst, ck.Dir)
			}
		}
		if err := jnf.WriteFileAtomic(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// shardSums computes each source shard's whole-file SHA-256 once, on first
// request, however many files draw from it, counting the bytes hashed on
// the meter.
type shardSums struct {
	ck      *hf.Checkpoint
	mu      sync.Mutex
	m       map[string]*shardSum
	planned map[string]bool
	log     *slog.Logger
	meter   *meter
}

type shardSum struct {
	once sync.Once
	sf   jnf.SourceFile
	err  error
}

// plan returns the bytes of the shards among names not planned before.
func (s *shardSums) plan(names []string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planned == nil {
		s.planned = map[string]bool{}
	}
	var n int64
	for _, name := range names {
		if f, ok := s.ck.ShardFile(name); ok && !s.planned[name] {
			s.planned[name] = true
			n += f.Size
		}
	}
	return n
}

// hashed counts the shards hashed so far.
func (s *shardSums) hashed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *shardSums) get(ctx context.Context, name string) (jnf.SourceFile, error) {
	s.mu.Lock()
	e, ok := s.m[name]
	if !ok {
		e = &shardSum{}
		s.m[name] = e
	}
	s.mu.Unlock()
	e.once.Do(func() {
		f, ok := s.ck.ShardFile(name)
		if !ok {
			e.err = fmt.Errorf("no shard %s", name)
			return
		}
		s.log.Debug("hashing source shard (its SHA-256 is the Hugging Face LFS oid)", "shard", name, "bytes", f.Size)
		d, n, err := jnf.SumReader(&ctxReader{ctx: ctx, r: io.NewSectionReader(f, 0, f.Size), progress: s.meter.add})
		if err != nil {
			e.err = fmt.Errorf("hashing %s: %w", filepath.Join(s.ck.Dir, name), err)
			return
		}
		e.sf = jnf.SourceFile{File: name, Size: n, SHA256: d.SHA256.Hex()}
	})
	return e.sf, e.err
}

// ctxReader stops reading once ctx is done (each Read is at most a few MiB,
// so a cancelled conversion stops within one of them) and reports the bytes
// read to progress, if set.
type ctxReader struct {
	ctx      context.Context
	r        io.Reader
	progress func(int64)
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	if c.progress != nil && n > 0 {
		c.progress(int64(n))
	}
	return n, err
}

var zeroDigest = strings.Repeat("0", 64)

// unitResult counts the record bytes of one written file.
type unitResult struct {
	written  int64 // copied from the source in this run
	salvaged int64 // kept from an interrupted run after re-hashing
	records  int   // records salvaged
	verified int64 // compared with the source (Options.Verify)
}

// plan lays out u's record table with the given sources and zero digests:
// the table, its encoded length and the file size (which filling in the
// digests does not change).
func (u *unit) plan(ck *hf.Checkpoint, cfgSum string, ignored []jnf.Ignored, sources []jnf.SourceFile) (*jnf.Table, int, int64, error) {
	t := &jnf.Table{Format: jnf.FormatName, Version: jnf.Version, File: u.file, Layer: u.layer, ConfigSHA256: cfgSum,
		Sources: sources, Records: u.records()}
	if u.layer < 0 {
		t.Layout, t.Ignored = ck.Layout, ignored
	}
	for i := range t.Records {
		t.Records[i].SHA256, t.Records[i].BLAKE3 = zeroDigest, zeroDigest
	}
	tableLen, size, err := jnf.PlanTable(t)
	return t, tableLen, size, err
}

// writeUnit writes one JNF file to its partial name, continuing an
// interrupted earlier run where the journal proves it can, and renames it
// into place.
func writeUnit(ctx context.Context, ck *hf.Checkpoint, dst string, u *unit, cfgSum string, sums *shardSums,
	ignored []jnf.Ignored, verifyBytes bool, progress func(int64), warn func(string, ...any)) (res unitResult, err error) {
	var sources []jnf.SourceFile
	for _, s := range u.shards() {
		sf, err := sums.get(ctx, s)
		if err != nil {
			return unitResult{}, err
		}
		sources = append(sources, sf)
	}
	t, tableLen, size, err := u.plan(ck, cfgSum, ignored, sources)
	if err != nil {
		return unitResult{}, err
	}
	planned, err := jnf.EncodeTable(t)
	if err != nil {
		return unitResult{}, err
	}
	path := filepath.Join(dst, u.file)
	tmp, err := jnf.OpenPartial(path, 0o644)
	if err != nil {
		return unitResult{}, err
	}
	defer func() {
		// An interrupted file stays for the next run to resume (Suspend is
		// a no-op after the Abort below).
		if err != nil {
			tmp.Suspend()
		}
	}()
	j, kept, err := resumeJournal(ctx, path, jnf.SHA256Bytes(planned).Hex(), tmp.File, t.Records, progress, warn)
	if err != nil {
		return unitResult{}, err
	}
	defer j.close()
	res.records = kept
	for i := range kept {
		res.salvaged += t.Records[i].Length
	}
	buf := make([]byte, 4<<20)
	for i := kept; i < len(t.Records); i++ {
		r := &t.Records[i]
		h := jnf.NewHasher()
		for k, s := range r.SourceRanges() {
			f, ok := ck.ShardFile(s.File)
			if !ok {
				return unitResult{}, fmt.Errorf("no shard %s", s.File)
			}
			var w io.Writer = io.MultiWriter(&offsetWriter{f: tmp, off: r.Offset + partOffset(r, k)}, h)
			if vc := rangeCheck(r, k, s.File); vc != nil {
				w = io.MultiWriter(vc, w) // refused before a byte of it is written
			}
			if _, err := io.CopyBuffer(w, &ctxReader{ctx: ctx, r: io.NewSectionReader(f, s.Offset, s.Length), progress: progress}, buf); err != nil {
				return unitResult{}, fmt.Errorf("%s: record %s from %s@%d: %w", u.file, r.Name, s.File, s.Offset, err)
			}
		}
		d := h.Sum()
		r.SHA256, r.BLAKE3 = d.SHA256.Hex(), d.BLAKE3.Hex()
		if err := j.record(i, r); err != nil {
			return unitResult{}, err
		}
		res.written += r.Length
	}
	final, err := jnf.EncodeTable(t)
	if err != nil {
		return unitResult{}, err
	}
	if len(final) != tableLen {
		return unitResult{}, fmt.Errorf("internal error: table length changed from %d to %d", tableLen, len(final))
	}
	if _, err = tmp.WriteAt(append(jnf.Preamble(final), final...), 0); err != nil {
		return unitResult{}, err
	}
	if err = tmp.Truncate(size); err != nil {
		return unitResult{}, err
	}
	if verifyBytes {
		if res.verified, err = compareWithSource(ctx, ck, tmp.Name(), u.file, progress); err != nil {
			if ctx.Err() == nil { // shown to differ from the source: start afresh next time
				tmp.Abort()
				removePartial(path)
			}
			return unitResult{}, err
		}
	}
	if err = tmp.Commit(); err != nil {
		return unitResult{}, err
	}
	return res, removePartial(path)
}

// partOffset is where source range k of r starts in the record.
func partOffset(r *jnf.Record, k int) int64 {
	if r.Kind == jnf.KindExpert {
		return r.Parts[k].Offset
	}
	return 0
}

// rangeCheck is the value check of source range k of r (nil: none).
func rangeCheck(r *jnf.Record, k int, shard string) *valueCheck {
	if r.Kind == jnf.KindExpert {
		p := r.Parts[k]
		return newValueCheck(fmt.Sprintf("expert %s part %s (%s)", r.Name, p.Name, shard), p.DType, "x."+p.Name)
	}
	return newValueCheck(fmt.Sprintf("tensor %s (%s)", r.Name, shard), r.DType, r.Name)
}

type offsetWriter struct {
	f   io.WriterAt
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// compareWithSource re-reads every record of a written file and compares
// every byte with the source ranges (convert --verify). It also checks the
// table digests against the written bytes and that padding is zero.
func compareWithSource(ctx context.Context, ck *hf.Checkpoint, path, name string, progress func(int64)) (int64, error) {
	f, err := jnf.OpenFileAs(path, name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	a, b := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range f.Table.Records {
		r := &f.Table.Records[i]
		pos := r.Offset
		for _, s := range r.SourceRanges() {
			sf, ok := ck.ShardFile(s.File)
			if !ok {
				return n, fmt.Errorf("no shard %s", s.File)
			}
			for done := int64(0); done < s.Length; {
				if err := ctx.Err(); err != nil {
					return n, err
				}
				k := min(int64(len(a)), s.Length-done)
				if _, err := f.ReadAt(a[:k], pos+done); err != nil {
					return n, fmt.Errorf("%s: record %s at offset %d: %w", name, r.Name, pos+done, err)
				}
				if _, err := sf.ReadAt(b[:k], s.Offset+done); err != nil {
					return n, fmt.Errorf("%s at offset %d: %w", s.File, s.Offset+done, err)
				}
				if !bytes.Equal(a[:k], b[:k]) {
					j := 0
					for a[j] == b[j] {
						j++
					}
					return n, fmt.Errorf("%s: record %s: byte at offset %d is %#02x, source %s offset %d has %#02x: %w", name, r.Name, pos+done+int64(j), a[j], s.File, s.Offset+done+int64(j), b[j], jnf.ErrVerification)
				}
				done += k
				n += k
				progress(k)
			}
			pos += s.Length
		}
	}
	if err := verify.CheckFileData(ctx, f, func(r *jnf.Record) { progress(r.Length) }); err != nil {
		return n, err
	}
	return n, nil
}

// reverify checks an existing file before a resumed conversion keeps it: the
// table must describe exactly the records this conversion would write (same
// names, shapes and source ranges, same config), and every record must hash
// to its recorded digests with zero padding.
func reverify(ctx context.Context, path string, u *unit, cfgSum string, progress func(int64)) error {
	f, err := jnf.OpenFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Table.ConfigSHA256 != cfgSum {
		return fmt.Errorf("converted from a different config.json")
	}
	want := u.records()
	if len(want) != len(f.Table.Records) {
		return fmt.Errorf("has %d records, this conversion plans %d", len(f.Table.Records), len(want))
	}
	for i := range want {
		got := f.Table.Records[i]
		w := want[i]
		w.Offset, w.SHA256, w.BLAKE3 = got.Offset, got.SHA256, got.BLAKE3
		if !sameRecord(&got, &w) {
			return fmt.Errorf("record %d (%s) differs from the planned record %s", i, got.Name, w.Name)
		}
	}
	return verify.CheckFileData(ctx, f, func(r *jnf.Record) { progress(r.Length) })
}

func sameRecord(a, b *jnf.Record) bool {
	ea, err1 := jnf.EncodeTable(&jnf.Table{Records: []jnf.Record{*a}})
	eb, err2 := jnf.EncodeTable(&jnf.Table{Records: []jnf.Record{*b}})
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}
