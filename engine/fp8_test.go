package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/weights"
)

// fp8Checkpoints are the synthetic block-FP8 checkpoints in the official
// layout (validation/testdata/synthref-fp8/PROVENANCE.md).
var fp8Checkpoints = []string{"q3-fp8", "q35-fp8"}

// convertFP8 converts one of them and opens the result.
func convertFP8(t testing.TB, name string) *weights.Checkpoint {
	t.Helper()
	src := filepath.Join("..", "validation", "testdata", "synthref-fp8", name, "checkpoint")
	dst := filepath.Join(t.TempDir(), "model")
	if _, err := convert.Convert(context.Background(), src, dst, convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	ck, err := weights.Open(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestFP8AgainstFloat64 runs the block-FP8 checkpoints on the CPU and
// compares every logit with the float64 reference, which quantises the
// activations as transformers' FP8Linear does but shares no code with the
// engine. The two differ where an activation lies within rounding of a
// boundary between two E4M3 codes, so the bound is looser than the BF16
// one; the greedy tokens must agree. Batch, chunking and threads give the
// same bits, as for BF16.
func TestFP8AgainstFloat64(t *testing.T) {
	for i, name := range fp8Checkpoints {
		t.Run(name, func(t *testing.T) {
			ck := convertFP8(t, name)
			cfg := ck.Config()
			if cfg.Quant == nil {
				t.Fatal("the converted checkpoint has no quantization_config")
			}
			m, err := Load(ck, Options{Threads: 1, CheckExperts: true})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(i), 8))
			toks := make([]int, 40)
			for j := range toks {
				toks[j] = r.IntN(cfg.Vocab)
			}
			got := allLogits(t, m, toks, []int{len(toks)})
			want := (&ref64{cfg: cfg, w: ck}).forward(toks)
			worst, scale, agree := 0.0, 0.0, 0
			for p := range toks {
				best, bestRef := 0, 0
				for j := range want[p] {
					worst = math.Max(worst, math.Abs(float64(got[p][j])-want[p][j]))
					scale = math.Max(scale, math.Abs(want[p][j]))
					if got[p][j] > got[p][best] {
						best = j
					}
					if want[p][j] > want[p][bestRef] {
						bestRef = j
					}
				}
				if best == bestRef {
					agree++
				}
			}
			t.Logf("%d positions: max|Δ| vs float64 = %.3g (max |logit| %.3g), argmax agrees at %d", len(toks), worst, scale, agree)
			if tol := 2e-3 * math.Max(1, scale); worst > tol {
				t.Errorf("max|Δ| vs float64 = %.3g, want <= %.3g", worst, tol)
			}
			if agree != len(toks) {
				t.Errorf("argmax agrees at %d of %d positions", agree, len(toks))
			}
			compareAll(t, "decode vs prefill", allLogits(t, m, toks, ones(len(toks))), got)
			be := cpu.New(3)
			be.SetMinParallelWork(0)
			mp, err := Load(ck, Options{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			compareAll(t, "3 threads (forced parallel) vs 1", allLogits(t, mp, toks, randomChunks(len(toks), 11)), got)
		})
	}
}

// TestFP8WeightsAreNotBF16: the engine computes a block-FP8 matrix as one,
// and a BF16 engine path given its codes is refused (no matrix of F8 codes
// is ever read as another dtype).
func TestFP8WeightsAreNotBF16(t *testing.T) {
	ck := convertFP8(t, "q35-fp8")
	vt, err := ck.Tensor("model.layers.0.linear_attn.in_proj_qkv.weight")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weights.PlainLinear(vt.View()); err == nil {
		t.Fatal("PlainLinear of F8_E4M3 codes: no error")
	}
	st, err := ck.Tensor("model.layers.0.linear_attn.in_proj_z.weight_scale_inv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := weights.BlockLinear(vt, st); err == nil {
		t.Fatal("BlockLinear with another matrix's scales: no error")
	}
	own, err := ck.Tensor(weights.ScaleName(vt.Name()))
	if err != nil {
		t.Fatal(err)
	}
	l, err := weights.BlockLinear(vt, own)
	if err != nil || !l.Quantized() {
		t.Fatalf("BlockLinear with its own scales: %v", err)
	}
	if _, err := Load(ck, Options{Backend: fp8Refuser{cpu.New(1)}}); !errors.Is(err, errRefused) {
		t.Fatalf("a backend refusing block-FP8: Load gives %v", err)
	}
}

var errRefused = errors.New("refused")

// fp8Refuser is the CPU backend refusing every block-FP8 matrix, as a
// backend without the kernel does (cuda today).
type fp8Refuser struct{ *cpu.CPU }

func (f fp8Refuser) Upload(w *backend.Weight, key backend.Key, l weights.Linear, rows, cols int, use backend.Use) error {
	if l.Quantized() {
		return errRefused
	}
	return f.CPU.Upload(w, key, l, rows, cols, use)
}
