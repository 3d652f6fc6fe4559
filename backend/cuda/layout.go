package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/tarfa-ai/tarfa/backend"
)

// Where a routed expert's bytes lie in a device slot: plain Go (no CUDA
// call), so that it is tested in every build.

// slotLayout is where an expert's parts lie in a slot: part j (the
// record's order: gate, up, down, then for block-FP8 their scales as
// stored) at off[j], in size bytes; segs are the ranges of the slot
// (offset, length) the device hash reads, whose concatenation is the
// record.
type slotLayout struct {
	parts [6][]byte // parts[:n]
	off   [6]int64
	n     int
	segs  [3][2]int64
	size  int64
}

// add places part b at the slot's current end.
func (l *slotLayout) add(b []byte) {
	l.parts[l.n], l.off[l.n] = b, l.size
	l.n++
	l.size += int64(len(b))
}

// layout places an expert's parts in one slot. The three matrices of a
// BF16 or F32 expert each start at a 256-byte boundary (three segments).
// A block-FP8 expert's codes lie as the record has them, one after the
// other from 0, and its scales likewise from the next 256-byte boundary
// (two segments: the device hash reads at most three), which needs the
// three scale tensors stored in one dtype (the releases' are): errMixed
// otherwise.
func layout(v *backend.Expert) (slotLayout, error) {
	ms := [3]*backend.Mat{&v.Gate.Host, &v.Up.Host, &v.Down.Host}
	var l slotLayout
	pad := func() { l.size = (l.size + 255) &^ 255 }
	if !ms[0].Quantized() {
		for j, m := range ms {
			l.segs[j] = [2]int64{l.size, int64(len(matBytes(m)))}
			l.add(matBytes(m))
			pad()
		}
		return l, nil
	}
	for _, m := range ms {
		if !m.Quantized() || m.ScaleDType != ms[0].ScaleDType {
			return slotLayout{}, fmt.Errorf("cuda: %v: its matrices are %s, %s and %s: %w", v.ID, describe(ms[0]), describe(ms[1]), describe(ms[2]), errMixed)
		}
		l.add(m.F8)
	}
	l.segs[0] = [2]int64{0, l.size}
	pad()
	s0 := l.size
	for _, m := range ms {
		l.add(m.ScaleData)
	}
	l.segs[1] = [2]int64{s0, l.size - s0}
	pad()
	return l, nil
}

// errMixed is layout's refusal of a block-FP8 expert whose scale tensors
// are stored in different dtypes.
var errMixed = errors.New("a device slot holds block-FP8 scales of one dtype")

func describe(m *backend.Mat) string {
	switch {
	case m.Quantized():
		return fmt.Sprintf("block-FP8 with %s scales", m.ScaleDType)
	case m.F32 != nil:
		return "F32"
	}
	return "BF16"
}

func matBytes(m *backend.Mat) []byte {
	if m.F32 != nil {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.F32))), 4*len(m.F32))
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.BF16))), 2*len(m.BF16))
}

// slotBytes is the size of a slot for an expert of n bytes: layout pads
// each of its three matrices to 256 bytes (a block-FP8 expert: its codes
// and its scales, two paddings).
func slotBytes(n int64) int64 { return (n+255)&^255 + 3*256 }
