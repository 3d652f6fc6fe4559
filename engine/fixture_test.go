package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
	"github.com/tarfa-ai/tarfa/weights"
)

// The conformance fixtures: copies of the Hugging Face outputs in
// validation/testdata (see PROVENANCE.md there). They are required: a
// missing fixture fails the tests.
const fixtures = "../validation/testdata/fixtures/"

var (
	tmpRoot   string
	convMu    sync.Mutex
	converted = map[string]*weights.Checkpoint{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "tarfa-engine-test-")
	if err != nil {
		panic(err)
	}
	tmpRoot = d
	code := m.Run()
	convMu.Lock()
	for _, am := range converted {
		am.Close()
	}
	convMu.Unlock()
	os.RemoveAll(d)
	os.Exit(code)
}

// attested converts a fixture checkpoint to JNF (once per test binary) and
// opens it with weights.Open: the production path.
func attested(t testing.TB, ckpt string) *weights.Checkpoint {
	t.Helper()
	convMu.Lock()
	defer convMu.Unlock()
	if am, ok := converted[ckpt]; ok {
		return am
	}
	dst := filepath.Join(tmpRoot, filepath.FromSlash(ckpt))
	if _, err := convert.Convert(context.Background(), fixtures+ckpt, dst, convert.Options{LastLayer: -1}); err != nil {
		t.Fatalf("convert %s: %v", ckpt, err)
	}
	am, err := weights.Open(context.Background(), dst)
	if err != nil {
		t.Fatalf("open %s: %v", ckpt, err)
	}
	converted[ckpt] = am
	return am
}

// load opens a fixture and loads it on a CPU backend with the given threads;
// forceParallel splits every operation across goroutines however small.
func load(t testing.TB, ckpt string, threads int, forceParallel bool) *Model {
	t.Helper()
	be := cpu.New(threads)
	if forceParallel {
		be.SetMinParallelWork(0)
	}
	return loadWith(t, ckpt, Options{Backend: be})
}

// loadWith loads a fixture through weights.Open with opt.
func loadWith(t testing.TB, ckpt string, opt Options) *Model {
	t.Helper()
	am := attested(t, ckpt)
	m, err := Load(am, opt)
	if err != nil {
		t.Fatalf("load %s: %v", ckpt, err)
	}
	return m
}

type reference struct {
	Prompts [][]int          `json:"prompts"`
	Greedy  map[string][]int `json:"greedy"`
	Atol    float64          `json:"atol"`
	logits  [][]float32      // per prompt: len(prompt)×vocab, fp32 reference
}

func readReference(t testing.TB, fixture string) *reference {
	t.Helper()
	b, err := os.ReadFile(fixtures + fixture + "/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s/reference.json: %v", fixture, err)
	}
	if r.Atol == 0 {
		r.Atol = 5e-4
	}
	f, err := safetensors.Open(fixtures + fixture + "/reference.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range r.Prompts {
		name := "prompt" + itoa(i) + ".logits.fp32"
		ti, data, err := f.ReadTensor(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ti.DType != jnf.F32 || len(ti.Shape) != 2 || ti.Shape[0] != int64(len(r.Prompts[i])) {
			t.Fatalf("%s: %s %v", name, ti.DType, ti.Shape)
		}
		v := make([]float32, len(data)/4)
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*j:]))
		}
		r.logits = append(r.logits, v)
	}
	return &r
}

func itoa(i int) string { return string(rune('0' + i)) }

// bitsEqual reports whether a and b hold identical float32 bit patterns.
func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// logitsDigest is the SHA-256 of the little-endian float32 bits of rows.
func logitsDigest(rows [][]float32) string {
	h := sha256.New()
	var b [4]byte
	for _, r := range rows {
		for _, f := range r {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
