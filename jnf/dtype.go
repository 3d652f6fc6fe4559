package jnf

import (
	"fmt"
	"math"
)

// DType is a tensor element type, spelled as in safetensors headers.
type DType string

const (
	BF16 DType = "BF16"
	F16  DType = "F16"
	F32  DType = "F32"
	F64  DType = "F64"
	I8   DType = "I8"
	I16  DType = "I16"
	I32  DType = "I32"
	I64  DType = "I64"
	U8   DType = "U8"
	U16  DType = "U16"
	U32  DType = "U32"
	U64  DType = "U64"
	Bool DType = "BOOL"
	F8E4 DType = "F8_E4M3"
	F8E5 DType = "F8_E5M2"
)

var dtypeSizes = map[DType]int64{
	BF16: 2, F16: 2, F32: 4, F64: 8, I8: 1, I16: 2, I32: 4, I64: 8,
	U8: 1, U16: 2, U32: 4, U64: 8, Bool: 1, F8E4: 1, F8E5: 1,
}

// Size is the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int64 { return dtypeSizes[d] }

// Valid reports whether d is a dtype Tarfa knows.
func (d DType) Valid() bool { return dtypeSizes[d] != 0 }

// ParseDType validates s as a dtype name.
func ParseDType(s string) (DType, error) {
	d := DType(s)
	if !d.Valid() {
		return "", fmt.Errorf("unknown dtype %q", s)
	}
	return d, nil
}

// TensorView is a read-only view of one tensor's raw little-endian bytes.
// Callers must not modify Data.
type TensorView struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Numel is the product of the shape (1 for a scalar), or −1 if a dimension
// is negative or the product overflows int64.
func (t TensorView) Numel() int64 {
	n, err := Numel(t.Shape)
	if err != nil {
		return -1
	}
	return n
}

// Numel is the element count of a shape: the product of its dimensions (1
// for a scalar). It fails on a negative dimension and on a product that
// overflows int64, so a shape can never wrap around to a small count.
func Numel(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		n *= d
	}
	return n, nil
}

// ByteSize is the number of bytes of a tensor of dtype d and the shape:
// Numel(shape) × d.Size(), failing on an unknown dtype and on overflow.
func ByteSize(d DType, shape []int64) (int64, error) {
	if !d.Valid() {
		return 0, fmt.Errorf("unknown dtype %q", d)
	}
	n, err := Numel(shape)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/d.Size() {
		return 0, fmt.Errorf("shape %v × %s: byte size overflows int64", shape, d)
	}
	return n * d.Size(), nil
}
