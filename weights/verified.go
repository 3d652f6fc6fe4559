// Package weights is the only producer of the verified values the engine
// computes with: VerifiedTensor and VerifiedExpert. It never imports
// engine/ or CUDA.
//
// # The rules it enforces
//
//  1. Minted only from the manifest. A verified value is made in exactly one
//     place: a Checkpoint (from Open, which re-derived the manifest root from
//     the files) reads a record, hashes it and compares it with the digest the
//     manifest entry records. No caller supplies a digest, and no function
//     turns caller-supplied bytes into a verified value. Tests build real
//     checkpoints on disk (package weightstest) and go through Open too.
//  2. Zero values are unusable. Every method of a zero VerifiedTensor or
//     VerifiedExpert panics, naming the type: a value that was not minted
//     can never be mistaken for one that was.
//  3. Read-only after verification. The bytes behind a verified value are
//     exposed as a Go string (View.Data), which no Go code can write without
//     package unsafe; backends view them in place (backend) and must
//     never write them. The packages allowed to import unsafe are listed in
//     validation/depcheck_test.go.
//  4. Re-checkable. Copies that live long (caches, resident tiers) are
//     re-hashed against the manifest digest with Recheck; the streaming
//     hierarchy schedules it (scrubbing).
//
// Each value also carries the root of the checkpoint it came from, so a
// consumer can refuse values of two different models (engine.Load does).
package weights

import (
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/zeebo/blake3"

	"github.com/tarfa-ai/tarfa/jnf"
)

// ExpertID names one routed expert.
type ExpertID struct{ Layer, Expert int }

func (id ExpertID) String() string { return fmt.Sprintf("layer %d expert %d", id.Layer, id.Expert) }

// View is a read-only view of one tensor's raw little-endian bytes: the
// name, dtype and shape its manifest entry records and the verified bytes.
// A view of a value minted in an arena buffer is valid until that buffer's
// Release: Data panics after it, naming the record, instead of returning
// bytes the arena may have recycled for another read. (The string Data
// returned before the Release is not checked again: a consumer must be done
// with it when it releases the buffer.)
type View struct {
	name  string
	dtype jnf.DType
	shape []int64
	data  string
	// buf is the arena buffer data lives in (nil: memory of its own), valid
	// while its generation is gen; r is the value's record.
	buf *Buffer
	gen uint64
	r   *record
}

// Name is the canonical tensor name (for an expert part, the expert's name
// and the part, e.g. "model.layers.3.mlp.experts.7.gate_proj").
func (v View) Name() string { return v.name }

// DType is the element type.
func (v View) DType() jnf.DType { return v.dtype }

// Shape returns a copy of the shape.
func (v View) Shape() []int64 { return append([]int64(nil), v.shape...) }

// Dims is the number of dimensions; Dim(i) one of them.
func (v View) Dims() int       { return len(v.shape) }
func (v View) Dim(i int) int64 { return v.shape[i] }

// Numel is the element count (the shape was checked for overflow when the
// record was read).
func (v View) Numel() int64 {
	n, _ := jnf.Numel(v.shape)
	return n
}

// Data is the verified bytes, immutable. It panics if the arena buffer
// they live in was released since they were verified.
func (v View) Data() string {
	if b := v.buf; b != nil && b.gen.Load() != v.gen {
		panic((*releasedView)(v.r))
	}
	return v.data
}

// record is what a verified value points to: the bytes and what the
// manifest says of them. It is never modified after minting.
type record struct {
	root  jnf.Digest // of the checkpoint it came from
	name  string
	file  string
	off   int64
	want  jnf.Digest // BLAKE3, from the manifest entry
	data  string
	views []View    // one for a tensor; the parts of an expert (jnf/SPEC.md)
	lins  [3]Linear // an expert's gate, up and down matrices
	id    ExpertID
	// blk is the checkpoint's block size (BlockN, BlockK) for block-FP8
	// records, zero for an unquantised checkpoint.
	blk [2]int
	// buf is the arena buffer the bytes live in (nil: memory of their
	// own), valid while its generation is gen.
	buf *Buffer
	gen uint64
}

// live panics if the record's arena buffer was released.
func (r *record) live() *record {
	if r.buf != nil && r.buf.gen.Load() != r.gen {
		panic("weights: use of a verified value whose arena buffer was released (" + r.name + ")")
	}
	return r
}

// releasedView is the panic of a view of the record used after its arena
// buffer was released.
type releasedView record

func (r *releasedView) Error() string {
	return fmt.Sprintf("weights: %s: view used after its arena buffer was released (%s@%d, verified in buffer generation %d, now %d: the bytes may be another read's)",
		r.name, r.file, r.off, r.gen, r.buf.gen.Load())
}

func (r *record) recheck() error {
	got := blake3String(r.data)
	if !got.Equal(r.want) {
		return &jnf.MismatchError{What: fmt.Sprintf("%s (%s@%d, resident copy)", r.name, r.file, r.off), Got: got, Want: r.want}
	}
	return nil
}

// VerifiedTensor is a non-expert tensor whose bytes hashed to the BLAKE3
// digest its (root-checked) manifest entry records. The zero value is
// unusable: its methods panic.
type VerifiedTensor struct{ r *record }

func (t VerifiedTensor) rec() *record {
	if t.r == nil {
		panic("weights: use of a zero VerifiedTensor (verified values come only from a weights.Checkpoint)")
	}
	return t.r.live()
}

// Name is the canonical tensor name.
func (t VerifiedTensor) Name() string { return t.rec().name }

// View is the tensor.
func (t VerifiedTensor) View() View { return t.rec().views[0] }

// Digest is the manifest's BLAKE3 digest the bytes matched.
func (t VerifiedTensor) Digest() jnf.Digest { return t.rec().want }

// Root is the manifest root of the checkpoint the tensor came from.
func (t VerifiedTensor) Root() jnf.Digest { return t.rec().root }

// Recheck re-hashes the bytes against the manifest digest (for copies kept
// resident: a flipped bit is found here).
func (t VerifiedTensor) Recheck() error { return t.rec().recheck() }

// VerifiedExpert is one routed expert record (gate, up and down projection
// bytes exactly as in the source checkpoint) whose bytes hashed to the
// BLAKE3 digest its manifest entry records. The zero value is unusable.
type VerifiedExpert struct{ r *record }

func (e VerifiedExpert) rec() *record {
	if e.r == nil {
		panic("weights: use of a zero VerifiedExpert (verified values come only from a weights.Checkpoint)")
	}
	return e.r.live()
}

// ID is the expert's layer and index, as its manifest entry records them.
func (e VerifiedExpert) ID() ExpertID { return e.rec().id }

// Digest is the manifest's BLAKE3 digest the record matched.
func (e VerifiedExpert) Digest() jnf.Digest { return e.rec().want }

// Root is the manifest root of the checkpoint the expert came from.
func (e VerifiedExpert) Root() jnf.Digest { return e.rec().root }

// Bytes is the record's length.
func (e VerifiedExpert) Bytes() int64 { return int64(len(e.rec().data)) }

// Gate, Up and Down are the three projections ([I,H], [I,H], [H,I]), with
// their scales in a block-FP8 checkpoint.
func (e VerifiedExpert) Gate() Linear { return e.rec().lins[0] }
func (e VerifiedExpert) Up() Linear   { return e.rec().lins[1] }
func (e VerifiedExpert) Down() Linear { return e.rec().lins[2] }

// Recheck re-hashes the record against the manifest digest.
func (e VerifiedExpert) Recheck() error { return e.rec().recheck() }

func blake3String(s string) jnf.Digest { return jnf.BLAKE3String(s) }

// mint checks data (read for entry e of file) against want, the entry's
// BLAKE3 digest, and returns the verified record. data must be a buffer
// that nothing else references (the checkpoint allocates it for this read):
// the record views it in place as an immutable string, so after mint no
// code can reach it as a writable slice. It is hashed after the view is
// taken, so the bytes checked are the bytes served.
func mint(root jnf.Digest, blk [2]int, file string, e *jnf.Record, want jnf.Digest, data []byte) (*record, error) {
	r, err := newRecord(root, blk, file, e, want, data)
	if err != nil {
		return nil, err
	}
	return r.checked(e, blake3String(r.data), false)
}

// newRecord views data, a buffer for entry e of file that nothing else
// references, as the immutable bytes of a record not yet checked.
func newRecord(root jnf.Digest, blk [2]int, file string, e *jnf.Record, want jnf.Digest, data []byte) (*record, error) {
	if int64(len(data)) != e.Length || len(data) == 0 {
		return nil, fmt.Errorf("%s: %d bytes, the manifest records %d", e.Name, len(data), e.Length)
	}
	return &record{root: root, blk: blk, name: e.Name, file: file, off: e.Offset, want: want, id: ExpertID{e.Layer, e.Expert},
		data: unsafe.String(unsafe.SliceData(data), len(data))}, nil
}

// checked compares got, the BLAKE3 digest of r.data, with the entry's and
// returns r with its views. A block-FP8 record's codes are searched for
// NaN (unless scanned says a Check did it while hashing) and its scales
// checked: a record holding either is refused even though it matches its
// digest.
func (r *record) checked(e *jnf.Record, got jnf.Digest, scanned bool) (*record, error) {
	if !got.Equal(r.want) {
		return nil, &jnf.MismatchError{What: fmt.Sprintf("%s (%s@%d)", e.Name, r.file, e.Offset), Got: got, Want: r.want}
	}
	switch e.Kind {
	case jnf.KindTensor:
		r.views = []View{{name: e.Name, dtype: e.DType, shape: append([]int64(nil), e.Shape...), data: r.data, r: r}}
		if e.DType == jnf.F8E4 {
			if i := nanCode(r.data); i >= 0 {
				return nil, fmt.Errorf("%s (%s@%d): element %d is the E4M3 NaN code %#x: %w", e.Name, r.file, e.Offset, i, r.data[i], ErrNonFinite)
			}
		}
	case jnf.KindExpert:
		r.views = make([]View, len(e.Parts))
		for i, p := range e.Parts {
			r.views[i] = View{name: e.Name + "." + p.Name, dtype: p.DType, shape: append([]int64(nil), p.Shape...),
				data: r.data[p.Offset : p.Offset+p.Length], r: r}
		}
		lins, err := expertLinears(e.Name, r.views, r.blk)
		if err != nil {
			return nil, fmt.Errorf("%s (%s@%d): %w", e.Name, r.file, e.Offset, err)
		}
		if len(e.Parts) == 6 && !scanned {
			if i := nanCode(r.data[:codesEnd(e)]); i >= 0 {
				return nil, nanError(e, r.file, i, r.data[i])
			}
		}
		r.lins = lins
	default:
		return nil, fmt.Errorf("%s: kind %q is not a tensor or an expert", e.Name, e.Kind)
	}
	return r, nil
}

// codesEnd is the end of a block-FP8 expert record's E4M3 codes (its first
// three parts; the scales follow them).
func codesEnd(e *jnf.Record) int64 {
	p := e.Parts[2]
	return p.Offset + p.Length
}

func nanError(e *jnf.Record, file string, i int, b byte) error {
	part := e.Parts[0]
	for _, p := range e.Parts[:3] {
		if int64(i) >= p.Offset {
			part = p
		}
	}
	return fmt.Errorf("%s (%s@%d): %s element %d is the E4M3 NaN code %#x: %w", e.Name, file, e.Offset, part.Name, int64(i)-part.Offset, b, ErrNonFinite)
}

// readChunk is how many bytes mintFrom reads and hashes between two checks
// of its context (a variable for tests).
var readChunk int64 = 32 << 20

// mintFrom is mint for bytes still to be read: it reads entry e (at offset
// off of ra) into a fresh buffer readChunk bytes at a time, hashing each
// chunk through the record's immutable view as soon as it is read, so that
// a large tensor (a 1.5 GiB embedding) can be abandoned within a chunk's
// time when ctx is done, and each chunk's bytes are reported to progress
// (nil: not reported). The bytes hashed are the bytes served, as in mint.
func mintFrom(ctx context.Context, root jnf.Digest, blk [2]int, file string, e *jnf.Record, want jnf.Digest, ra io.ReaderAt, off int64,
	progress func(int64)) (*record, error) {
	r, err := newRecord(root, blk, file, e, want, make([]byte, max(e.Length, 0)))
	if err != nil {
		return nil, err
	}
	buf := unsafe.Slice(unsafe.StringData(r.data), len(r.data)) // written only here, before the record is handed out
	h := blake3.New()
	for at := int64(0); at < e.Length; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(readChunk, e.Length-at)
		if _, err := ra.ReadAt(buf[at:at+n], off+at); err != nil {
			return nil, fmt.Errorf("%s (%s@%d): reading at offset %d: %w", e.Name, file, e.Offset, off+at, err)
		}
		h.WriteString(r.data[at : at+n])
		at += n
		if progress != nil {
			progress(n)
		}
	}
	got := jnf.Digest{Alg: jnf.BLAKE3}
	h.Sum(got.Sum[:0])
	return r.checked(e, got, false)
}
