// Package attest is the only producer of the verified-bytes types that the
// engine computes with, and (later) of runtime attestations, keys and signed
// statements. It never imports engine/ or CUDA.
package attest

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/jnf"
)

// VerifiedTensor is a non-expert tensor whose bytes hashed to a digest
// (BLAKE3 or SHA-256) that the (root-checked) manifest records for it. The zero value is unusable;
// only this package constructs one, and only after the digest matched.
type VerifiedTensor struct {
	view   jnf.TensorView
	digest jnf.Digest
}

// View returns the tensor. The data must not be modified.
func (t VerifiedTensor) View() jnf.TensorView { return t.view }

// Digest is the digest that matched.
func (t VerifiedTensor) Digest() jnf.Digest { return t.digest }

// ExpertID names one routed expert.
type ExpertID struct{ Layer, Expert int }

func (id ExpertID) String() string { return fmt.Sprintf("layer %d expert %d", id.Layer, id.Expert) }

// VerifiedExpert is one routed expert record (gate, up and down projection
// bytes exactly as in the source checkpoint) whose bytes hashed to a digest
// (BLAKE3 or SHA-256) the manifest records for it. Only this package constructs one.
type VerifiedExpert struct {
	id             ExpertID
	digest         jnf.Digest
	gate, up, down jnf.TensorView
}

func (e *VerifiedExpert) ID() ExpertID         { return e.id }
func (e *VerifiedExpert) Digest() jnf.Digest   { return e.digest }
func (e *VerifiedExpert) Gate() jnf.TensorView { return e.gate }
func (e *VerifiedExpert) Up() jnf.TensorView   { return e.up }
func (e *VerifiedExpert) Down() jnf.TensorView { return e.down }

// VerifyTensor hashes data with want's algorithm (BLAKE3 or SHA-256) and
// returns a VerifiedTensor only if the digest equals want. view.Data is replaced by data.
func VerifyTensor(view jnf.TensorView, data []byte, want jnf.Digest) (VerifiedTensor, error) {
	if err := check(view.Name, data, want); err != nil {
		return VerifiedTensor{}, err
	}
	if int64(len(data)) != view.Numel()*view.DType.Size() {
		return VerifiedTensor{}, fmt.Errorf("tensor %s: %d bytes, want %d for %s %v", view.Name, len(data), view.Numel()*view.DType.Size(), view.DType, view.Shape)
	}
	view.Data = data
	return VerifiedTensor{view: view, digest: want}, nil
}

// VerifyExpert hashes the whole record (gate‖up‖down as stored) with want's
// algorithm and returns a VerifiedExpert only if the digest equals want. The three views describe the
// parts in record order; their Data fields are set to sub-slices of record.
func VerifyExpert(id ExpertID, record []byte, gate, up, down jnf.TensorView, want jnf.Digest) (*VerifiedExpert, error) {
	what := id.String()
	if err := check(what, record, want); err != nil {
		return nil, err
	}
	off := int64(0)
	parts := []*jnf.TensorView{&gate, &up, &down}
	for _, p := range parts {
		n := p.Numel() * p.DType.Size()
		if n <= 0 || off+n > int64(len(record)) {
			return nil, fmt.Errorf("%s: part %s (%s %v) needs bytes [%d,%d) but the record has %d", what, p.Name, p.DType, p.Shape, off, off+n, len(record))
		}
		p.Data = record[off : off+n : off+n]
		off += n
	}
	if off != int64(len(record)) {
		return nil, fmt.Errorf("%s: parts cover %d bytes, record has %d", what, off, len(record))
	}
	return &VerifiedExpert{id: id, digest: want, gate: gate, up: up, down: down}, nil
}

func check(what string, data []byte, want jnf.Digest) error {
	var got jnf.Digest
	switch want.Alg {
	case jnf.BLAKE3:
		got = jnf.BLAKE3Bytes(data)
	case jnf.SHA256:
		got = jnf.SHA256Bytes(data)
	default:
		return fmt.Errorf("%s: expected digest must be blake3 or sha256, got %q", what, want.Alg)
	}
	if !got.Equal(want) {
		return &jnf.MismatchError{What: what, Got: got, Want: want}
	}
	return nil
}
