// Package safetensors is a strict reader and a deterministic writer of the
// Hugging Face safetensors format:
//
//	[8-byte little-endian header length N][N bytes of JSON header][data buffer]
//
// The header is a JSON object mapping tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
// data buffer) plus an optional "__metadata__" string→string map. The JSON
// may be padded with trailing spaces.
//
// The reader rejects, naming the file, the tensor and the rule broken:
// absurd header sizes (before allocating), headers not starting with '{',
// duplicate keys (encoding/json would silently keep the last), unknown
// dtypes, negative dimensions, shape×dtype size ≠ span (with overflow
// checks), offsets outside the buffer, overlapping tensors, gaps, and
// trailing bytes after the last tensor.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"

	"github.com/tarfa-ai/tarfa/jnf"
)

// MaxHeaderSize bounds the JSON header: the reference implementation's
// limit (MAX_HEADER_SIZE in huggingface/safetensors), checked against the
// length field before the header is allocated or read.
const MaxHeaderSize = 100_000_000

// Tensor describes one tensor of a file. Begin and End are absolute file
// offsets (already shifted past the header).
type Tensor struct {
	Name       string
	DType      jnf.DType
	Shape      []int64
	Begin, End int64
}

// Len is the byte length of the tensor's data.
func (t Tensor) Len() int64 { return t.End - t.Begin }

// Numel is the number of elements.
func (t Tensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a parsed, validated header.
type Header struct {
	Tensors   []Tensor // sorted by name
	Metadata  map[string]string
	DataStart int64 // 8 + N
	byName    map[string]int
}

// Lookup finds a tensor by name.
func (h *Header) Lookup(name string) (Tensor, bool) {
	i, ok := h.byName[name]
	if !ok {
		return Tensor{}, false
	}
	return h.Tensors[i], true
}

// FormatError is a violation of the safetensors format.
type FormatError struct {
	File   string
	Tensor string // empty for file-level problems
	Rule   string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors %s: tensor %q: %s", e.File, e.Tensor, e.Rule)
	}
	return fmt.Sprintf("safetensors %s: %s", e.File, e.Rule)
}

// ErrFormat is matched by every *FormatError via errors.Is.
var ErrFormat = errors.New("safetensors format error")

func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// HeaderLen reads the header length field (the first 8 bytes) of a
// safetensors file, for a caller that bounds the headers of many files
// before reading any.
func HeaderLen(r io.ReaderAt) (uint64, error) {
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(lb[:]), nil
}

// ReadHeader reads and validates the header of a safetensors file of the given
// total size. name is used in error messages.
func ReadHeader(r io.ReaderAt, size int64, name string) (*Header, error) {
	bad := func(tensor, format string, a ...any) error {
		return &FormatError{File: name, Tensor: tensor, Rule: fmt.Sprintf(format, a...)}
	}
	if size < 8 {
		return nil, bad("", "file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderSize {
		return nil, bad("", "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, bad("", "header length %d exceeds the file (%d bytes after the length field)", n, size-8)
	}
	if n < 2 {
		return nil, bad("", "header length %d is too short for a JSON object", n)
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading %d-byte header: %w", name, n, err)
	}
	h, err := parseHeader(hb, name)
	if err != nil {
		return nil, err
	}
	h.DataStart = 8 + int64(n)
	bufLen := size - h.DataStart
	// Offsets in the JSON are relative to the buffer; validate coverage.
	type span struct {
		b, e int64
		name string
	}
	spans := make([]span, 0, len(h.Tensors))
	for _, t := range h.Tensors {
		if t.End > bufLen {
			return nil, bad(t.Name, "data_offsets end %d is past the data buffer of %d bytes", t.End, bufLen)
		}
		spans = append(spans, span{t.Begin, t.End, t.Name})
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].b != spans[j].b {
			return spans[i].b < spans[j].b
		}
		return spans[i].e < spans[j].e
	})
	pos := int64(0)
	for _, s := range spans {
		switch {
		case s.b < pos:
			return nil, bad(s.name, "data_offsets [%d,%d) overlap the previous tensor (ends at %d)", s.b, s.e, pos)
		case s.b > pos:
			return nil, bad(s.name, "gap: data_offsets start at %d but the previous tensor ends at %d", s.b, pos)
		}
		pos = s.e
	}
	if pos != bufLen {
		return nil, bad("", "%d trailing bytes after the last tensor (buffer %d bytes, tensors cover %d)", bufLen-pos, bufLen, pos)
	}
	for i := range h.Tensors {
		h.Tensors[i].Begin += h.DataStart
		h.Tensors[i].End += h.DataStart
	}
	return h, nil
}

type rawTensor struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// parseHeader validates the JSON (jnf.CheckJSON: valid UTF-8, no duplicate
// key anywhere) and walks it so that unknown fields are detected.
func parseHeader(hb []byte, name string) (*Header, error) {
	bad := func(tensor, format string, a ...any) error {
		return &FormatError{File: name, Tensor: tensor, Rule: fmt.Sprintf(format, a...)}
	}
	if hb[0] != '{' {
		return nil, bad("", "header does not start with '{' (got %q)", hb[0])
	}
	trimmed := bytes.TrimRight(hb, " ")
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "header JSON: %v", err)
	}
	h := &Header{byName: map[string]int{}}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("", "header JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, bad("", "header JSON: expected a key, got %v", tok)
		}
		if seen[key] {
			return nil, bad(key, "duplicate key in header")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, bad(key, "header JSON: %v", err)
		}
		if key == "__metadata__" {
			md, err := parseMetadata(raw)
			if err != nil {
				return nil, bad("", "__metadata__: %v", err)
			}
			h.Metadata = md
			continue
		}
		if err := checkObjectKeys(raw, "dtype", "shape", "data_offsets"); err != nil {
			return nil, bad(key, "%v", err)
		}
		var rt rawTensor
		if err := jnf.DecodeJSON(raw, &rt); err != nil {
			return nil, bad(key, "entry: %v", err)
		}
		t, err := validateTensor(key, rt)
		if err != nil {
			return nil, bad(key, "%v", err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "header JSON: %v", err)
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return nil, bad("", "header JSON: trailing data after the object")
	}
	// And the strict JSON rules (jnf.CheckJSON): encoding/json replaces
	// invalid UTF-8 in a tensor name with U+FFFD.
	if err := jnf.CheckJSON(trimmed); err != nil {
		return nil, bad("", "header JSON: %v", err)
	}
	sort.Slice(h.Tensors, func(i, j int) bool { return h.Tensors[i].Name < h.Tensors[j].Name })
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
	}
	return h, nil
}

// checkObjectKeys requires raw to be an object with exactly the given keys,
// each once.
func checkObjectKeys(raw json.RawMessage, keys ...string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return fmt.Errorf("entry is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		if seen[k] {
			return fmt.Errorf("duplicate field %q", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if !seen[k] {
			return fmt.Errorf("missing field %q", k)
		}
	}
	return nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if err := checkObjectKeys(raw); err != nil {
		return nil, err
	}
	var md map[string]string
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("want a map of strings to strings: %v", err)
	}
	return md, nil
}

func validateTensor(name string, rt rawTensor) (Tensor, error) {
	if name == "" {
		return Tensor{}, fmt.Errorf("empty tensor name")
	}
	dt, err := jnf.ParseDType(rt.DType)
	if err != nil {
		return Tensor{}, err
	}
	if len(rt.DataOffsets) != 2 {
		return Tensor{}, fmt.Errorf("data_offsets has %d values, want 2", len(rt.DataOffsets))
	}
	b, e := rt.DataOffsets[0], rt.DataOffsets[1]
	if b < 0 || e < b {
		return Tensor{}, fmt.Errorf("data_offsets [%d,%d) are not a valid range", b, e)
	}
	numel := uint64(1)
	for i, d := range rt.Shape {
		if d < 0 {
			return Tensor{}, fmt.Errorf("shape[%d] = %d is negative", i, d)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return Tensor{}, fmt.Errorf("shape %v overflows", rt.Shape)
		}
		numel = lo
	}
	hi, want := bits.Mul64(numel, uint64(dt.Size()))
	if hi != 0 || want > math.MaxInt64 {
		return Tensor{}, fmt.Errorf("shape %v × %s overflows", rt.Shape, dt)
	}
	if uint64(e-b) != want {
		return Tensor{}, fmt.Errorf("shape %v × %s (%d bytes) ≠ data_offsets span %d", rt.Shape, dt, want, e-b)
	}
	shape := rt.Shape
	if shape == nil {
		shape = []int64{}
	}
	return Tensor{Name: name, DType: dt, Shape: shape, Begin: b, End: e}, nil
}

// File is an open, validated safetensors file.
type File struct {
	*Header
	Path string
	Size int64
	f    ReaderAtCloser
}

// ReaderAtCloser is what a File reads from: an open file, or bytes made on
// demand (a synthetic shard never written out: NewReaderFile).
type ReaderAtCloser interface {
	io.ReaderAt
	io.Closer
}

// Open opens and validates path, which must be a regular file (a FIFO or
// device is refused without blocking on it).
func Open(path string) (*File, error) {
	f, _, err := jnf.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	sf, err := NewFile(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

// NewFile validates the header of f, an open regular file, and returns it
// as a File that owns f. On error f is left open. path names the file in
// errors.
func NewFile(f *os.File, path string) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &jnf.NotRegularError{Path: path, Mode: st.Mode()}
	}
	h, err := ReadHeader(f, st.Size(), path)
	if err != nil {
		return nil, err
	}
	return &File{Header: h, Path: path, Size: st.Size(), f: f}, nil
}

// NewReaderFile validates the header of the size bytes r holds and returns
// them as a File that owns r (on error r is left open). It is NewFile for
// content that is not a file of its own: path names it in errors.
func NewReaderFile(r ReaderAtCloser, size int64, path string) (*File, error) {
	h, err := ReadHeader(r, size, path)
	if err != nil {
		return nil, err
	}
	return &File{Header: h, Path: path, Size: size, f: r}, nil
}

func (f *File) Close() error { return f.f.Close() }

// ReadAt reads from the underlying file.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Section returns a reader over a tensor's bytes.
func (f *File) Section(t Tensor) *io.SectionReader { return io.NewSectionReader(f.f, t.Begin, t.Len()) }

// ReadTensor reads a whole tensor.
func (f *File) ReadTensor(name string) (Tensor, []byte, error) {
	t, ok := f.Lookup(name)
	if !ok {
		return Tensor{}, nil, fmt.Errorf("safetensors %s: no tensor %q", f.Path, name)
	}
	b := make([]byte, t.Len())
	if _, err := f.f.ReadAt(b, t.Begin); err != nil {
		return Tensor{}, nil, fmt.Errorf("safetensors %s: tensor %q at offset %d: %w", f.Path, name, t.Begin, err)
	}
	return t, b, nil
}

// Names lists the tensor names (sorted).
func (h *Header) Names() []string {
	out := make([]string, len(h.Tensors))
	for i, t := range h.Tensors {
		out[i] = t.Name
	}
	return out
}
