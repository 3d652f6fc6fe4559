package jnf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Format constants; see SPEC.md.
const (
	Magic        = "TARFAJNF"
	Version      = 1
	Align        = 4096 // every record starts on this boundary; files are padded to it
	PreambleSize = 64
	FormatName   = "tarfa-jnf"
	// MaxTableSize bounds the record table read from a file before allocating.
	MaxTableSize = 256 << 20
)

// Record kinds.
const (
	KindTensor = "tensor"
	KindExpert = "expert"
	KindFile   = "file" // used in manifests for copied auxiliary files
)

// ScaleSuffix ends the name of a block-FP8 weight's scale tensor: the
// scales of X.weight (F8_E4M3, [N, K]) are X.weight_scale_inv (F32 or BF16,
// [ceil(N/bn), ceil(K/bk)]), a tensor record of its own.
const ScaleSuffix = "_scale_inv"

// ExpertParts are the parts of an expert record, in order.
var ExpertParts = []string{"gate_proj", "up_proj", "down_proj"}

// FP8ExpertParts are the parts of a block-FP8 expert record, in order: the
// three F8_E4M3 projections, then their scales (one digest covers them all).
var FP8ExpertParts = []string{"gate_proj", "up_proj", "down_proj",
	"gate_proj.weight" + ScaleSuffix, "up_proj.weight" + ScaleSuffix, "down_proj.weight" + ScaleSuffix}

// ScaleDType reports whether d may hold block-FP8 scales: F32, BF16 or
// F16 (the releases use each), all of which widen exactly to float32.
func ScaleDType(d DType) bool { return d == F32 || d == BF16 || d == F16 }

// SourceRange is where bytes came from in the source checkpoint.
type SourceRange struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// Part is one projection inside an expert record.
type Part struct {
	Name   string      `json:"name"` // gate_proj, up_proj, down_proj
	DType  DType       `json:"dtype"`
	Shape  []int64     `json:"shape"`
	Offset int64       `json:"offset"` // relative to the record start
	Length int64       `json:"length"`
	Source SourceRange `json:"source"`
}

// Record is one entry of a JNF file's record table.
type Record struct {
	Kind   string        `json:"kind"`
	Name   string        `json:"name"`
	Layer  int           `json:"layer"`            // -1 for global tensors
	Expert int           `json:"expert"`           // -1 for tensors
	DType  DType         `json:"dtype,omitempty"`  // tensors only
	Shape  []int64       `json:"shape,omitempty"`  // tensors only
	Parts  []Part        `json:"parts,omitempty"`  // experts only: gate, up, down in this order
	Offset int64         `json:"offset"`           // absolute, multiple of Align
	Length int64         `json:"length"`           // data bytes, excluding padding
	SHA256 string        `json:"sha256"`           // lower-case hex of the data bytes
	BLAKE3 string        `json:"blake3"`           // lower-case hex of the data bytes
	Source []SourceRange `json:"source,omitempty"` // tensors only (experts: per part)
}

// Digests parses the record's two digests.
func (r *Record) Digests() (Digests, error) {
	s, err := ParseHex(SHA256, r.SHA256)
	if err != nil {
		return Digests{}, fmt.Errorf("record %s: sha256: %w", r.Name, err)
	}
	b, err := ParseHex(BLAKE3, r.BLAKE3)
	if err != nil {
		return Digests{}, fmt.Errorf("record %s: blake3: %w", r.Name, err)
	}
	return Digests{SHA256: s, BLAKE3: b}, nil
}

// SourceRanges lists where the record's bytes came from, in record byte
// order: the tensor's range, or the three parts' ranges of an expert.
func (r *Record) SourceRanges() []SourceRange {
	if r.Kind == KindExpert {
		out := make([]SourceRange, len(r.Parts))
		for i, p := range r.Parts {
			out[i] = p.Source
		}
		return out
	}
	return r.Source
}

// SourceFile is a source checkpoint shard a JNF file draws bytes from, with
// its whole-file SHA-256 (the Hugging Face Hub LFS oid).
type SourceFile struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Table is the record table of one JNF file.
type Table struct {
	Format       string       `json:"format"`  // "tarfa-jnf"
	Version      int          `json:"version"` // 1
	File         string       `json:"file"`    // the file's own name, e.g. "layer-00003.jnf"
	Layer        int          `json:"layer"`   // -1 for global.jnf
	ConfigSHA256 string       `json:"config_sha256"`
	Sources      []SourceFile `json:"sources"`
	// Layout and Ignored describe the source checkpoint; global.jnf carries
	// them, layer files leave them empty.
	Layout  string    `json:"layout,omitempty"`
	Ignored []Ignored `json:"ignored,omitempty"`
	Records []Record  `json:"records"`
}

// Ignored is a source tensor deliberately not converted, with the reason.
type Ignored struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Bytes  int64  `json:"bytes"`
}

// FileName is the JNF file holding layer l (l < 0: the global tensors).
func FileName(layer int) string {
	if layer < 0 {
		return "global.jnf"
	}
	return fmt.Sprintf("layer-%05d.jnf", layer)
}

var reFileName = regexp.MustCompile(`^(global|layer-(\d{5}))\.jnf$`)

// AlignUp rounds n up to a multiple of Align.
func AlignUp(n int64) int64 { return (n + Align - 1) / Align * Align }

// FormatError is a structural violation of the JNF format.
type FormatError struct {
	File   string
	Record string // empty for file-level problems
	Offset int64  // -1 when not applicable
	Rule   string
}

func (e *FormatError) Error() string {
	s := "jnf " + e.File
	if e.Record != "" {
		s += ": record " + e.Record
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (offset %d)", e.Offset)
	}
	return s + ": " + e.Rule
}

// ErrFormat matches every *FormatError.
var ErrFormat = errors.New("jnf format error")

// Is makes a FormatError match ErrFormat and ErrVerification: a file that
// breaks the format's rules is not the file that was written.
func (e *FormatError) Is(t error) bool { return t == ErrFormat || t == ErrVerification }

// EncodeTable serialises t (compact encoding/json of the structs above).
func EncodeTable(t *Table) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(t); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Preamble encodes the 64-byte file preamble for a table.
func Preamble(table []byte) []byte {
	p := make([]byte, PreambleSize)
	copy(p, Magic)
	binary.LittleEndian.PutUint32(p[8:], Version)
	binary.LittleEndian.PutUint32(p[12:], 0)
	binary.LittleEndian.PutUint64(p[16:], PreambleSize)
	binary.LittleEndian.PutUint64(p[24:], uint64(len(table)))
	sum := sha256.Sum256(table)
	copy(p[32:], sum[:])
	return p
}

// DataStart is the offset of the first record for a table of n bytes.
func DataStart(tableLen int) int64 { return AlignUp(PreambleSize + int64(tableLen)) }

// Layout assigns aligned offsets to records in table order, starting after a
// table of tableLen bytes, and returns the file size.
func Layout(records []Record, tableLen int) int64 {
	off := DataStart(tableLen)
	for i := range records {
		records[i].Offset = off
		off = AlignUp(off + records[i].Length)
	}
	return off
}

// PlanTable assigns record offsets for t. The table's encoded length depends
// on the offsets it contains, so this iterates to a fixed point. Digests must
// already have their final width (64 hex digits) so that filling them in
// later does not change the length.
func PlanTable(t *Table) (tableLen int, fileSize int64, err error) {
	prev := -1
	for range 8 {
		tb, err := EncodeTable(t)
		if err != nil {
			return 0, 0, err
		}
		if len(tb) == prev {
			return len(tb), Layout(t.Records, len(tb)), nil
		}
		prev = len(tb)
		Layout(t.Records, len(tb))
	}
	return 0, 0, fmt.Errorf("record table layout does not converge")
}

// File is an open JNF file whose preamble and table are structurally valid.
type File struct {
	Path  string
	Name  string
	Table Table
	Size  int64
	// TableBytes are the raw table bytes (hashed by the preamble).
	TableBytes []byte
	f          *os.File
	st         fs.FileInfo // of f, when it was opened
}

// OpenFile opens a JNF file (OpenModelFile: a regular file, not a link) and validates its preamble and record table:
// magic, version, table digest, record offsets aligned, in order,
// non-overlapping, inside the file, and the file size.
func OpenFile(path string) (*File, error) { return OpenFileAs(path, filepath.Base(path)) }

// OpenFileAs is OpenFile for a file that will be renamed to name (used to
// check a temporary file before it is renamed into place).
func OpenFileAs(path, name string) (*File, error) {
	f, st, err := OpenModelFile(path)
	if err != nil {
		return nil, err
	}
	jf, err := readFile(f, st.Size(), path, name)
	if err != nil {
		f.Close()
		return nil, err
	}
	jf.f, jf.st = f, st
	return jf, nil
}

// Reopen opens the file again by its path with extra open flags (the
// streaming tier's O_DIRECT descriptor) and returns the new descriptor only
// if it is the file this one has open (ReopenModelFile): a file replaced
// since OpenFile gives a *ReplacedError and is not read.
func (f *File) Reopen(flag int) (*os.File, error) { return ReopenModelFile(f.Path, f.st, flag) }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// ReadAt reads raw bytes.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// ParseTable validates a JNF stream held in r (used by OpenFile and fuzzing).
func ParseTable(r io.ReaderAt, size int64, name string) (*File, error) {
	return readFile(r, size, name, filepath.Base(name))
}

func readFile(r io.ReaderAt, size int64, path, name string) (*File, error) {
	bad := func(rec string, off int64, format string, a ...any) error {
		return &FormatError{File: path, Record: rec, Offset: off, Rule: fmt.Sprintf(format, a...)}
	}
	if size < PreambleSize {
		return nil, bad("", -1, "file is %d bytes, shorter than the %d-byte preamble", size, PreambleSize)
	}
	p := make([]byte, PreambleSize)
	if _, err := r.ReadAt(p, 0); err != nil {
		return nil, fmt.Errorf("jnf %s: reading preamble: %w", path, err)
	}
	if string(p[:8]) != Magic {
		return nil, bad("", 0, "bad magic %q, want %q", p[:8], Magic)
	}
	if v := binary.LittleEndian.Uint32(p[8:]); v != Version {
		return nil, bad("", 8, "format version %d, this reader supports %d", v, Version)
	}
	if fl := binary.LittleEndian.Uint32(p[12:]); fl != 0 {
		return nil, bad("", 12, "flags %#x, want 0", fl)
	}
	if to := binary.LittleEndian.Uint64(p[16:]); to != PreambleSize {
		return nil, bad("", 16, "table offset %d, want %d", to, PreambleSize)
	}
	tl := binary.LittleEndian.Uint64(p[24:])
	if tl > MaxTableSize || int64(tl) > size-PreambleSize {
		return nil, bad("", 24, "table length %d exceeds the file or the %d-byte limit", tl, MaxTableSize)
	}
	tb := make([]byte, tl)
	if _, err := r.ReadAt(tb, PreambleSize); err != nil {
		return nil, fmt.Errorf("jnf %s: reading table: %w", path, err)
	}
	if got := sha256.Sum256(tb); !bytes.Equal(got[:], p[32:64]) {
		return nil, bad("", PreambleSize, "record table digest mismatch: got sha256:%x, want sha256:%x", got, p[32:64])
	}
	jf := &File{Path: path, Name: name, Size: size, TableBytes: tb}
	if err := DecodeJSON(tb, &jf.Table); err != nil {
		return nil, bad("", PreambleSize, "record table: %v", err)
	}
	t := &jf.Table
	if t.Format != FormatName || t.Version != Version {
		return nil, bad("", PreambleSize, "table format %q version %d, want %q version %d", t.Format, t.Version, FormatName, Version)
	}
	if t.File != name {
		return nil, bad("", PreambleSize, "table names the file %q, but it is %q (renamed or swapped file)", t.File, name)
	}
	m := reFileName.FindStringSubmatch(name)
	if m == nil {
		return nil, bad("", -1, "file name is not global.jnf or layer-NNNNN.jnf")
	}
	if want := FileName(t.Layer); want != name {
		return nil, bad("", PreambleSize, "table says layer %d, which belongs in %s", t.Layer, want)
	}
	if _, err := ParseHex(SHA256, t.ConfigSHA256); err != nil {
		return nil, bad("", PreambleSize, "config_sha256: %v", err)
	}
	if err := t.validateHeader(); err != nil {
		return nil, bad("", PreambleSize, "%v", err)
	}
	off := DataStart(len(tb))
	for i := range t.Records {
		rec := &t.Records[i]
		if err := rec.Validate(t.Layer); err != nil {
			return nil, bad(rec.Name, rec.Offset, "%v", err)
		}
		if rec.Offset != off {
			return nil, bad(rec.Name, rec.Offset, "record %d starts at %d, want %d (records are packed in table order on %d-byte boundaries)", i, rec.Offset, off, Align)
		}
		off = AlignUp(off + rec.Length)
	}
	if off != size {
		return nil, bad("", size, "file is %d bytes, the table implies %d (truncated or extended)", size, off)
	}
	if err := t.checkSources(); err != nil {
		return nil, bad("", PreambleSize, "%v", err)
	}
	return jf, nil
}

// Source-checkpoint layouts recorded in global.jnf.
const (
	LayoutPerExpert = "per-expert" // mlp.experts.E.{gate,up,down}_proj.weight
	LayoutFused     = "fused"      // mlp.experts.gate_up_proj [E,2I,H], mlp.experts.down_proj [E,H,I]
)

// validateHeader checks the table's fields other than its records.
func (t *Table) validateHeader() error {
	if t.Layer < -1 {
		return fmt.Errorf("layer %d", t.Layer)
	}
	if t.Layer >= 0 && (t.Layout != "" || len(t.Ignored) != 0) {
		return fmt.Errorf("layout and ignored belong in global.jnf only")
	}
	if t.Layer < 0 && t.Layout != LayoutPerExpert && t.Layout != LayoutFused {
		return fmt.Errorf("layout %q, want %q or %q", t.Layout, LayoutPerExpert, LayoutFused)
	}
	for i, s := range t.Sources {
		if err := ValidName(s.File); err != nil {
			return fmt.Errorf("sources[%d]: %v", i, err)
		}
		if i > 0 && s.File <= t.Sources[i-1].File {
			return fmt.Errorf("sources[%d]: %s is not after %s (sources are sorted by file, each once)", i, s.File, t.Sources[i-1].File)
		}
		if s.Size < 0 {
			return fmt.Errorf("sources[%d]: size %d", i, s.Size)
		}
		if _, err := ParseHex(SHA256, s.SHA256); err != nil {
			return fmt.Errorf("sources[%d]: sha256: %v", i, err)
		}
	}
	for i, ig := range t.Ignored {
		if ig.Name == "" || ig.Bytes < 0 {
			return fmt.Errorf("ignored[%d]: name %q bytes %d", i, ig.Name, ig.Bytes)
		}
	}
	return nil
}

// checkSources requires the table's sources to be exactly the shards its
// records draw bytes from, each lying inside its shard, so that the sources
// list says nothing the records (which the manifest root covers) do not.
func (t *Table) checkSources() error {
	size := make(map[string]int64, len(t.Sources))
	for _, s := range t.Sources {
		size[s.File] = s.Size
	}
	used := map[string]bool{}
	for i := range t.Records {
		for _, sr := range t.Records[i].SourceRanges() {
			sz, ok := size[sr.File]
			if !ok {
				return fmt.Errorf("record %s draws bytes from %s, which the table's sources do not list", t.Records[i].Name, sr.File)
			}
			if sr.Offset > sz-sr.Length {
				return fmt.Errorf("record %s: source range %s:%d+%d lies outside the %d-byte shard", t.Records[i].Name, sr.File, sr.Offset, sr.Length, sz)
			}
			used[sr.File] = true
		}
	}
	for _, s := range t.Sources {
		if !used[s.File] {
			return fmt.Errorf("sources list %s, from which no record draws bytes", s.File)
		}
	}
	return nil
}

// MaxNameLen bounds every name Tarfa writes into a leaf.
const MaxNameLen = 256

// ValidName checks a canonical tensor name, a shard or an auxiliary file
// name: 1 to MaxNameLen bytes of ASCII letters, digits, '_', '.' and '-'.
// Names appear in Merkle leaves as text lines; the grammar keeps every leaf
// unambiguous (no newline, no ':' '+' ';' '=' separators, no path).
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("name of %d bytes, want 1 to %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("name %q: byte %#x at %d is not a letter, digit, '_', '.' or '-'", name, c, i)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("name %q", name)
	}
	return nil
}

// Validate checks one record on its own, for a file of the given layer (−1:
// global.jnf): kind, name, digests, lengths (with overflow-checked shape
// arithmetic), the parts of an expert and the source ranges. Offsets
// relative to other records are the reader's business.
func (r *Record) Validate(layer int) error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	if r.Layer != layer {
		return fmt.Errorf("layer %d in a file of layer %d", r.Layer, layer)
	}
	if r.Length <= 0 {
		return fmt.Errorf("length %d", r.Length)
	}
	if r.Offset < 0 || r.Offset%Align != 0 || r.Offset > math.MaxInt64-r.Length-Align {
		return fmt.Errorf("offset %d", r.Offset)
	}
	if _, err := r.Digests(); err != nil {
		return err
	}
	for _, sr := range r.SourceRanges() {
		if err := ValidName(sr.File); err != nil {
			return fmt.Errorf("source file: %v", err)
		}
		if sr.Offset < 0 || sr.Length < 0 || sr.Offset > math.MaxInt64-sr.Length {
			return fmt.Errorf("source range %s:%d+%d", sr.File, sr.Offset, sr.Length)
		}
	}
	switch r.Kind {
	case KindTensor:
		if r.Expert != -1 || len(r.Parts) != 0 {
			return fmt.Errorf("tensor record with expert fields")
		}
		n, err := ByteSize(r.DType, r.Shape)
		if err != nil {
			return err
		}
		if n != r.Length {
			return fmt.Errorf("shape %v × %s = %d bytes, length is %d", r.Shape, r.DType, n, r.Length)
		}
		if r.DType == F8E4 && len(r.Shape) != 2 {
			return fmt.Errorf("an F8_E4M3 tensor is a block-FP8 matrix: shape %v, want 2 dimensions", r.Shape)
		}
		if strings.HasSuffix(r.Name, ".weight"+ScaleSuffix) && (!ScaleDType(r.DType) || len(r.Shape) != 2) {
			return fmt.Errorf("block-FP8 scales: %s%v, want F32, BF16 or F16 with 2 dimensions", r.DType, r.Shape)
		}
		if len(r.Source) != 1 || r.Source[0].Length != r.Length {
			return fmt.Errorf("a tensor record has one source range of its length, got %v", r.Source)
		}
	case KindExpert:
		if r.Expert < 0 || layer < 0 {
			return fmt.Errorf("expert record needs a layer and an expert index")
		}
		if r.DType != "" || len(r.Shape) != 0 || len(r.Source) != 0 {
			return fmt.Errorf("expert record with tensor fields")
		}
		names, fp8 := ExpertParts, false
		switch {
		case len(r.Parts) == 6:
			names, fp8 = FP8ExpertParts, true
		case len(r.Parts) != 3:
			return fmt.Errorf("expert record has %d parts, want 3 (gate_proj, up_proj, down_proj) or, block FP8, 6 (those and their weight_scale_inv)", len(r.Parts))
		}
		pos := int64(0)
		for i, p := range r.Parts {
			if want := names[i]; p.Name != want {
				return fmt.Errorf("part %d is %q, want %q", i, p.Name, want)
			}
			if len(p.Shape) != 2 {
				return fmt.Errorf("part %s: shape %v, want 2 dimensions", p.Name, p.Shape)
			}
			switch {
			case !fp8 && p.DType != BF16 && p.DType != F32 && p.DType != F16:
				return fmt.Errorf("part %s: dtype %s, want BF16, F32 or F16", p.Name, p.DType)
			case fp8 && i < 3 && p.DType != F8E4:
				return fmt.Errorf("part %s: dtype %s, want F8_E4M3 (a six-part expert is block FP8)", p.Name, p.DType)
			case fp8 && i >= 3 && !ScaleDType(p.DType):
				return fmt.Errorf("part %s: dtype %s, want F32, BF16 or F16", p.Name, p.DType)
			}
			n, err := ByteSize(p.DType, p.Shape)
			if err != nil {
				return fmt.Errorf("part %s: %v", p.Name, err)
			}
			if p.Offset != pos || n != p.Length || p.Length <= 0 || p.Source.Length != p.Length {
				return fmt.Errorf("part %s: offset %d length %d inconsistent with shape %v × %s at position %d", p.Name, p.Offset, p.Length, p.Shape, p.DType, pos)
			}
			pos += p.Length
		}
		if fp8 {
			if err := checkFP8Expert(r.Parts); err != nil {
				return err
			}
		}
		if pos != r.Length {
			return fmt.Errorf("parts cover %d bytes, record length %d", pos, r.Length)
		}
	default:
		return fmt.Errorf("unknown kind %q", r.Kind)
	}
	return nil
}

// checkFP8Expert checks what the record alone can say of a six-part
// expert's shapes (the block size is config.json's): gate and up are
// [I, H], down [H, I]; each scale has, in each dimension, at least one and
// at most as many entries as its weight; gate's and up's scales agree.
func checkFP8Expert(p []Part) error {
	g, u, d := p[0].Shape, p[1].Shape, p[2].Shape
	if !equalShape(g, u) || d[0] != g[1] || d[1] != g[0] {
		return fmt.Errorf("parts gate_proj %v, up_proj %v, down_proj %v: want [I,H], [I,H], [H,I]", g, u, d)
	}
	for i := range 3 {
		w, s := p[i].Shape, p[3+i].Shape
		if s[0] < 1 || s[1] < 1 || s[0] > w[0] || s[1] > w[1] {
			return fmt.Errorf("part %s: shape %v, want 1 to %v scales per dimension (weight %s %v)", p[3+i].Name, s, w, p[i].Name, w)
		}
	}
	if !equalShape(p[3].Shape, p[4].Shape) {
		return fmt.Errorf("parts %s %v and %s %v: gate_proj and up_proj have one shape, so one scale shape", p[3].Name, p[3].Shape, p[4].Name, p[4].Shape)
	}
	return nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RecordBytes is a record's data together with its expected digests. The
// reader never hands out bytes without them.
type RecordBytes struct {
	Record *Record
	Want   Digests
	Data   []byte
}

// ReadRecord reads record i into buf (grown if needed) and returns it with
// its expected digests. It does not hash: verification is the caller's job
// (attest and verify do it).
func (f *File) ReadRecord(i int, buf []byte) (RecordBytes, error) {
	if i < 0 || i >= len(f.Table.Records) {
		return RecordBytes{}, fmt.Errorf("jnf %s: record %d out of range [0,%d)", f.Path, i, len(f.Table.Records))
	}
	r := &f.Table.Records[i]
	want, err := r.Digests()
	if err != nil {
		return RecordBytes{}, err
	}
	if int64(cap(buf)) < r.Length {
		buf = make([]byte, r.Length)
	}
	buf = buf[:r.Length]
	if _, err := f.f.ReadAt(buf, r.Offset); err != nil {
		return RecordBytes{}, fmt.Errorf("jnf %s: record %s at offset %d: %w", f.Path, r.Name, r.Offset, err)
	}
	return RecordBytes{Record: r, Want: want, Data: buf}, nil
}

// Views returns the tensor views of a record's data: one for a tensor, one
// per part (gate, up, down, and for block FP8 their three scales) for an
// expert.
func (rb RecordBytes) Views() []TensorView {
	r := rb.Record
	if r.Kind == KindTensor {
		return []TensorView{{Name: r.Name, DType: r.DType, Shape: r.Shape, Data: rb.Data}}
	}
	out := make([]TensorView, len(r.Parts))
	for i, p := range r.Parts {
		out[i] = TensorView{Name: r.Name + "." + p.Name, DType: p.DType, Shape: p.Shape, Data: rb.Data[p.Offset : p.Offset+p.Length]}
	}
	return out
}
