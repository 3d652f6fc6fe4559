package attest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/convert"
)

func convertFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/"+name, dst, convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestModelServesVerifiedBytes(t *testing.T) {
	dir := convertFixture(t, "qwen35moe-dev-c/checkpoint-official")
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tt, err := m.Tensor("model.layers.0.linear_attn.A_log")
	if err != nil {
		t.Fatal(err)
	}
	if v := tt.View(); v.DType != jnf.F32 || len(v.Shape) != 1 || int64(len(v.Data)) != 4*v.Shape[0] {
		t.Errorf("A_log view %s %v %d bytes", v.DType, v.Shape, len(v.Data))
	}
	e, err := m.Expert(3, 7)
	if err != nil {
		t.Fatal(err)
	}
	I, H := int64(m.Config.MoEIntermediate), int64(m.Config.Hidden)
	if g, d := e.Gate(), e.Down(); g.Shape[0] != I || g.Shape[1] != H || d.Shape[0] != H || int64(len(d.Data)) != 2*H*I {
		t.Errorf("expert views %v %v", g.Shape, d.Shape)
	}
	if _, err := m.Expert(3, m.Config.Experts); err == nil {
		t.Error("out-of-range expert served")
	}
	if _, err := m.Tensor("model.layers.0.mlp.experts.0"); err == nil {
		t.Error("an expert record was served as a tensor")
	}
	if nt, ne := m.Served(); nt != 1 || ne != 1 {
		t.Errorf("served %d tensors %d experts", nt, ne)
	}

	// A byte changed on disk after Open is caught when the expert is read.
	f := m.records["model.layers.3.mlp.experts.7"]
	path := filepath.Join(dir, f.file.Name)
	b, _ := os.ReadFile(path)
	b[f.entry.Offset+5] ^= 0x80
	os.WriteFile(path, b, 0o644)
	_, err = m.Expert(3, 7)
	var mm *jnf.MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "layer 3 expert 7") || !strings.Contains(err.Error(), "layer-00003.jnf@") {
		t.Errorf("tampered expert: %v", err)
	}
	// Run-time verification uses the manifest's BLAKE3 (committed by the root
	// like the SHA-256).
	if mm.Want.Alg != jnf.BLAKE3 || mm.Want.Hex() != f.entry.BLAKE3 {
		t.Errorf("verified against %s %s, want the manifest's blake3 %s", mm.Want.Alg, mm.Want.Hex(), f.entry.BLAKE3)
	}
}

func TestVerifyAcceptsBLAKE3AndSHA256Only(t *testing.T) {
	data := []byte("expert bytes")
	view := jnf.TensorView{Name: "t", DType: jnf.U8, Shape: []int64{int64(len(data))}}
	for _, want := range []jnf.Digest{jnf.BLAKE3Bytes(data), jnf.SHA256Bytes(data)} {
		if _, err := VerifyTensor(view, data, want); err != nil {
			t.Errorf("%s: %v", want.Alg, err)
		}
		bad := want
		bad.Sum[0] ^= 1
		var mm *jnf.MismatchError
		if _, err := VerifyTensor(view, data, bad); !errors.As(err, &mm) {
			t.Errorf("%s: a wrong digest was accepted: %v", want.Alg, err)
		}
	}
	if _, err := VerifyTensor(view, data, jnf.Digest{Alg: "md5"}); err == nil || !strings.Contains(err.Error(), "blake3 or sha256") {
		t.Errorf("md5: %v", err)
	}
}

func TestOpenRefusesIncompleteOrEditedModels(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/qwen3moe-dev-a/checkpoint", dir, convert.Options{LastLayer: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("incomplete model: %v", err)
	}
	full := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	os.WriteFile(filepath.Join(full, "generation_config.json"), []byte("{}"), 0o644)
	if _, err := Open(full); err == nil || !strings.Contains(err.Error(), "hash to root") {
		t.Errorf("edited aux file: %v", err)
	}
}

func TestAuxFilesAreVerified(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fsys, err := m.AuxFS()
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "config.json")
	if err != nil || !bytes.Equal(b, m.ConfigBytes) {
		t.Errorf("config.json from AuxFS: %v", err)
	}
	if _, err := m.AuxFile("layer-00000.jnf"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a JNF file served as an auxiliary file: %v", err)
	}
	// Changed after Open: refused.
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte("{}"), 0o644)
	var mm *jnf.MismatchError
	if _, err := m.AuxFile("generation_config.json"); !errors.As(err, &mm) {
		t.Errorf("changed aux file: %v", err)
	}
	if _, err := m.AuxFS(); err == nil {
		t.Error("AuxFS served a changed file")
	}
}

// BenchmarkVerifyExpert: run-time verification of one real Qwen3.5-122B
// expert record (3 × 1024 × 3072 BF16 = 18 MiB) with each algorithm.
func BenchmarkVerifyExpert(b *testing.B) {
	rec := make([]byte, 3*1024*3072*2)
	for i := range rec {
		rec[i] = byte(i * 7)
	}
	I, H := int64(1024), int64(3072)
	g := jnf.TensorView{Name: "gate", DType: jnf.BF16, Shape: []int64{I, H}}
	u := jnf.TensorView{Name: "up", DType: jnf.BF16, Shape: []int64{I, H}}
	d := jnf.TensorView{Name: "down", DType: jnf.BF16, Shape: []int64{H, I}}
	for _, want := range []jnf.Digest{jnf.SHA256Bytes(rec), jnf.BLAKE3Bytes(rec)} {
		b.Run(string(want.Alg), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			for range b.N {
				if _, err := VerifyExpert(ExpertID{}, rec, g, u, d, want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
