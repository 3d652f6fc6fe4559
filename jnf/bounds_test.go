package jnf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// preambleReader serves a preamble and reports every read beyond it: a
// file of any declared size whose table the reader must not allocate.
type preambleReader struct {
	p      []byte
	beyond int64 // bytes asked for past the preamble
}

func (r *preambleReader) ReadAt(b []byte, off int64) (int, error) {
	if end := off + int64(len(b)); end > PreambleSize {
		r.beyond += end - max(off, PreambleSize)
	}
	if off >= int64(len(r.p)) {
		return 0, io.EOF
	}
	n := copy(b, r.p[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// TestTableLengthBounded: a preamble whose table length exceeds
// MaxTableSize or the file is refused before anything is allocated or read
// for the table, with a FormatError at the field's offset (24) — also for
// lengths that are negative as int64.
func TestTableLengthBounded(t *testing.T) {
	good := buildFile(sampleTable())
	for _, c := range []struct {
		name string
		tl   uint64
		size int64
	}{
		{"one byte over the limit", MaxTableSize + 1, 1 << 40},
		{"2^63 (negative as int64)", 1 << 63, 1 << 40},
		{"2^64−1", 1<<64 - 1, 1 << 40},
		{"one byte past the end of the file", uint64(len(good)) - PreambleSize + 1, int64(len(good))},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := bytes.Clone(good[:PreambleSize])
			binary.LittleEndian.PutUint64(p[24:], c.tl)
			r := &preambleReader{p: p}
			var err error
			func() {
				defer func() {
					if v := recover(); v != nil {
						err = fmt.Errorf("panic: %v", v)
					}
				}()
				_, err = ParseTable(r, c.size, "layer-00001.jnf")
			}()
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Offset != 24 || !strings.Contains(fe.Rule, fmt.Sprint(c.tl)) || !strings.Contains(fe.Rule, "limit") {
				t.Fatalf("table length %d in a %d-byte file: %v, want a FormatError at offset 24", c.tl, c.size, err)
			}
			if r.beyond != 0 {
				t.Errorf("read %d bytes of a table it refused", r.beyond)
			}
		})
	}
}

// TestNameLength: names of 1 to MaxNameLen bytes are valid, longer ones and
// the empty name are not, and a record table with a long name is refused.
func TestNameLength(t *testing.T) {
	for _, n := range []int{1, MaxNameLen} {
		if err := ValidName(strings.Repeat("a", n)); err != nil {
			t.Errorf("a name of %d bytes: %v", n, err)
		}
	}
	for _, n := range []int{0, MaxNameLen + 1, 1 << 16} {
		err := ValidName(strings.Repeat("a", n))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("name of %d bytes, want 1 to %d", n, MaxNameLen)) {
			t.Errorf("a name of %d bytes: %v", n, err)
		}
	}
	for _, c := range []struct {
		what   string
		mutate func(*Table)
	}{
		{"record", func(t *Table) { t.Records[0].Name = strings.Repeat("m", MaxNameLen+1) }},
		{"source shard", func(t *Table) {
			long := strings.Repeat("s", MaxNameLen+1)
			t.Sources[0].File = long
			t.Records[0].Source[0].File = long
			for i := range t.Records[1].Parts {
				t.Records[1].Parts[i].Source.File = long
			}
		}},
	} {
		tb := sampleTable()
		c.mutate(tb)
		b := buildFile(tb)
		_, err := ParseTable(bytes.NewReader(b), int64(len(b)), "layer-00001.jnf")
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), fmt.Sprintf("name of %d bytes", MaxNameLen+1)) {
			t.Errorf("a %s name of %d bytes: %v", c.what, MaxNameLen+1, err)
		}
	}
}
