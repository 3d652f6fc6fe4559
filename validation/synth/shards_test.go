package synth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/verify"
)

// shardsOptions is a small checkpoint whose layers straddle shards, with
// every init kind (F32 norms and A_log in the fused layout too), 16
// experts top-8 (the full-depth benchmark's layout at a tiny scale) and a
// tokenizer.
func shardsOptions(t *testing.T, layout string) Options {
	o := tiny
	o.Layers, o.Layout, o.ShardBytes = 5, layout, 40<<10
	o.Set = map[string]any{"num_experts": 16, "num_experts_per_tok": 8}
	o, err := WithTokenizer(o)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Shards makes, at any offset and length, the bytes of the shard files
// Write writes.
func TestShardsAreTheFiles(t *testing.T) {
	for _, layout := range []string{"per-expert", "fused"} {
		o := shardsOptions(t, layout)
		dir := filepath.Join(t.TempDir(), "ck")
		if err := Write(dir, o); err != nil {
			t.Fatal(err)
		}
		open, err := Shards(o)
		if err != nil {
			t.Fatal(err)
		}
		_, n, _ := Size(o)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 1; i <= n; i++ {
			name := filepath.Base(shardPath(dir, i, n))
			want, err := os.ReadFile(shardPath(dir, i, n))
			if err != nil {
				t.Fatal(err)
			}
			v, size, err := open(name)
			if err != nil {
				t.Fatal(err)
			}
			if size != int64(len(want)) {
				t.Fatalf("%s %s: size %d, the file has %d", layout, name, size, len(want))
			}
			got := make([]byte, size)
			if _, err := v.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %s: the made bytes differ from the file's", layout, name)
			}
			for range 200 { // ranges starting and ending inside elements and headers
				off := rng.Int64N(size)
				k := rng.Int64N(min(size-off, 5000) + 1)
				b := make([]byte, k)
				if m, err := v.ReadAt(b, off); m != int(k) || (err != nil && !(errors.Is(err, io.EOF) && off+k == size)) {
					t.Fatalf("%s %s ReadAt(%d, %d) = %d, %v", layout, name, k, off, m, err)
				}
				if !bytes.Equal(b, want[off:off+k]) {
					t.Fatalf("%s %s: bytes [%d,+%d) differ", layout, name, off, k)
				}
			}
			if m, err := v.ReadAt(make([]byte, 8), size-4); m != 4 || !errors.Is(err, io.EOF) {
				t.Fatalf("%s %s: a read past the end gave %d, %v; want 4, EOF", layout, name, m, err)
			}
		}
		if _, _, err := open("model-00099-of-00099.safetensors"); err == nil {
			t.Fatal("a shard name the checkpoint does not have was accepted")
		}
	}
}

func shardPath(dir string, i, n int) string {
	return filepath.Join(dir, "model-"+pad5(i)+"-of-"+pad5(n)+".safetensors")
}

func pad5(i int) string {
	b := []byte("00000")
	for j := 4; i > 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b)
}

// A conversion of the checkpoint's metadata with Shards (the shards never
// written) writes the same files, byte for byte, and the same manifest
// root as a conversion of the written checkpoint; and the result verifies.
func TestShardsConvert(t *testing.T) {
	for _, layout := range []string{"per-expert", "fused"} {
		o := shardsOptions(t, layout)
		tmp := t.TempDir()
		ck, meta := filepath.Join(tmp, "ck"), filepath.Join(tmp, "meta")
		a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
		if err := Write(ck, o); err != nil {
			t.Fatal(err)
		}
		if err := WriteContext(context.Background(), meta, o, WriteOptions{NoShards: true}); err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(meta, "*.safetensors")); len(m) > 0 {
			t.Fatalf("NoShards wrote %v", m)
		}
		ra, err := convert.Convert(context.Background(), ck, a, convert.Options{LastLayer: -1, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		open, err := Shards(o)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := convert.Convert(context.Background(), meta, b, convert.Options{LastLayer: -1, Workers: 3, Shards: open})
		if err != nil {
			t.Fatal(err)
		}
		if ra.Manifest.Root != rb.Manifest.Root {
			t.Fatalf("%s: root %s from the written checkpoint, %s from Shards", layout, ra.Manifest.Root, rb.Manifest.Root)
		}
		ents, err := os.ReadDir(a)
		if err != nil {
			t.Fatal(err)
		}
		entsB, _ := os.ReadDir(b)
		if len(ents) != len(entsB) || len(ents) < 8 {
			t.Fatalf("%s: %d files from the written checkpoint, %d from Shards", layout, len(ents), len(entsB))
		}
		for _, e := range ents {
			x, err1 := os.ReadFile(filepath.Join(a, e.Name()))
			y, err2 := os.ReadFile(filepath.Join(b, e.Name()))
			if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
				t.Fatalf("%s: %s differs (%v, %v)", layout, e.Name(), err1, err2)
			}
		}
		rep, err := verify.Check(context.Background(), b, verify.CheckOptions{})
		if err != nil || !rep.OK() || !rep.Complete || rep.Root != rb.Manifest.Root {
			t.Fatalf("%s: the model converted from Shards does not verify: %v %+v", layout, err, rep)
		}
	}
}
