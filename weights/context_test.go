package weights

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

// TensorContext reads and hashes a tensor a chunk at a time: it serves the
// same verified bytes as Tensor, reports every byte to its progress, stops
// within a chunk of its context being cancelled, and still refuses a
// flipped byte in any chunk.
func TestTensorContextChunks(t *testing.T) {
	defer func(n int64) { readChunk = n }(readChunk)
	readChunk = 1000
	dir := convertFixture(t, "qwen35moe-dev-c/checkpoint-official")
	m := open(t, dir)
	const name = "model.embed_tokens.weight"
	want, err := m.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(want.View().Data()))
	if size < 4*readChunk {
		t.Fatalf("%s is %d bytes: too small to read in several chunks", name, size)
	}
	var reported int64
	calls := 0
	got, err := m.TensorContext(context.Background(), name, func(n int64) { reported += n; calls++ })
	if err != nil {
		t.Fatal(err)
	}
	if got.View().Data() != want.View().Data() || !got.Digest().Equal(want.Digest()) || reported != size || calls != int((size+readChunk-1)/readChunk) {
		t.Errorf("chunked read: %d bytes reported in %d calls, want %d in chunks of %d; same bytes: %v",
			reported, calls, size, readChunk, got.View().Data() == want.View().Data())
	}

	// Cancelled after the first chunk: the next chunk is never read.
	ctx, cancel := context.WithCancel(context.Background())
	reported = 0
	_, err = m.TensorContext(ctx, name, func(n int64) { reported += n; cancel() })
	if !errors.Is(err, context.Canceled) || reported != readChunk {
		t.Errorf("cancelled after the first chunk: %v, %d bytes read", err, reported)
	}

	// A flipped byte in the last chunk is a mismatch naming the tensor.
	ref := m.records[name]
	p := filepath.Join(dir, ref.file.Name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[ref.rec.Offset+ref.rec.Length-3] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m2 := open(t, dir)
	var mm *jnf.MismatchError
	if _, err := m2.TensorContext(context.Background(), name, nil); !errors.As(err, &mm) || !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("flipped byte: %v", err)
	}
	if m.TensorBytes() < size {
		t.Errorf("TensorBytes %d is less than one tensor's %d", m.TensorBytes(), size)
	}
}
