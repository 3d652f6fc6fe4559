//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// fp8ExpertModel is a checkpoint with n block-FP8 routed experts (24×256,
// blocks 16×128: a partial row block in gate and up) whose scales are
// stored as dt.
func fp8ExpertModel(t *testing.T, n int, dt jnf.DType) *weights.Checkpoint {
	t.Helper()
	r := rand.New(rand.NewPCG(8, 9))
	cfg := strings.TrimSuffix(strings.TrimSpace(testConfig), "}") +
		`,"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[16,128]}}`
	codes := func(rows, cols int) jnf.TensorView {
		v := jnf.TensorView{DType: jnf.F8E4, Shape: []int64{int64(rows), int64(cols)}, Data: make([]byte, rows*cols)}
		for i := range v.Data {
			for v.Data[i] = byte(r.Uint32()); v.Data[i]&0x7F == 0x7F; v.Data[i] = byte(r.Uint32()) {
			}
		}
		return v
	}
	scales := func(rows, cols int) jnf.TensorView {
		br, bc := (rows+15)/16, (cols+127)/128
		v := jnf.TensorView{DType: dt, Shape: []int64{int64(br), int64(bc)}}
		for range br * bc {
			f := float32(math.Ldexp(1+r.Float64(), -r.IntN(10)))
			switch dt {
			case jnf.F32:
				v.Data = binary.LittleEndian.AppendUint32(v.Data, math.Float32bits(f))
			case jnf.BF16:
				v.Data = binary.LittleEndian.AppendUint16(v.Data, uint16(math.Float32bits(f)>>16))
			default: // F16: a positive normal half
				v.Data = binary.LittleEndian.AppendUint16(v.Data, uint16(1+r.IntN(30))<<10|uint16(r.IntN(1024)))
			}
		}
		return v
	}
	m := &weightstest.Model{Config: []byte(cfg), Tensors: map[string]jnf.TensorView{"small": bf16Tensor(r, 64, 256)},
		Experts: map[weights.ExpertID][3]jnf.TensorView{}, ExpertScales: map[weights.ExpertID][3]jnf.TensorView{}}
	for e := range n {
		id := weights.ExpertID{Layer: 0, Expert: e}
		m.Experts[id] = [3]jnf.TensorView{codes(24, 256), codes(24, 256), codes(256, 24)}
		m.ExpertScales[id] = [3]jnf.TensorView{scales(24, 256), scales(24, 256), scales(256, 24)}
	}
	return weightstest.Open(t, m)
}

// TestVerifyCopiesFP8: a block-FP8 expert's device copy (codes, then its
// scales as stored: two segments) hashes on the device to its record's
// digest, for scales stored as F32, BF16 and F16; under another digest
// the check fails naming the expert; a bit flipped in the copy's scales is
// found by ScrubDevice.
func TestVerifyCopiesFP8(t *testing.T) {
	for _, dt := range []jnf.DType{jnf.F32, jnf.BF16, jnf.F16} {
		t.Run(string(dt), func(t *testing.T) {
			ck := fp8ExpertModel(t, 2, dt)
			b := open(t, Options{VerifyCopies: true}).(*Backend)
			q, err := b.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			rec := ck.ExpertBytes(0, 0)
			x := load(t, ck, q, 0, jnf.Digest{})
			q.ReleaseExpert(&x)
			if err := q.Sync(); err != nil {
				t.Fatalf("a true copy: %v", err)
			}
			if c := b.Counters(); c.DeviceVerified != 1 || c.DeviceVerifiedBytes != rec || c.DeviceVerifyFailures != 0 {
				t.Errorf("after one true copy: %d verified, %d bytes, %d failures; want 1, %d, 0", c.DeviceVerified, c.DeviceVerifiedBytes, c.DeviceVerifyFailures, rec)
			}
			sl, err := b.AllocSlot(rec)
			if err != nil {
				t.Fatal(err)
			}
			defer b.FreeSlot(sl)
			e0, _ := ck.Expert(0, 0)
			wrong := e0.Digest()
			wrong.Sum[0] ^= 1
			// A queue whose check failed stays failed (its error is
			// sticky): each fill gets a queue of its own.
			q2, err := b.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer q2.Close()
			e1 := fillSlot(t, ck, q2, sl, 1, wrong)
			var ce *CopyError
			if err := q2.Sync(); !errors.As(err, &ce) || ce.ID != (weights.ExpertID{Layer: 0, Expert: 1}) || !errors.Is(err, jnf.ErrVerification) {
				t.Fatalf("a copy under another digest: %v; want a *CopyError for layer 0 expert 1", err)
			}
			if ce.Got.Sum != e1.Digest().Sum {
				t.Errorf("the device hashed %s, want expert 1's true digest %s (codes and scales, as stored)", ce.Got, e1.Digest())
			}
			q3, err := b.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer q3.Close()
			fillSlot(t, ck, q3, sl, 1, jnf.Digest{})
			if err := q3.Sync(); err != nil || !b.SlotHolds(sl, e1.Digest()) {
				t.Fatalf("a good fill: %v, holds %v", err, b.SlotHolds(sl, e1.Digest()))
			}
			if n, err := b.ScrubDevice(); err != nil || n != rec {
				t.Fatalf("scrub of a true copy: %d bytes, %v; want %d, nil", n, err, rec)
			}
			// A bit of the down projection's scales, the record's last part.
			s := sl.(*slot)
			if err := b.enter(); err != nil {
				t.Fatal(err)
			}
			off := s.parts[2].scale + 1
			var old [1]byte
			if err := cu.MemcpyDtoH(unsafe.Pointer(&old[0]), off, 1); err != nil {
				t.Fatal(err)
			}
			if err := cu.MemsetD8(off, old[0]^0x04, 1); err != nil {
				t.Fatal(err)
			}
			if err := cu.Synchronize(); err != nil {
				t.Fatal(err)
			}
			b.leave()
			if _, err := b.ScrubDevice(); !errors.As(err, &ce) || !ce.Scrub || ce.ID != e1.ID() {
				t.Fatalf("scrub after a flipped scale bit: %v; want a *CopyError of a scrub for %v", err, e1.ID())
			}
		})
	}
}
