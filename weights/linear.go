package weights

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Linear is a verified matrix as a linear layer multiplies by it: its
// values (BF16 or F32), or, for a block-FP8 checkpoint, its F8_E4M3 codes
// together with the scales of its blocks (weight_scale_inv, one per
// BlockN×BlockK block). Only this package makes a quantised one, from
// records of one checkpoint that belong together; the zero Linear is
// unusable.
type Linear struct {
	w, s   View
	bn, bk int
}

// PlainLinear is a matrix stored in a float type (BF16, F16, F32). An
// F8_E4M3 view is refused: its values mean nothing without its scales.
func PlainLinear(v View) (Linear, error) {
	if v.dtype == jnf.F8E4 || v.dtype == jnf.F8E5 {
		return Linear{}, fmt.Errorf("tensor %s is %s: it is multiplied only with its weight_scale_inv", v.name, v.dtype)
	}
	return Linear{w: v}, nil
}

// Values is the matrix's values: the float values of a plain matrix, the
// E4M3 codes of a quantised one.
func (l Linear) Values() View { return l.w }

// Name is the matrix's name.
func (l Linear) Name() string { return l.w.name }

// Quantized reports whether the matrix is block-FP8.
func (l Linear) Quantized() bool { return l.bn > 0 }

// Scales is the per-block scales of a quantised matrix
// ([ceil(rows/BlockN), ceil(cols/BlockK)], F32 or BF16) and the block
// size; the zero View and 0, 0 for a plain one.
func (l Linear) Scales() (scales View, blockN, blockK int) { return l.s, l.bn, l.bk }

// ScaleName is the name of the weight_scale_inv tensor of a quantised
// matrix named weight ("….weight" → "….weight_scale_inv").
func ScaleName(weight string) string { return weight + "_scale_inv" }

// BlockLinear pairs a block-FP8 matrix with its scales: w must be the
// F8_E4M3 tensor X.weight and scale the tensor X.weight_scale_inv of the
// same checkpoint, whose config gives the block size; the scales' shape
// must be the blocks' and every scale finite. (The codes were checked for
// NaN when w was minted.)
func BlockLinear(w, scale VerifiedTensor) (Linear, error) {
	wr, sr := w.rec(), scale.rec()
	if !wr.root.Equal(sr.root) {
		return Linear{}, fmt.Errorf("tensor %s and %s come from two checkpoints", wr.name, sr.name)
	}
	if want := ScaleName(wr.name); sr.name != want {
		return Linear{}, fmt.Errorf("tensor %s: its scales are %s, not %s", wr.name, want, sr.name)
	}
	l := Linear{w: wr.views[0], s: sr.views[0], bn: wr.blk[0], bk: wr.blk[1]}
	if err := l.check(); err != nil {
		return Linear{}, err
	}
	return l, nil
}

// check checks a quantised Linear's dtypes, shapes and scale values.
func (l Linear) check() error {
	if l.bn <= 0 || l.bk <= 0 {
		return fmt.Errorf("%s is %s, but config.json has no block-FP8 quantization_config", l.w.name, l.w.dtype)
	}
	if l.w.dtype != jnf.F8E4 || len(l.w.shape) != 2 {
		return fmt.Errorf("%s: %s%v, want a 2-D F8_E4M3 matrix", l.w.name, l.w.dtype, l.w.shape)
	}
	want := []int64{ceilDiv(l.w.shape[0], int64(l.bn)), ceilDiv(l.w.shape[1], int64(l.bk))}
	if len(l.s.shape) != 2 || l.s.shape[0] != want[0] || l.s.shape[1] != want[1] {
		return fmt.Errorf("%s: shape %v, want %v (%v in blocks of %d×%d)", l.s.name, l.s.shape, want, l.w.shape, l.bn, l.bk)
	}
	return checkScales(l.s)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkScales refuses a scale tensor that is not F32 or BF16 or holds a
// non-finite value.
func checkScales(s View) error {
	d := s.data
	var size int
	var exp uint32 // the exponent bits: all set is NaN or ±Inf
	switch s.dtype {
	case jnf.F32:
		size, exp = 4, 0x7F800000
	case jnf.BF16:
		size, exp = 2, 0x7F80
	case jnf.F16:
		size, exp = 2, 0x7C00
	default:
		return fmt.Errorf("%s: dtype %s, want F32, BF16 or F16", s.name, s.dtype)
	}
	for i := 0; i+size <= len(d); i += size {
		u := uint32(d[i]) | uint32(d[i+1])<<8
		if size == 4 {
			u |= uint32(d[i+2])<<16 | uint32(d[i+3])<<24
		}
		if u&exp == exp {
			return fmt.Errorf("%s: scale %d (byte %d, bits %#x) is not finite: %w", s.name, i/size, i, u, ErrNonFinite)
		}
	}
	return nil
}

// ErrNonFinite marks a block-FP8 record that holds a NaN code or a
// non-finite scale: a checkpoint Tarfa refuses (convert refuses it too).
var ErrNonFinite = errors.New("block-FP8 values must be finite")

// nanCode returns the offset of the first E4M3 NaN code (0x7F or 0xFF) in
// d, or −1.
func nanCode(d string) int {
	i, j := strings.IndexByte(d, 0x7F), strings.IndexByte(d, 0xFF)
	switch {
	case i < 0:
		return j
	case j < 0:
		return i
	}
	return min(i, j)
}

// expertLinears returns the three matrices of an expert record's views:
// three plain parts, or three F8_E4M3 parts and their three scales (the
// block-FP8 layout of jnf/SPEC.md), checked against the block size.
func expertLinears(name string, views []View, blk [2]int) ([3]Linear, error) {
	var out [3]Linear
	switch len(views) {
	case 3:
		for i, v := range views {
			l, err := PlainLinear(v)
			if err != nil {
				return out, err
			}
			out[i] = l
		}
	case 6:
		for i := range 3 {
			if want := views[i].name + ".weight_scale_inv"; views[i+3].name != want {
				return out, fmt.Errorf("expert %s: part %d is %s, want %s", name, i+3, views[i+3].name, want)
			}
			out[i] = Linear{w: views[i], s: views[i+3], bn: blk[0], bk: blk[1]}
			if err := out[i].check(); err != nil {
				return out, fmt.Errorf("expert %s: %w", name, err)
			}
		}
	default:
		return out, fmt.Errorf("expert %s has %d parts, want 3 (or 6 for block-FP8)", name, len(views))
	}
	return out, nil
}

// linkViews makes an expert record's matrices use its views as they are
// now (minted, with the arena buffer they are valid in).
func (r *record) linkViews() {
	for i := range r.lins {
		r.lins[i].w = r.views[i]
		if len(r.views) == 6 {
			r.lins[i].s = r.views[i+3]
		}
	}
}
