package synth

import (
	"fmt"
	"io"
	"sort"

	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// Shards returns the content of the safetensors shards Write writes for
// o, made on demand: for each shard name of the index, the same bytes as
// the file Write writes, at any offset, without the file. Memory is the
// shard's header; making a range costs about as much as writing it. With
// WriteOptions.NoShards and convert.Options.Shards, a checkpoint too large
// to write out beside its conversion is converted from these bytes: the
// output is that of a conversion of the written checkpoint (TestShardsConvert).
func Shards(o Options) (func(name string) (safetensors.ReaderAtCloser, int64, error), error) {
	p, err := newPlan(o)
	if err != nil {
		return nil, err
	}
	byName := map[string]int{}
	for i := range p.shards {
		byName[fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(p.shards))] = i
	}
	return func(name string) (safetensors.ReaderAtCloser, int64, error) {
		i, ok := byName[name]
		if !ok {
			return nil, 0, fmt.Errorf("synth: no shard %q in this checkpoint (it has %d)", name, len(p.shards))
		}
		v, err := newShard(p.shards[i], p.o.Seed)
		if err != nil {
			return nil, 0, err
		}
		return v, v.size, nil
	}, nil
}

// shard is one shard's bytes: the safetensors header, then each tensor's
// data in name order (safetensors.Write's layout).
type shard struct {
	hdr  []byte
	ts   []shardTensor // by begin
	seed uint64
	size int64
}

type shardTensor struct {
	spec       tensorSpec
	begin, end int64 // absolute offsets in the shard
}

func newShard(specs []tensorSpec, seed uint64) (*shard, error) {
	st := make([]safetensors.Spec, len(specs))
	byName := map[string]tensorSpec{}
	for i, s := range specs {
		st[i] = safetensors.Spec{Name: s.name, DType: s.dtype, Shape: s.shape}
		byName[s.name] = s
	}
	hdr, sorted, err := safetensors.EncodeHeader(st, map[string]string{"format": "pt"})
	if err != nil {
		return nil, err
	}
	v := &shard{hdr: hdr, seed: seed}
	off := int64(len(hdr))
	for _, s := range sorted {
		t := byName[s.Name]
		n := numel(t.shape) * t.dtype.Size()
		v.ts = append(v.ts, shardTensor{spec: t, begin: off, end: off + n})
		off += n
	}
	v.size = off
	return v, nil
}

// ReadAt makes bytes [off, off+len(p)) of the shard.
func (v *shard) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("synth shard: negative offset %d", off)
	}
	if off >= v.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), v.size-off))
	q, pos := p[:n], off
	if pos < int64(len(v.hdr)) {
		c := copy(q, v.hdr[pos:])
		q, pos = q[c:], pos+int64(c)
	}
	for i := sort.Search(len(v.ts), func(i int) bool { return v.ts[i].end > pos }); len(q) > 0; i++ {
		t := v.ts[i]
		k := min(t.end-pos, int64(len(q)))
		if err := tensorBytes(t.spec, v.seed, pos-t.begin, q[:k]); err != nil {
			return 0, err
		}
		q, pos = q[k:], pos+k
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Close releases nothing: the bytes are made on demand.
func (v *shard) Close() error { return nil }
