package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Spec describes a tensor to write.
type Spec struct {
	Name  string
	DType jnf.DType
	Shape []int64
}

func (s Spec) bytes() int64 {
	n := s.DType.Size()
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// EncodeHeader returns the length-prefixed header for tensors laid out in
// name order, padded with spaces to a multiple of 8 bytes like the reference
// implementation. The output is deterministic.
func EncodeHeader(specs []Spec, metadata map[string]string) ([]byte, []Spec, error) {
	sorted := append([]Spec(nil), specs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(metadata[k])
			buf.Write(kb)
			buf.WriteByte(':')
			buf.Write(vb)
		}
		buf.WriteByte('}')
		first = false
	}
	off := int64(0)
	for i, s := range sorted {
		if !s.DType.Valid() {
			return nil, nil, fmt.Errorf("tensor %q: unknown dtype %q", s.Name, s.DType)
		}
		if i > 0 && sorted[i-1].Name == s.Name {
			return nil, nil, fmt.Errorf("tensor %q given twice", s.Name)
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		nb, _ := json.Marshal(s.Name)
		shape := s.Shape
		if shape == nil {
			shape = []int64{}
		}
		sb, _ := json.Marshal(shape)
		n := s.bytes()
		fmt.Fprintf(&buf, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, nb, s.DType, sb, off, off+n)
		off += n
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	out := make([]byte, 8, 8+buf.Len())
	binary.LittleEndian.PutUint64(out, uint64(buf.Len()))
	return append(out, buf.Bytes()...), sorted, nil
}

// Write writes a complete safetensors stream. fill is called once per tensor
// in layout (name) order and must write exactly that tensor's bytes.
func Write(w io.Writer, specs []Spec, metadata map[string]string, fill func(s Spec, w io.Writer) error) error {
	hdr, sorted, err := EncodeHeader(specs, metadata)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for _, s := range sorted {
		cw := &countWriter{w: w}
		if err := fill(s, cw); err != nil {
			return fmt.Errorf("tensor %q: %w", s.Name, err)
		}
		if cw.n != s.bytes() {
			return fmt.Errorf("tensor %q: wrote %d bytes, want %d", s.Name, cw.n, s.bytes())
		}
	}
	return nil
}

// WriteFile writes path atomically (jnf.CreateAtomic: temporary file in the
// same directory, fsync, rename).
func WriteFile(path string, specs []Spec, metadata map[string]string, fill func(s Spec, w io.Writer) error) error {
	f, err := jnf.CreateAtomic(path, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 4<<20)
	if err := Write(bw, specs, metadata, fill); err != nil {
		f.Abort()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
