package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/verify"
)

// Checkpoint is a converted JNF directory opened for inference. Every
// verified value it hands out has just been read, hashed and matched against
// the digest of its manifest entry, and the manifest's root was re-derived
// from the files' record tables and auxiliary files when it was opened. A
// Checkpoint is safe for concurrent use.
type Checkpoint struct {
	dir   *verify.Dir
	root  jnf.Digest
	wroot jnf.Digest
	cfg   hf.Config
	blk   [2]int // block size of a block-FP8 checkpoint (cfg.Quant)

	// records are private copies of what the manifest entries say, made at
	// Open: nothing a caller does to the manifest it is shown changes what
	// bytes are accepted.
	records map[string]*recordRef
	aux     map[string]auxRef

	mu     sync.Mutex
	served [2]int // tensors, experts handed out
}

type recordRef struct {
	file  *jnf.File
	index int
	rec   jnf.Record // copied from the manifest entry (equal to the table's record)
	want  jnf.Digest // BLAKE3
}

type auxRef struct {
	length int64
	sha256 jnf.Digest
}

// IncompleteError says a JNF directory does not hold the whole model. It
// matches jnf.ErrVerification: a partial conversion is not the checkpoint.
type IncompleteError struct {
	Dir           string
	LayersPresent []int
	Layers        int
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("model %s is incomplete: it holds %d of %d layers %v (finish `tarfa convert --layers`)", e.Dir, len(e.LayersPresent), e.Layers, e.LayersPresent)
}
func (e *IncompleteError) Is(target error) bool { return target == jnf.ErrVerification }

// Open opens dir (verify.OpenDir: the manifest checked against itself,
// config.json against the manifest before it is parsed, the root re-derived
// from the files) and requires a complete model. The files stay open, and
// are read only through the descriptors opened then (never again by path,
// so a file replaced after Open is never read); the record tables served
// are the ones the root was re-derived from.
func Open(ctx context.Context, dir string) (*Checkpoint, error) {
	d, err := verify.OpenDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	m := d.Manifest
	if !m.Complete {
		d.Close()
		return nil, &IncompleteError{Dir: dir, LayersPresent: m.LayersHeld, Layers: m.Layers}
	}
	c := &Checkpoint{dir: d, cfg: *d.Config, records: make(map[string]*recordRef, len(m.Entries)), aux: map[string]auxRef{}}
	if q := d.Config.Quant; q != nil {
		c.blk = [2]int{q.BlockN, q.BlockK}
	}
	if c.root, err = m.RootDigest(); err == nil {
		c.wroot, err = jnf.ParseHex(jnf.SHA256, m.WeightsRoot)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	// Index each table's records by name: the manifest's entries are the
	// tables' records (the roots are equal), but the bytes are read at the
	// offsets of the tables themselves.
	index := map[string]map[string]int{}
	for name, f := range d.Files {
		ix := make(map[string]int, len(f.Table.Records))
		for i := range f.Table.Records {
			ix[f.Table.Records[i].Name] = i
		}
		index[name] = ix
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Kind == jnf.KindFile {
			s, err := jnf.ParseHex(jnf.SHA256, e.SHA256)
			if err != nil {
				d.Close()
				return nil, err
			}
			c.aux[e.Name] = auxRef{length: e.Length, sha256: s}
			continue
		}
		f, ok := d.Files[e.File]
		j, ok2 := index[e.File][e.Name]
		if !ok || !ok2 || !sameRecord(&f.Table.Records[j], &e.Record) {
			d.Close()
			return nil, fmt.Errorf("model %s: %s: the manifest entry differs from the record table of %s: %w", dir, e.Name, e.File, jnf.ErrVerification)
		}
		ds, err := e.Digests()
		if err != nil {
			d.Close()
			return nil, err
		}
		rec := e.Record
		rec.Shape = slices.Clone(rec.Shape)
		rec.Parts = slices.Clone(rec.Parts)
		c.records[e.Name] = &recordRef{file: f, index: j, rec: rec, want: ds.BLAKE3}
	}
	return c, nil
}

// sameRecord reports whether a table record and a manifest entry agree on
// everything the engine relies on.
func sameRecord(r, e *jnf.Record) bool {
	if r.Kind != e.Kind || r.Name != e.Name || r.Layer != e.Layer || r.Expert != e.Expert || r.DType != e.DType ||
		!slices.Equal(r.Shape, e.Shape) || r.Offset != e.Offset || r.Length != e.Length || r.SHA256 != e.SHA256 || r.BLAKE3 != e.BLAKE3 ||
		len(r.Parts) != len(e.Parts) {
		return false
	}
	for i := range r.Parts {
		p, q := &r.Parts[i], &e.Parts[i]
		if p.Name != q.Name || p.DType != q.DType || !slices.Equal(p.Shape, q.Shape) || p.Offset != q.Offset || p.Length != q.Length {
			return false
		}
	}
	return true
}

// Close closes the files.
func (c *Checkpoint) Close() error { return c.dir.Close() }

// Dir is the directory the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir.Path }

// Root is the manifest root: the model's identity.
func (c *Checkpoint) Root() jnf.Digest { return c.root }

// WeightsRoot is the manifest's weights_root.
func (c *Checkpoint) WeightsRoot() jnf.Digest { return c.wroot }

// Manifest is the checked manifest, for display. The checkpoint does not
// read it after Open, so changing it changes nothing that is served; do not
// change it all the same.
func (c *Checkpoint) Manifest() *verify.Manifest { return c.dir.Manifest }

// Config returns a copy of the model's normalised configuration, parsed
// from the config.json bytes whose digest the manifest records.
func (c *Checkpoint) Config() *hf.Config {
	cfg := c.cfg
	cfg.LayerTypes = slices.Clone(cfg.LayerTypes)
	cfg.Sparse = slices.Clone(cfg.Sparse)
	cfg.BOS = slices.Clone(cfg.BOS)
	cfg.EOS = slices.Clone(cfg.EOS)
	if q := cfg.Quant; q != nil {
		q := *q
		q.NotConverted = slices.Clone(q.NotConverted)
		cfg.Quant = &q
	}
	return &cfg
}

// ConfigBytes returns a copy of config.json as the manifest hashes it.
func (c *Checkpoint) ConfigBytes() []byte { return slices.Clone(c.dir.ConfigBytes) }

// Served returns how many tensors and experts were handed out.
func (c *Checkpoint) Served() (tensors, experts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served[0], c.served[1]
}

func (c *Checkpoint) read(name, kind string) (*record, error) {
	ref, ok := c.records[name]
	if !ok || ref.rec.Kind != kind {
		return nil, fmt.Errorf("model %s: no %s %q in the manifest", c.dir.Path, kind, name)
	}
	// A fresh buffer that only mint will reference.
	rb, err := ref.file.ReadRecord(ref.index, nil)
	if err != nil {
		return nil, err
	}
	r, err := mint(c.root, c.blk, ref.file.Name, &ref.rec, ref.want, rb.Data)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if kind == jnf.KindTensor {
		c.served[0]++
	} else {
		c.served[1]++
	}
	c.mu.Unlock()
	return r, nil
}

// Tensor reads a non-expert tensor by canonical name and verifies it
// against its manifest entry.
func (c *Checkpoint) Tensor(name string) (VerifiedTensor, error) {
	r, err := c.read(name, jnf.KindTensor)
	if err != nil {
		return VerifiedTensor{}, err
	}
	return VerifiedTensor{r}, nil
}

// TensorContext is Tensor for large tensors: it reads and hashes the
// tensor a chunk at a time, stops with ctx's error between chunks, and
// reports the bytes of each chunk to progress (nil: not reported).
func (c *Checkpoint) TensorContext(ctx context.Context, name string, progress func(n int64)) (VerifiedTensor, error) {
	ref, ok := c.records[name]
	if !ok || ref.rec.Kind != jnf.KindTensor {
		return VerifiedTensor{}, fmt.Errorf("model %s: no %s %q in the manifest", c.dir.Path, jnf.KindTensor, name)
	}
	tr := &ref.file.Table.Records[ref.index]
	r, err := mintFrom(ctx, c.root, c.blk, ref.file.Name, &ref.rec, ref.want, ref.file, tr.Offset, progress)
	if err != nil {
		return VerifiedTensor{}, err
	}
	c.mu.Lock()
	c.served[0]++
	c.mu.Unlock()
	return VerifiedTensor{r}, nil
}

// TensorBytes is the size of all non-expert tensors: what loading the
// model reads and hashes before the first token.
func (c *Checkpoint) TensorBytes() int64 {
	var n int64
	for _, ref := range c.records {
		if ref.rec.Kind == jnf.KindTensor {
			n += ref.rec.Length
		}
	}
	return n
}

// Expert reads routed expert e of layer l and verifies it against its
// manifest entry.
func (c *Checkpoint) Expert(layer, expert int) (VerifiedExpert, error) {
	r, err := c.read(hf.ExpertName(layer, expert), jnf.KindExpert)
	if err != nil {
		return VerifiedExpert{}, err
	}
	return VerifiedExpert{r}, nil
}

// ExpertRef locates one routed expert's record for a reader outside this
// package (the streaming tier): where its bytes are, and — kept inside —
// the manifest's digest they must hash to. Only a Checkpoint makes one.
type ExpertRef struct {
	ck  *Checkpoint
	ref *recordRef
}

// ExpertRef locates routed expert e of layer l.
func (c *Checkpoint) ExpertRef(layer, expert int) (ExpertRef, error) {
	ref, ok := c.records[hf.ExpertName(layer, expert)]
	if !ok || ref.rec.Kind != jnf.KindExpert {
		return ExpertRef{}, fmt.Errorf("model %s: no expert %d of layer %d in the manifest", c.dir.Path, expert, layer)
	}
	return ExpertRef{c, ref}, nil
}

// ID is the expert's layer and index.
func (r ExpertRef) ID() ExpertID { return ExpertID{r.ref.rec.Layer, r.ref.rec.Expert} }

// Path is the JNF file holding the record.
func (r ExpertRef) Path() string { return r.ref.file.Path }

// File is the JNF file holding the record, open since the checkpoint was:
// read the record through it (or a descriptor from its Reopen), never by
// Path. The zero ExpertRef (no expert: the slot of a dense layer in a
// table indexed by layer and expert) has none: nil.
func (r ExpertRef) File() *jnf.File {
	if r.ref == nil {
		return nil
	}
	return r.ref.file
}

// Offset is the record's offset in its file (a multiple of jnf.Align).
func (r ExpertRef) Offset() int64 { return r.ref.rec.Offset }

// Length is the record's length.
func (r ExpertRef) Length() int64 { return r.ref.rec.Length }

// ReadLength is Length rounded up to jnf.Align: the record and its zero
// padding, the range an O_DIRECT read covers.
func (r ExpertRef) ReadLength() int64 { return jnf.AlignUp(r.ref.rec.Length) }

// Digest is the manifest's BLAKE3 digest of the record.
func (r ExpertRef) Digest() jnf.Digest { return r.ref.want }

// Verify mints the expert from the record's bytes read into b (the first
// Length bytes; b must hold at least that many): it seals b read-only, then
// hashes those bytes against the manifest digest (on this goroutine: Check
// hashes them in parts on several). On a match the value views b in place
// until b is released (which invalidates it); on a mismatch b is unsealed
// and the error names the record.
func (r ExpertRef) Verify(b *Buffer) (VerifiedExpert, error) {
	c, err := r.Check(b, 0)
	if err != nil {
		return VerifiedExpert{}, err
	}
	for i := range c.Parts() {
		c.Hash(i)
	}
	return c.Verify()
}

// minted is the expert of rec, checked, viewing b until b is released.
func (r ExpertRef) minted(rec *record, b *Buffer) VerifiedExpert {
	rec.buf, rec.gen = b, b.gen.Load()
	for i := range rec.views {
		rec.views[i].buf, rec.views[i].gen = b, rec.gen
	}
	rec.linkViews()
	r.ck.mu.Lock()
	r.ck.served[1]++
	r.ck.mu.Unlock()
	return VerifiedExpert{rec}
}

// ExpertBytes is the length of routed expert e of layer l's record (0 if
// the manifest has none).
func (c *Checkpoint) ExpertBytes(layer, expert int) int64 {
	if ref, ok := c.records[hf.ExpertName(layer, expert)]; ok && ref.rec.Kind == jnf.KindExpert {
		return ref.rec.Length
	}
	return 0
}

// AuxFile reads one auxiliary file of the model directory (config,
// tokenizer, chat template: the manifest's "file" entries) and returns its
// bytes only if they hash to the manifest's SHA-256 for it. A file the
// manifest does not list does not exist (fs.ErrNotExist). Reads are bounded
// by the manifest's length for the file, and go through the descriptor Open
// opened (the path is not opened again).
func (c *Checkpoint) AuxFile(name string) ([]byte, error) {
	a, ok := c.aux[name]
	if !ok {
		return nil, fmt.Errorf("model %s: %s: %w (not in the manifest)", c.dir.Path, name, fs.ErrNotExist)
	}
	p := filepath.Join(c.dir.Path, name)
	var b []byte
	var err error
	if f, ok := c.dir.AuxFiles[name]; ok {
		// The descriptor Open hashed, not the path: a file replaced since
		// is never read.
		b, err = jnf.ReadAllLimit(io.NewSectionReader(f, 0, a.length+1), p, a.length, name+" (its manifest length)")
	} else if name == "config.json" {
		b = slices.Clone(c.dir.ConfigBytes)
	} else {
		return nil, fmt.Errorf("model %s: %s: %w (not opened with the model)", c.dir.Path, name, fs.ErrNotExist)
	}
	if err != nil {
		var le *jnf.LimitError
		if errors.As(err, &le) {
			return nil, fmt.Errorf("%w: %w", err, jnf.ErrVerification)
		}
		return nil, err
	}
	if got := jnf.SHA256Bytes(b); !got.Equal(a.sha256) {
		return nil, &jnf.MismatchError{What: fmt.Sprintf("model %s: %s", c.dir.Path, name), Got: got, Want: a.sha256}
	}
	return b, nil
}

// AuxFS is a read-only file system of every auxiliary file, each read once
// and verified against the manifest now. Loaders (the tokenizer, the chat
// template) read from it, so what they parse is what the root attests.
func (c *Checkpoint) AuxFS() (fs.FS, error) {
	out := memFS{}
	names := make([]string, 0, len(c.aux))
	for name := range c.aux {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, err := c.AuxFile(name)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// memFS is a flat read-only file system of verified files.
type memFS map[string][]byte

func (m memFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &memDir{m: m}, nil
	}
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{name: name, b: b}, nil
}

// ReadFile returns a copy of the file (fs.ReadFileFS).
func (m memFS) ReadFile(name string) ([]byte, error) {
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(b), nil
}

type memFile struct {
	name string
	b    []byte
	off  int
}

func (f *memFile) Stat() (fs.FileInfo, error) { return memInfo{f.name, int64(len(f.b)), 0o444}, nil }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Read(p []byte) (int, error) {
	if f.off >= len(f.b) {
		return 0, io.EOF
	}
	n := copy(p, f.b[f.off:])
	f.off += n
	return n, nil
}

type memDir struct {
	m    memFS
	done bool
}

func (d *memDir) Stat() (fs.FileInfo, error) { return memInfo{".", 0, fs.ModeDir | 0o555}, nil }
func (d *memDir) Close() error               { return nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}
func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.done {
		if n > 0 {
			return nil, io.EOF
		}
		return nil, nil
	}
	d.done = true
	var out []fs.DirEntry
	for name, b := range d.m {
		out = append(out, fs.FileInfoToDirEntry(memInfo{name, int64(len(b)), 0o444}))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

type memInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return i.mode }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }
