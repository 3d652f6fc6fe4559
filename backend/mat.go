package backend

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
)

// Mat is a weight matrix of Rows×Cols exact values, row-major, stored as
// BF16 bit patterns, F32, or block-FP8 (exactly one of BF16, F32 and F8 is
// set). It views the verified bytes it was made from in place whenever
// their alignment allows: those bytes are immutable (weights.View), so
// nothing may write through BF16, F32 or F8.
//
// A block-FP8 matrix (a fine-grained FP8 checkpoint's) holds E4M3 codes in
// F8 and, in Scale, the float32 value of each BlockN×BlockK block's scale
// (weight_scale_inv, widened exactly from F32 or BF16), row-major over
// ScaleCols() = ceil(Cols/BlockK) blocks a row of blocks; it is multiplied
// by the canonical block-FP8 product (EXACTNESS.md), never widened.
type Mat struct {
	Name       string
	Rows, Cols int
	BF16       []uint16
	F32        []float32

	F8             []byte
	Scale          []float32
	BlockN, BlockK int
	// ScaleData are the scales as the record stores them (ScaleDType: F32,
	// BF16 or F16), viewed in place: what a device copies with the codes
	// and hashes against the record's digest.
	ScaleData  []byte
	ScaleDType jnf.DType
}

// Quantized reports whether m is block-FP8.
func (m *Mat) Quantized() bool { return m.BlockN > 0 }

// StoredBytes is the size of m as its record stores it: BF16 or F32
// values, or E4M3 codes and their scales as stored (ScaleData). An
// expert's three sum to its record's length.
func (m *Mat) StoredBytes() int64 {
	n := int64(m.Rows) * int64(m.Cols)
	switch {
	case m.Quantized():
		return n + int64(len(m.ScaleData))
	case m.F32 != nil:
		return 4 * n
	}
	return 2 * n
}

// ScaleCols is the number of blocks along a row of a block-FP8 matrix.
func (m *Mat) ScaleCols() int { return (m.Cols + m.BlockK - 1) / m.BlockK }

// Init makes m view t as a Rows×Cols matrix (t may be 2-D [rows, cols] or
// 3-D [rows, 1, cols]-like with the same element count; the caller checks
// shapes). Only BF16 and F32 are accepted. It does not allocate when the
// data is suitably aligned on a little-endian machine.
func (m *Mat) Init(t weights.View, rows, cols int) error {
	if rows < 0 || cols < 0 || (cols != 0 && rows > math.MaxInt/cols) {
		return fmt.Errorf("tensor %s: %d×%d overflows", t.Name(), rows, cols)
	}
	if n := rows * cols; int64(n) != t.Numel() {
		return fmt.Errorf("tensor %s: shape %v has %d elements, want %d×%d", t.Name(), t.Shape(), t.Numel(), rows, cols)
	}
	*m = Mat{Name: t.Name(), Rows: rows, Cols: cols}
	var err error
	switch t.DType() {
	case jnf.BF16:
		m.BF16, err = U16s(t)
	case jnf.F32:
		m.F32, err = F32s(t)
	default:
		return fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", t.Name(), t.DType())
	}
	return err
}

// InitLinear makes m the matrix l as a Rows×Cols matrix: Init for a plain
// one; for a block-FP8 one, its codes viewed in place and its scales
// widened to float32.
func (m *Mat) InitLinear(l weights.Linear, rows, cols int) error {
	if !l.Quantized() {
		return m.Init(l.Values(), rows, cols)
	}
	t := l.Values()
	if rows <= 0 || cols <= 0 || rows > math.MaxInt/cols || t.Dims() != 2 || t.Dim(0) != int64(rows) || t.Dim(1) != int64(cols) {
		return fmt.Errorf("tensor %s: shape %v, want [%d %d]", t.Name(), t.Shape(), rows, cols)
	}
	sv, bn, bk := l.Scales()
	// F32 scales (the official releases') are viewed in place: an expert
	// is viewed on every use, and its scales need no copy then.
	var sc []float32
	var err error
	if sv.DType() == jnf.F32 {
		sc, err = F32s(sv)
	} else {
		sc, err = Vector(sv)
	}
	if err != nil {
		return err
	}
	if want := ((rows + bn - 1) / bn) * ((cols + bk - 1) / bk); len(sc) != want {
		return fmt.Errorf("tensor %s: %d scales, want %d", sv.Name(), len(sc), want)
	}
	d := t.Data()
	if len(d) != rows*cols {
		return fmt.Errorf("tensor %s: %d bytes, want %d", t.Name(), len(d), rows*cols)
	}
	sd := sv.Data()
	*m = Mat{Name: t.Name(), Rows: rows, Cols: cols, F8: unsafe.Slice(unsafe.StringData(d), len(d)), Scale: sc, BlockN: bn, BlockK: bk,
		ScaleData: unsafe.Slice(unsafe.StringData(sd), len(sd)), ScaleDType: sv.DType()}
	return nil
}

// Row widens row r of m to float32 (exact) into dst. A block-FP8 matrix
// has no exact float32 rows: Row panics on one (the engine refuses an
// FP8 embedding table before it gets here).
func (m *Mat) Row(r int, dst []float32) {
	if m.Quantized() {
		panic("backend: Row of the block-FP8 matrix " + m.Name)
	}
	dst = dst[:m.Cols]
	if m.F32 != nil {
		copy(dst, m.F32[r*m.Cols:(r+1)*m.Cols])
		return
	}
	src := m.BF16[r*m.Cols : (r+1)*m.Cols]
	for i, u := range src {
		dst[i] = bf16(u)
	}
}

func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// elements checks t's byte length against its element count of size-byte
// elements and returns the count.
func elements(t weights.View, dt jnf.DType) (int, error) {
	if t.DType() != dt {
		return 0, fmt.Errorf("tensor %s: dtype %s, want %s", t.Name(), t.DType(), dt)
	}
	n := t.Numel()
	if n < 0 || n > math.MaxInt/int64(dt.Size()) || int64(len(t.Data())) != n*dt.Size() {
		return 0, fmt.Errorf("tensor %s: %d bytes, want %d elements of %s", t.Name(), len(t.Data()), n, dt)
	}
	return int(n), nil
}

// U16s returns the BF16 bit patterns of t, viewing its verified bytes in
// place when possible (read-only: never write the result).
func U16s(t weights.View) ([]uint16, error) {
	n, err := elements(t, jnf.BF16)
	if err != nil || n == 0 {
		return []uint16{}, err
	}
	d := t.Data()
	p := unsafe.StringData(d)
	if littleEndian && uintptr(unsafe.Pointer(p))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(p)), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(d[2*i]) | uint16(d[2*i+1])<<8
	}
	return out, nil
}

// F32s returns the float32 values of t, viewing its verified bytes in place
// when possible (read-only: never write the result).
func F32s(t weights.View) ([]float32, error) {
	n, err := elements(t, jnf.F32)
	if err != nil || n == 0 {
		return []float32{}, err
	}
	d := t.Data()
	p := unsafe.StringData(d)
	if littleEndian && uintptr(unsafe.Pointer(p))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(p)), n), nil
	}
	out := make([]float32, n)
	for i := range out {
		u := uint32(d[4*i]) | uint32(d[4*i+1])<<8 | uint32(d[4*i+2])<<16 | uint32(d[4*i+3])<<24
		out[i] = math.Float32frombits(u)
	}
	return out, nil
}

// Vector returns t (BF16 or F32, any shape) widened to a new float32 slice.
func Vector(t weights.View) ([]float32, error) {
	switch t.DType() {
	case jnf.F32:
		v, err := F32s(t)
		if err != nil {
			return nil, err
		}
		return append([]float32(nil), v...), nil
	case jnf.BF16:
		u, err := U16s(t)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(u))
		for i, x := range u {
			out[i] = bf16(x)
		}
		return out, nil
	case jnf.F16:
		n, err := elements(t, jnf.F16)
		if err != nil {
			return nil, err
		}
		d, out := t.Data(), make([]float32, n)
		for i := range out {
			out[i] = F16(uint16(d[2*i]) | uint16(d[2*i+1])<<8)
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %s: dtype %s, want BF16 or F32", t.Name(), t.DType())
}

// F16 is the exact float32 value of an IEEE binary16 bit pattern (every
// half-precision value, subnormals included, is a float32).
func F16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	e, m := uint32(h>>10)&0x1F, uint32(h)&0x3FF
	switch {
	case e == 0x1F: // Inf, NaN
		return math.Float32frombits(sign | 0x7F800000 | m<<13)
	case e == 0 && m == 0:
		return math.Float32frombits(sign)
	case e == 0: // subnormal: m·2^-24, normalised for float32
		for m&0x400 == 0 {
			m <<= 1
			e--
		}
		e++
		m &= 0x3FF
	}
	return math.Float32frombits(sign | (e+127-15)<<23 | m<<13)
}
