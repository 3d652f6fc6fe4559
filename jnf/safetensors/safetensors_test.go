package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

// raw builds a file from a literal header and a data buffer.
func raw(header string, data []byte) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func parse(b []byte) (*Header, error) {
	return ReadHeader(bytes.NewReader(b), int64(len(b)), "t.safetensors")
}

func TestRoundTrip(t *testing.T) {
	specs := []Spec{
		{Name: "b", DType: jnf.F32, Shape: []int64{2}},
		{Name: "a", DType: jnf.BF16, Shape: []int64{3, 2}},
		{Name: "scalar", DType: jnf.I64, Shape: nil},
		{Name: "empty", DType: jnf.F32, Shape: []int64{0, 4}},
	}
	content := map[string][]byte{}
	var buf bytes.Buffer
	err := Write(&buf, specs, map[string]string{"format": "pt"}, func(s Spec, w io.Writer) error {
		b := bytes.Repeat([]byte{byte(len(s.Name))}, int(s.bytes()))
		content[s.Name] = b
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d not padded to 8", n)
	}
	h, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.Names(), ","); got != "a,b,empty,scalar" {
		t.Errorf("names %s", got)
	}
	if h.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", h.Metadata)
	}
	for name, want := range content {
		tt, _ := h.Lookup(name)
		if got := b[tt.Begin:tt.End]; !bytes.Equal(got, want) {
			t.Errorf("%s: bytes differ", name)
		}
	}
	// Deterministic.
	var again bytes.Buffer
	Write(&again, specs, map[string]string{"format": "pt"}, func(s Spec, w io.Writer) error {
		_, err := w.Write(content[s.Name])
		return err
	})
	if !bytes.Equal(again.Bytes(), b) {
		t.Error("two writes of the same tensors differ")
	}
	// Writer checks the byte count.
	err = Write(io.Discard, specs[:1], nil, func(s Spec, w io.Writer) error { _, err := w.Write([]byte{1}); return err })
	if err == nil || !strings.Contains(err.Error(), "wrote 1 bytes, want 8") {
		t.Errorf("short fill: %v", err)
	}
}

func TestRejections(t *testing.T) {
	eight := make([]byte, 8)
	cases := []struct {
		name, want string
		file       []byte
	}{
		{"short file", "shorter than the 8-byte", []byte{1, 2}},
		{"absurd length", "exceeds the 100000000-byte limit", append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, eight...)},
		{"length past file", "exceeds the file", append([]byte{100, 0, 0, 0, 0, 0, 0, 0}, eight...)},
		{"not an object", "does not start with '{'", raw(`  {}`, nil)},
		{"bad json", "header JSON", raw(`{"a":`, nil)},
		{"duplicate key", `tensor "a": duplicate key`, raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, eight)},
		{"unknown dtype", `unknown dtype "Q4"`, raw(`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, eight)},
		{"span mismatch", "≠ data_offsets span 8", raw(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight)},
		{"negative dim", "negative", raw(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, eight)},
		{"overflow", "overflows", raw(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, eight)},
		{"past buffer", "past the data buffer", raw(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, eight)},
		{"overlap", "overlap", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight)},
		{"gap", "gap", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight)},
		{"trailing", "trailing bytes", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight)},
		{"missing field", `missing field "shape"`, raw(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, eight)},
		{"extra field", "unknown field", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, eight)},
		{"bad metadata", "__metadata__", raw(`{"__metadata__":{"a":1}}`, nil)},
		{"trailing json", "trailing data", raw(`{}{}`, nil)},
		{"invalid UTF-8 name", "not valid UTF-8", raw("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight)},
		{"inverted offsets", "not a valid range", raw(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, eight)},
	}
	for _, tc := range cases {
		_, err := parse(tc.file)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.safetensors") {
			t.Errorf("%s: error %q does not contain %q and the file name", tc.name, err, tc.want)
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v is not ErrFormat", tc.name, err)
		}
	}
	// Space padding is allowed.
	if _, err := parse(raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   `, eight)); err != nil {
		t.Errorf("padded header rejected: %v", err)
	}
}

// hugeFile is a ReaderAt of any claimed size that serves the 8-byte length
// field and fails the test on any other read.
type hugeFile struct {
	t   *testing.T
	len uint64
}

func (h hugeFile) ReadAt(p []byte, off int64) (int, error) {
	if off != 0 || len(p) != 8 {
		h.t.Fatalf("read of %d bytes at offset %d: the header was read before its length was checked", len(p), off)
	}
	binary.LittleEndian.PutUint64(p, h.len)
	return 8, nil
}

// The header length is checked against MaxHeaderSize (the reference
// implementation's 100,000,000 bytes) before anything is allocated or read,
// however large the file.
func TestHeaderLengthCheckedBeforeReading(t *testing.T) {
	for _, n := range []uint64{MaxHeaderSize + 1, 1 << 40, 1<<63 + 5, 1<<64 - 1} {
		_, err := ReadHeader(hugeFile{t, n}, 1<<62, "big.safetensors")
		if err == nil || !strings.Contains(err.Error(), "exceeds the 100000000-byte limit") {
			t.Errorf("header length %d: %v", n, err)
		}
	}
}

func TestOpenRefusesNonRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "model.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var nr *jnf.NotRegularError
	if _, err := Open(fifo); !errors.As(err, &nr) {
		t.Errorf("Open of a FIFO: %v, want a NotRegularError", err)
	}
	if _, err := Open(t.TempDir()); !errors.As(err, &nr) {
		t.Errorf("Open of a directory: %v, want a NotRegularError", err)
	}
}

func TestFixtureShards(t *testing.T) {
	paths, _ := filepath.Glob("../../validation/testdata/fixtures/*/checkpoint*/*.safetensors")
	if len(paths) < 5 {
		t.Fatalf("found only %d fixture shards", len(paths))
	}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			t.Error(err)
			continue
		}
		if len(f.Tensors) == 0 {
			t.Errorf("%s: no tensors", p)
		}
		name := f.Tensors[0].Name
		tt, b, err := f.ReadTensor(name)
		if err != nil || int64(len(b)) != tt.Len() {
			t.Errorf("%s: ReadTensor(%s): %v", p, name, err)
		}
		f.Close()
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.safetensors")
	err := WriteFile(p, []Spec{{Name: "a", DType: jnf.U8, Shape: []int64{3}}}, nil, func(s Spec, w io.Writer) error {
		_, err := w.Write([]byte{1, 2, 3})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, b, _ := f.ReadTensor("a"); !bytes.Equal(b, []byte{1, 2, 3}) {
		t.Errorf("got %v", b)
	}
	// A failing fill leaves no file behind.
	q := filepath.Join(dir, "y.safetensors")
	WriteFile(q, []Spec{{Name: "a", DType: jnf.U8, Shape: []int64{3}}}, nil, func(Spec, io.Writer) error { return io.ErrUnexpectedEOF })
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory has %d entries after a failed write", len(ents))
	}
}

func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(raw(`{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[0,2]}}  `, make([]byte, 2)))
	f.Add(raw(`{}`, nil))
	// Hostile shapes: huge dimensions, products that overflow int64 (alone
	// and with the dtype size), offsets near the int64 limit, and huge or
	// lying header lengths.
	f.Add(raw(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(raw(`{"a":{"dtype":"BF16","shape":[4611686018427387904],"data_offsets":[0,0]}}`, nil))
	f.Add(raw(`{"a":{"dtype":"F64","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}}`, nil))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}`, nil))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[9223372036854775807,9223372036854775807]}}`, nil))
	f.Add(raw(`{"a":{"dtype":"F32","shape":[-1,-4],"data_offsets":[0,16]}}`, make([]byte, 16)))
	f.Add(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, `{}`...))
	f.Add(append([]byte{0x00, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}, `{}`...)) // 100,000,000: the limit, past the file
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parse(b)
		if err != nil {
			return
		}
		// Invariants of an accepted header.
		end := h.DataStart
		for _, tt := range h.Tensors {
			if tt.Begin < h.DataStart || tt.End > int64(len(b)) || tt.End-tt.Begin != tt.Numel()*tt.DType.Size() {
				t.Fatalf("accepted inconsistent tensor %+v", tt)
			}
			end = max(end, tt.End)
		}
		if end != int64(len(b)) {
			t.Fatalf("accepted trailing bytes: end %d, size %d", end, len(b))
		}
	})
}
