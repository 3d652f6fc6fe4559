package convert

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// valueCheck looks at the bytes of one block-FP8 tensor (or expert part) as
// they are copied and refuses what no checkpoint may hold: an F8_E4M3 NaN
// code (0x7F, 0xFF: E4M3 has no infinity, every other code is a finite
// number) and a scale that is not finite. Every other value is the
// checkpoint's and is copied as it is.
type valueCheck struct {
	what  string    // e.g. "tensor model.layers.0.self_attn.q_proj.weight (model.safetensors)"
	dtype jnf.DType // F8_E4M3, or the scale's F32 / BF16
	scale bool
	n     int64  // bytes seen
	carry []byte // an element split between two writes
}

// newValueCheck returns the check for the bytes of a tensor or part, or nil
// when nothing is checked (every tensor of an unquantised checkpoint).
func newValueCheck(what string, dtype jnf.DType, name string) *valueCheck {
	switch {
	case dtype == jnf.F8E4:
		return &valueCheck{what: what, dtype: dtype}
	case strings.HasSuffix(name, ".weight"+jnf.ScaleSuffix) && jnf.ScaleDType(dtype):
		return &valueCheck{what: what, dtype: dtype, scale: true}
	}
	return nil
}

func (v *valueCheck) Write(p []byte) (int, error) {
	if v.dtype == jnf.F8E4 {
		// One byte an element: search for the two NaN codes at memchr
		// speed (a 120 GB checkpoint is mostly codes).
		i, j := bytes.IndexByte(p, 0x7F), bytes.IndexByte(p, 0xFF)
		if i < 0 || j >= 0 && j < i {
			i = j
		}
		if i >= 0 {
			v.n += int64(i)
			return 0, v.element(p[i : i+1])
		}
		v.n += int64(len(p))
		return len(p), nil
	}
	size := int(v.dtype.Size())
	all := p
	if len(v.carry) > 0 {
		k := min(size-len(v.carry), len(p))
		v.carry = append(v.carry, p[:k]...)
		if len(v.carry) < size {
			return len(all), nil
		}
		if err := v.element(v.carry); err != nil {
			return 0, err
		}
		v.carry = v.carry[:0]
		p = p[k:]
	}
	whole := len(p) / size * size
	for i := 0; i < whole; i += size {
		if err := v.element(p[i : i+size]); err != nil {
			return 0, err
		}
	}
	v.carry = append(v.carry, p[whole:]...)
	return len(all), nil
}

// element checks one element and counts its bytes.
func (v *valueCheck) element(b []byte) error {
	idx := v.n / v.dtype.Size()
	v.n += v.dtype.Size()
	switch v.dtype {
	case jnf.F8E4:
		if b[0]&0x7F == 0x7F {
			return fmt.Errorf("%s: element %d is %#02x, a NaN code of F8_E4M3: a block-FP8 weight must be finite", v.what, idx, b[0])
		}
	case jnf.F32:
		if bits := binary.LittleEndian.Uint32(b); bits&0x7F800000 == 0x7F800000 {
			return fmt.Errorf("%s: element %d is %v (F32 bits %#08x): a block-FP8 scale must be finite", v.what, idx, math.Float32frombits(bits), bits)
		}
	case jnf.BF16:
		if bits := binary.LittleEndian.Uint16(b); bits&0x7F80 == 0x7F80 {
			return fmt.Errorf("%s: element %d is %v (BF16 bits %#04x): a block-FP8 scale must be finite", v.what, idx, math.Float32frombits(uint32(bits)<<16), bits)
		}
	case jnf.F16:
		if bits := binary.LittleEndian.Uint16(b); bits&0x7C00 == 0x7C00 {
			return fmt.Errorf("%s: element %d (F16 bits %#04x) is not finite: a block-FP8 scale must be finite", v.what, idx, bits)
		}
	}
	return nil
}
