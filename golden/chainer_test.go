package golden

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"
)

// TestChainerIsChainNext: a Chainer reused over rows shorter and longer
// than its buffer gives ChainNext's heads, and allocates nothing once warm.
func TestChainerIsChainNext(t *testing.T) {
	var c Chainer
	head := ChainStart([32]byte{1, 2, 3}, []int{7, 8})
	want := head
	for j, n := range []int{1, 5, 4096, 4097, 248320, 3, 12000} {
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(math.Sin(float64(i*(j+1)))) * 17
		}
		row[n/2] = float32(math.Inf(-1))
		head, want = c.Next(head, row), ChainNext(want, row)
		if head != want {
			t.Fatalf("row %d (%d logits): Chainer %x, ChainNext %x", j, n, head, want)
		}
	}
	row := make([]float32, 5000)
	if n := testing.AllocsPerRun(20, func() { head = c.Next(head, row) }); n != 0 {
		t.Errorf("%.1f allocations per Chainer.Next, want 0", n)
	}
}

// TestChainHashesLittleEndianBits: a chain link is SHA-256 of the previous
// head and each logit's float32 bits, little-endian, as the format says:
// NaN payloads, both zeros and infinities included, through ChainNext and
// through a Chainer.
func TestChainHashesLittleEndianBits(t *testing.T) {
	prev := [32]byte{9, 8, 7}
	for _, n := range []int{1, 7, 4096, 4097, 70001} {
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(math.Cos(float64(3*i+n))) * 1e3
		}
		row[0] = math.Float32frombits(0x7fc01234) // a NaN with a payload
		if n > 4 {
			row[1], row[2], row[3] = float32(math.Copysign(0, -1)), float32(math.Inf(1)), math.Float32frombits(0xff800001)
		}
		var bits []byte
		bits = append(bits, prev[:]...)
		for _, x := range row {
			bits = binary.LittleEndian.AppendUint32(bits, math.Float32bits(x))
		}
		want := sha256.Sum256(bits)
		var c Chainer
		if got := ChainNext(prev, row); got != want {
			t.Fatalf("%d logits: ChainNext %x, want SHA-256 of the little-endian bits %x", n, got, want)
		}
		if got := c.Next(prev, row); got != want {
			t.Fatalf("%d logits: Chainer.Next %x, want %x", n, got, want)
		}
	}
}
