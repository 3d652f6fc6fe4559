package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Kind is what sort of problem a Problem is, so that callers (and tests)
// can tell problems apart without matching their text.
type Kind string

// The kinds of problem Check reports.
const (
	// KindDigest: bytes that do not hash to their digest (a record's data,
	// config.json, a file an OMS signature names).
	KindDigest Kind = "digest"
	// KindPadding: a non-zero byte where the format requires zeros.
	KindPadding Kind = "padding"
	// KindMissing: in the manifest (or signature) but not in the files.
	KindMissing Kind = "missing"
	// KindExtra: in the files but not in the manifest (or signature), or a
	// file the directory may not hold.
	KindExtra Kind = "extra"
	// KindTable: a manifest entry that differs from its file's record
	// table (a changed digest, a moved or swapped record).
	KindTable Kind = "table"
	// KindManifest: the manifest itself — unreadable, out of order, or its
	// own fields not what the files say.
	KindManifest Kind = "manifest"
	// KindFormat: a file that breaks the JNF format or cannot be read.
	KindFormat Kind = "format"
)

// Problem is one verification failure, located precisely.
type Problem struct {
	Kind   Kind   `json:"kind"`
	File   string `json:"file"`
	Name   string `json:"name,omitempty"` // record or entry name
	Layer  int    `json:"layer"`
	Expert int    `json:"expert"`
	Offset int64  `json:"offset"` // -1 when not applicable
	What   string `json:"what"`
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Name != "" {
		b.WriteString(": ")
		switch {
		case p.Expert >= 0:
			fmt.Fprintf(&b, "layer %d expert %d (%s)", p.Layer, p.Expert, p.Name)
		case p.Layer >= 0:
			fmt.Fprintf(&b, "layer %d tensor %s", p.Layer, p.Name)
		default:
			b.WriteString(p.Name)
		}
	}
	if p.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", p.Offset)
	}
	return b.String() + ": " + p.What
}

func recordProblem(kind Kind, file string, r *jnf.Record, off int64, format string, a ...any) Problem {
	return Problem{Kind: kind, File: file, Name: r.Name, Layer: r.Layer, Expert: r.Expert, Offset: off, What: fmt.Sprintf(format, a...)}
}

// CheckFileData re-hashes every record of f against its table and checks
// that all padding (after the table and after each record) is zero. It
// returns the first problem as an error. onRecord, if set, is called after
// each record.
func CheckFileData(ctx context.Context, f *jnf.File, onRecord func(*jnf.Record)) error {
	buf := make([]byte, 4<<20)
	ps, err := checkTablePadding(f, buf)
	if err != nil {
		return err
	}
	if len(ps) > 0 {
		return ps[0]
	}
	for i := range f.Table.Records {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &f.Table.Records[i]
		ps, err := checkRecord(ctx, f, r, buf)
		if err != nil {
			return err
		}
		if len(ps) > 0 {
			return ps[0]
		}
		if onRecord != nil {
			onRecord(r)
		}
	}
	return nil
}

// checkTablePadding checks the zero padding between the table and the first record.
func checkTablePadding(f *jnf.File, buf []byte) ([]Problem, error) {
	tableEnd := int64(jnf.PreambleSize + len(f.TableBytes))
	p, ok, err := checkZero(f, tableEnd, jnf.DataStart(len(f.TableBytes)), buf)
	if err != nil || ok {
		return nil, err
	}
	return []Problem{{Kind: KindPadding, File: f.Name, Layer: f.Table.Layer, Expert: -1, Offset: p, What: "non-zero byte in the padding after the record table"}}, nil
}

// checkRecord re-hashes one record and checks the padding after it. It
// stops with ctx's error between 4 MiB reads (a record can be gigabytes).
func checkRecord(ctx context.Context, f *jnf.File, r *jnf.Record, buf []byte) ([]Problem, error) {
	want, err := r.Digests()
	if err != nil {
		return nil, err
	}
	h := jnf.NewHasher()
	if _, err := io.CopyBuffer(h, ctxReader{ctx, io.NewSectionReader(f, r.Offset, r.Length)}, buf); err != nil {
		return nil, fmt.Errorf("%s: record %s at offset %d: %w", f.Path, r.Name, r.Offset, err)
	}
	var ps []Problem
	got := h.Sum()
	if !got.SHA256.Equal(want.SHA256) {
		ps = append(ps, recordProblem(KindDigest, f.Name, r, r.Offset, "sha256 mismatch: got %s, want %s", got.SHA256.Hex(), want.SHA256.Hex()))
	} else if !got.BLAKE3.Equal(want.BLAKE3) {
		ps = append(ps, recordProblem(KindDigest, f.Name, r, r.Offset, "blake3 mismatch: got %s, want %s", got.BLAKE3.Hex(), want.BLAKE3.Hex()))
	}
	if p, ok, err := checkZero(f, r.Offset+r.Length, jnf.AlignUp(r.Offset+r.Length), buf); err != nil {
		return nil, err
	} else if !ok {
		ps = append(ps, recordProblem(KindPadding, f.Name, r, p, "non-zero byte in the padding after the record"))
	}
	return ps, nil
}

// ctxReader stops reading when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// checkZero reports the first non-zero byte in [from, to).
func checkZero(f *jnf.File, from, to int64, buf []byte) (int64, bool, error) {
	for pos := from; pos < to; {
		n := min(int64(len(buf)), to-pos)
		if _, err := f.ReadAt(buf[:n], pos); err != nil {
			return 0, false, fmt.Errorf("%s: padding at offset %d: %w", f.Path, pos, err)
		}
		for j, c := range buf[:n] {
			if c != 0 {
				return pos + int64(j), false, nil
			}
		}
		pos += n
	}
	return 0, true, nil
}

// CheckOptions controls Check.
type CheckOptions struct {
	// Sample in (0,1] re-hashes only that fraction of records (chosen with
	// Seed); 0 or 1 means every record.
	Sample float64
	Seed   uint64
	// MaxProblems stops after this many problems (default 100).
	MaxProblems int
	// OnRecord is called after each checked record (for progress), from
	// one goroutine at a time.
	OnRecord func(file string, r *jnf.Record)
	// Workers hash records in parallel (0 = GOMAXPROCS). The report does
	// not depend on it.
	Workers int
}

// Report is the outcome of Check.
type Report struct {
	Root           string    `json:"root"`
	WeightsRoot    string    `json:"weights_root"`
	Complete       bool      `json:"complete"`
	Layers         int       `json:"layers"`
	LayersPresent  []int     `json:"layers_present"`
	Files          int       `json:"files"`
	Records        int       `json:"records"`
	RecordsChecked int       `json:"records_checked"`
	BytesChecked   int64     `json:"bytes_checked"`
	Problems       []Problem `json:"problems"`
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Check verifies a JNF directory from the raw bytes up, like
// `restic check --read-data`: the manifest against itself (ParseManifest),
// config.json against the manifest's digest (before it is parsed), the
// manifest against the record tables and auxiliary files (re-derived with
// the same config bytes), then every record's bytes against its digests,
// and all padding, in the files whose tables were just compared. Problems
// are collected in the report; the error is for I/O failures and for a
// directory that is no JNF directory (*NotJNFError).
func Check(ctx context.Context, dir string, opt CheckOptions) (*Report, error) {
	if opt.MaxProblems <= 0 {
		opt.MaxProblems = 100
	}
	rep := &Report{}
	dirProblem := func(file string, err error) (*Report, error) {
		rep.Problems = append(rep.Problems, Problem{Kind: errorKind(file, err), File: file, Layer: -1, Expert: -1, Offset: -1, What: err.Error()})
		return rep, nil
	}
	m, _, err := LoadManifest(dir)
	if nj := (*NotJNFError)(nil); errors.As(err, &nj) {
		return nil, err // not a JNF directory at all: a usage error, not a failed check
	}
	if err != nil {
		return dirProblem(ManifestFile, err)
	}
	rep.Root, rep.WeightsRoot, rep.Complete = m.Root, m.WeightsRoot, m.Complete
	rep.Layers, rep.LayersPresent = m.Layers, m.LayersHeld
	cfgBytes, err := readConfig(dir, m)
	if err != nil {
		return dirProblem("config.json", err)
	}
	b, err := build(ctx, dir, cfgBytes)
	if err != nil {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		return dirProblem(filepath.Base(dir), err)
	}
	defer b.close()
	rep.Problems = append(rep.Problems, compareManifests(m, b.manifest)...)

	names := make([]string, 0, len(b.files))
	for name := range b.files {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		li, _ := fileLayer(names[i])
		lj, _ := fileLayer(names[j])
		return li < lj
	})
	rep.Files = len(names)
	rng := rand.New(rand.NewPCG(opt.Seed, 0x7461726661))
	// Jobs in canonical order: per file, the table padding (record −1) and
	// the selected records. Workers hash them in parallel; problems are
	// sorted back into job order, so the report does not depend on timing.
	type job struct {
		f   *jnf.File
		rec int // −1: table padding
		seq int
	}
	var jobs []job
	for _, name := range names {
		f := b.files[name]
		rep.Records += len(f.Table.Records)
		jobs = append(jobs, job{f: f, rec: -1, seq: len(jobs)})
		for i := range f.Table.Records {
			if opt.Sample > 0 && opt.Sample < 1 && rng.Float64() >= opt.Sample {
				continue
			}
			jobs = append(jobs, job{f: f, rec: i, seq: len(jobs)})
		}
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		mu       sync.Mutex
		found    = map[int][]Problem{}
		nFound   int
		firstErr error
		wg       sync.WaitGroup
		ch       = make(chan job)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4<<20)
			for j := range ch {
				var ps []Problem
				var err error
				if j.rec < 0 {
					ps, err = checkTablePadding(j.f, buf)
				} else {
					ps, err = checkRecord(ctx, j.f, &j.f.Table.Records[j.rec], buf)
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if len(ps) > 0 {
					found[j.seq] = ps
					nFound += len(ps)
				}
				if j.rec >= 0 && err == nil {
					r := &j.f.Table.Records[j.rec]
					rep.RecordsChecked++
					rep.BytesChecked += r.Length
					if opt.OnRecord != nil {
						opt.OnRecord(j.f.Name, r)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		mu.Lock()
		stop := firstErr != nil || nFound+len(rep.Problems) >= opt.MaxProblems
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		ch <- j
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return rep, firstErr
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	for _, j := range jobs {
		rep.Problems = append(rep.Problems, found[j.seq]...)
	}
	if len(rep.Problems) > opt.MaxProblems {
		rep.Problems = rep.Problems[:opt.MaxProblems]
	}
	return rep, nil
}

// SignatureFile is where `tarfa manifest sign` writes the DSSE envelope.
const SignatureFile = "manifest.sig.json"

// errorKind classifies an error that stopped the check of file: a digest
// mismatch, a file the directory may not hold, the manifest, or else the
// file's format.
func errorKind(file string, err error) Kind {
	var mm *jnf.MismatchError
	var cc *ConfigChangedError
	var uf *UnknownFileError
	switch {
	case errors.As(err, &mm), errors.As(err, &cc):
		return KindDigest
	case errors.As(err, &uf):
		return KindExtra
	case file == ManifestFile:
		return KindManifest
	}
	return KindFormat
}

// compareManifests reports every difference between the stored manifest and
// the one re-derived from the files.
func compareManifests(stored, built *Manifest) []Problem {
	var ps []Problem
	add := func(kind Kind, file, name string, layer, expert int, format string, a ...any) {
		ps = append(ps, Problem{Kind: kind, File: file, Name: name, Layer: layer, Expert: expert, Offset: -1, What: fmt.Sprintf(format, a...)})
	}
	if stored.Root == built.Root && stored.WeightsRoot == built.WeightsRoot {
		return nil
	}
	have := map[string]*Entry{}
	for i := range built.Entries {
		have[built.Entries[i].Name] = &built.Entries[i]
	}
	seen := map[string]bool{}
	for i := range stored.Entries {
		s := &stored.Entries[i]
		seen[s.Name] = true
		b, ok := have[s.Name]
		if !ok {
			add(KindMissing, s.File, s.Name, s.Layer, s.Expert, "in the manifest but not in the files (missing file or record)")
			continue
		}
		if !bytes.Equal(s.FullLeaf(), b.FullLeaf()) {
			what := "manifest entry differs from the file's record table"
			switch {
			case s.SHA256 != b.SHA256:
				what = fmt.Sprintf("manifest says sha256 %s, the file says %s", s.SHA256, b.SHA256)
			case s.File != b.File || s.Offset != b.Offset:
				what = fmt.Sprintf("manifest says %s@%d, the files have it at %s@%d (swapped or moved record)", s.File, s.Offset, b.File, b.Offset)
			}
			add(KindTable, s.File, s.Name, s.Layer, s.Expert, "%s", what)
		}
	}
	for i := range built.Entries {
		b := &built.Entries[i]
		if !seen[b.Name] {
			add(KindExtra, b.File, b.Name, b.Layer, b.Expert, "in the files but not in the manifest")
		}
	}
	if len(ps) == 0 {
		what := fmt.Sprintf("entry order differs from the files: stored root %s, files give %s", stored.Root, built.Root)
		if !bytes.Equal(stored.ManifestLeaf(), built.ManifestLeaf()) {
			what = fmt.Sprintf("the manifest's own fields differ from what the files say:\n%s", leafDiff(stored.ManifestLeaf(), built.ManifestLeaf()))
		}
		add(KindManifest, ManifestFile, "", -1, -1, "%s", what)
	}
	return ps
}

// leafDiff lists the lines of two manifest leaves that differ.
func leafDiff(stored, built []byte) string {
	a, b := strings.Split(string(stored), "\n"), strings.Split(string(built), "\n")
	var out []string
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("  manifest: %s\n  files:    %s", x, y))
		}
	}
	return strings.Join(out, "\n")
}

// Is makes a Problem match jnf.ErrVerification.
func (p Problem) Is(target error) bool { return target == jnf.ErrVerification }
