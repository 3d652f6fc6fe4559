package cuda

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/jnf"
)

// slotOf writes the parts of l where layout placed them and returns the
// bytes its segments read, in order.
func slotOf(l slotLayout) []byte {
	slot := make([]byte, l.size)
	for j, p := range l.parts[:l.n] {
		copy(slot[l.off[j]:], p)
	}
	var out []byte
	for _, g := range l.segs {
		out = append(out, slot[g[0]:g[0]+g[1]]...)
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestLayout: the segments the device hash reads are the record's bytes
// in order (gate, up, down, then a block-FP8 expert's scales as stored),
// every BF16 matrix and the FP8 codes and scales start on a 256-byte
// boundary, the slot fits slotBytes of the record, and a block-FP8 expert
// whose scales are stored in different dtypes is refused (errMixed).
func TestLayout(t *testing.T) {
	const I, H = 5, 7 // odd: nothing is aligned by chance
	var v backend.Expert
	u := func(b []byte) []uint16 {
		w := make([]uint16, len(b)/2)
		for i := range w {
			w[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
		}
		return w
	}
	var rec []byte
	for j, w := range []*backend.Weight{&v.Gate, &v.Up, &v.Down} {
		b := pattern(2*I*H, byte(j))
		rec = append(rec, b...)
		w.Host = backend.Mat{Rows: I, Cols: H, BF16: u(b)}
	}
	l, err := layout(&v)
	if err != nil {
		t.Fatal(err)
	}
	if got := slotOf(l); !bytes.Equal(got, rec) {
		t.Errorf("BF16: the segments read %d bytes, not the record's %d", len(got), len(rec))
	}
	for j := range 3 {
		if l.off[j]%256 != 0 {
			t.Errorf("BF16: part %d at %d", j, l.off[j])
		}
	}
	if l.size > slotBytes(int64(len(rec))) {
		t.Errorf("BF16: %d bytes in a slot of %d", l.size, slotBytes(int64(len(rec))))
	}

	for _, dt := range []jnf.DType{jnf.F32, jnf.BF16, jnf.F16} {
		esz := 4
		if dt != jnf.F32 {
			esz = 2
		}
		var v backend.Expert
		var codes, scales []byte
		for j, w := range []*backend.Weight{&v.Gate, &v.Up, &v.Down} {
			c, s := pattern(I*H, byte(10+j)), pattern(esz*3, byte(20+j))
			codes, scales = append(codes, c...), append(scales, s...)
			w.Host = backend.Mat{Rows: I, Cols: H, F8: c, BlockN: 3, BlockK: 4, ScaleData: s, ScaleDType: dt}
		}
		rec := append(codes, scales...)
		l, err := layout(&v)
		if err != nil {
			t.Fatal(err)
		}
		if got := slotOf(l); !bytes.Equal(got, rec) {
			t.Errorf("FP8 %s scales: the segments are not the record's bytes", dt)
		}
		if l.off[0] != 0 || l.off[3]%256 != 0 || l.off[4]-l.off[3] != int64(esz*3) {
			t.Errorf("FP8 %s scales: offsets %v", dt, l.off)
		}
		if l.size > slotBytes(int64(len(rec))) {
			t.Errorf("FP8 %s scales: %d bytes in a slot of %d", dt, l.size, slotBytes(int64(len(rec))))
		}
	}
	v.Gate.Host = backend.Mat{Rows: I, Cols: H, F8: pattern(I*H, 1), BlockN: 3, BlockK: 4, ScaleData: pattern(12, 2), ScaleDType: jnf.F32}
	v.Up.Host, v.Down.Host = v.Gate.Host, v.Gate.Host
	v.Down.Host.ScaleDType, v.Down.Host.ScaleData = jnf.BF16, pattern(6, 3)
	if _, err := layout(&v); !errors.Is(err, errMixed) {
		t.Errorf("scales of F32 and BF16 in one expert: %v, want errMixed", err)
	}
}
