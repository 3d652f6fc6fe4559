package weights

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf"
)

func convertFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/"+name, dst, convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	return dst
}

func open(t *testing.T, dir string) *Checkpoint {
	t.Helper()
	c, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCheckpointServesVerifiedBytes(t *testing.T) {
	dir := convertFixture(t, "qwen35moe-dev-c/checkpoint-official")
	m := open(t, dir)
	tt, err := m.Tensor("model.layers.0.linear_attn.A_log")
	if err != nil {
		t.Fatal(err)
	}
	if v := tt.View(); v.DType() != jnf.F32 || v.Dims() != 1 || int64(len(v.Data())) != 4*v.Dim(0) || tt.Name() != v.Name() {
		t.Errorf("A_log view %s %v %d bytes", v.DType(), v.Shape(), len(v.Data()))
	}
	if !tt.Root().Equal(m.Root()) {
		t.Errorf("tensor root %s, checkpoint %s", tt.Root(), m.Root())
	}
	e, err := m.Expert(3, 7)
	if err != nil {
		t.Fatal(err)
	}
	cfg := m.Config()
	I, H := int64(cfg.MoEIntermediate), int64(cfg.Hidden)
	if g, d := e.Gate().Values(), e.Down().Values(); g.Dim(0) != I || g.Dim(1) != H || d.Dim(0) != H || int64(len(d.Data())) != 2*H*I {
		t.Errorf("expert views %v %v", g.Shape(), d.Shape())
	}
	if id := e.ID(); id != (ExpertID{3, 7}) || e.Bytes() != 3*2*H*I {
		t.Errorf("expert %v, %d bytes", id, e.Bytes())
	}
	if _, err := m.Expert(3, cfg.Experts); err == nil {
		t.Error("out-of-range expert served")
	}
	if _, err := m.Tensor("model.layers.0.mlp.experts.0"); err == nil {
		t.Error("an expert record was served as a tensor")
	}
	if nt, ne := m.Served(); nt != 1 || ne != 1 {
		t.Errorf("served %d tensors %d experts", nt, ne)
	}

	// A byte changed on disk after Open is caught when the expert is read.
	ref := m.records["model.layers.3.mlp.experts.7"]
	path := filepath.Join(dir, ref.file.Name)
	b, _ := os.ReadFile(path)
	b[ref.rec.Offset+5] ^= 0x80
	os.WriteFile(path, b, 0o644)
	_, err = m.Expert(3, 7)
	var mm *jnf.MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "model.layers.3.mlp.experts.7") || !strings.Contains(err.Error(), "layer-00003.jnf@") ||
		!errors.Is(err, jnf.ErrVerification) {
		t.Fatalf("tampered expert: %v", err)
	}
	// Run-time verification uses the manifest's BLAKE3 (committed by the root
	// like the SHA-256).
	if mm.Want.Alg != jnf.BLAKE3 || mm.Want.Hex() != ref.rec.BLAKE3 {
		t.Errorf("verified against %s %s, want the manifest's blake3 %s", mm.Want.Alg, mm.Want.Hex(), ref.rec.BLAKE3)
	}
}

// TestManifestCannotBeEditedToMint: what a caller does to the manifest it is
// shown does not change which bytes are accepted.
func TestManifestCannotBeEditedToMint(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	m := open(t, dir)
	name := "model.layers.1.mlp.experts.3"
	i, _ := m.Manifest().Index(name)
	ref := m.records[name]
	path := filepath.Join(dir, ref.file.Name)
	b, _ := os.ReadFile(path)
	for j := range ref.rec.Length {
		b[ref.rec.Offset+j] = 0
	}
	os.WriteFile(path, b, 0o644)
	zero := jnf.SumBytes(make([]byte, ref.rec.Length))
	e := &m.Manifest().Entries[i]
	e.BLAKE3, e.SHA256 = zero.BLAKE3.Hex(), zero.SHA256.Hex()
	m.Config().TopK = 1
	if _, err := m.Expert(1, 3); !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("zeroed expert served after editing the manifest in memory: %v", err)
	}
	if m.Config().TopK == 1 {
		t.Error("Config returned the checkpoint's own configuration, not a copy")
	}
}

func TestZeroValuesPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"VerifiedTensor.View":    func() { VerifiedTensor{}.View() },
		"VerifiedTensor.Root":    func() { VerifiedTensor{}.Root() },
		"VerifiedTensor.Recheck": func() { VerifiedTensor{}.Recheck() },
		"VerifiedExpert.Gate":    func() { VerifiedExpert{}.Gate() },
		"VerifiedExpert.ID":      func() { VerifiedExpert{}.ID() },
		"VerifiedExpert.Bytes":   func() { VerifiedExpert{}.Bytes() },
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "zero Verified") {
					t.Errorf("%s on a zero value: recovered %v, want a panic naming the zero value", name, r)
				}
			}()
			f()
		}()
	}
}

// TestRecheckFindsAFlippedResidentBit flips a bit in the memory behind a
// verified value (as a stray write or a memory fault would) and checks that
// Recheck finds it.
func TestRecheckFindsAFlippedResidentBit(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	m := open(t, dir)
	e, err := m.Expert(2, 5)
	if err != nil {
		t.Fatal(err)
	}
	tt, err := m.Tensor("model.norm.weight")
	if err != nil {
		t.Fatal(err)
	}
	if e.Recheck() != nil || tt.Recheck() != nil {
		t.Fatal("fresh values do not re-check")
	}
	flip := func(s string, at int) { unsafeBytes(s)[at] ^= 4 }
	flip(e.Down().Values().Data(), 17)
	flip(tt.View().Data(), 1)
	for what, err := range map[string]error{"expert": e.Recheck(), "tensor": tt.Recheck()} {
		var mm *jnf.MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "resident copy") {
			t.Errorf("%s with a flipped bit: %v", what, err)
		}
	}
}

func TestOpenRefusesIncompleteOrEditedModels(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/qwen3moe-dev-a/checkpoint", dir, convert.Options{LastLayer: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "incomplete") || !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("incomplete model: %v", err)
	}
	full := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	os.WriteFile(filepath.Join(full, "generation_config.json"), []byte("{}"), 0o644)
	if _, err := Open(context.Background(), full); err == nil || !strings.Contains(err.Error(), "do not match the manifest") || !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("edited aux file: %v", err)
	}
}

func TestAuxFilesAreVerified(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	m := open(t, dir)
	fsys, err := m.AuxFS()
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "config.json")
	if err != nil || !bytes.Equal(b, m.ConfigBytes()) {
		t.Errorf("config.json from AuxFS: %v", err)
	}
	if ents, err := fs.ReadDir(fsys, "."); err != nil || len(ents) != len(m.aux) {
		t.Errorf("AuxFS lists %d files (%v), the manifest %d", len(ents), err, len(m.aux))
	}
	if _, err := m.AuxFile("layer-00000.jnf"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a JNF file served as an auxiliary file: %v", err)
	}
	// Changed after Open: refused, also when it grew (a read is bounded by
	// the manifest's length).
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte("{}"), 0o644)
	var mm *jnf.MismatchError
	if _, err := m.AuxFile("generation_config.json"); !errors.As(err, &mm) {
		t.Errorf("changed aux file: %v", err)
	}
	if _, err := m.AuxFS(); err == nil {
		t.Error("AuxFS served a changed file")
	}
	os.WriteFile(filepath.Join(dir, "generation_config.json"), bytes.Repeat([]byte(" "), 1<<20), 0o644)
	var le *jnf.LimitError
	if _, err := m.AuxFile("generation_config.json"); !errors.As(err, &le) || !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("grown aux file: %v", err)
	}
}

// BenchmarkVerifyExpert: run-time verification of one real Qwen3.5-122B
// expert record (3 × 1024 × 3072 BF16 = 18 MiB).
func BenchmarkVerifyExpert(b *testing.B) {
	I, H := int64(1024), int64(3072)
	rec := &jnf.Record{Kind: jnf.KindExpert, Name: "model.layers.0.mlp.experts.0", Length: 3 * 2 * I * H, Parts: []jnf.Part{
		{Name: "gate_proj", DType: jnf.BF16, Shape: []int64{I, H}, Offset: 0, Length: 2 * I * H},
		{Name: "up_proj", DType: jnf.BF16, Shape: []int64{I, H}, Offset: 2 * I * H, Length: 2 * I * H},
		{Name: "down_proj", DType: jnf.BF16, Shape: []int64{H, I}, Offset: 4 * I * H, Length: 2 * I * H}}}
	data := make([]byte, rec.Length)
	for i := range data {
		data[i] = byte(i * 7)
	}
	want := jnf.BLAKE3Bytes(data)
	b.SetBytes(rec.Length)
	for range b.N {
		if _, err := mint(jnf.Digest{}, [2]int{}, "f", rec, want, data); err != nil {
			b.Fatal(err)
		}
	}
}

// unsafeBytes reaches the memory behind verified bytes, as only a fault or
// a bug could.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
