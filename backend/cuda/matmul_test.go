//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// TestCUDAMatMulFourRows runs the conformance suite with every MatMul on
// the four-rows-a-warp kernels (Options.MatMulRows 4), one token included,
// against the CPU reference: the suite's weights have 1, 5, 33 and 300
// rows, so the last warp of a product also holds fewer than four.
func TestCUDAMatMulFourRows(t *testing.T) {
	be := open(t, Options{MatMulRows: 4})
	backendtest.Run(t, be, backendtest.Options{Slots: true})
}

// TestCUDAMatMulDepthOne: the whole suite with one chunk in flight a lane
// (the default is four; the bits must not change).
func TestCUDAMatMulDepthOne(t *testing.T) {
	be := open(t, Options{MatMulDepth: 1})
	backendtest.Run(t, be, backendtest.Options{Slots: true})
}

// TestMatMulDepthOption: a MatMulDepth other than 0, 1 and 4 is refused;
// 0 chooses four.
func TestMatMulDepthOption(t *testing.T) {
	if _, err := New(Options{MatMulDepth: 2}); err == nil {
		t.Fatal("MatMulDepth 2 accepted")
	}
	if got := open(t, Options{}).(*Backend).matMulDepth(); got != 4 {
		t.Errorf("default depth %d, want 4", got)
	}
}

// TestMatMulOneToken: the one-token kernels run for products of one token
// unless MatMulRows or MatMulDepth force a kernel (so that the forced
// suites run the others at one token too).
func TestMatMulOneToken(t *testing.T) {
	for _, c := range []struct {
		o    Options
		T    int
		want bool
	}{
		{Options{}, 1, true}, {Options{}, 2, false}, {Options{}, 16, false},
		{Options{MatMulRows: 4}, 1, false}, {Options{MatMulRows: 1}, 1, false}, {Options{MatMulDepth: 1}, 1, false},
	} {
		if got := open(t, c.o).(*Backend).matMulOneToken(c.T); got != c.want {
			t.Errorf("%+v, %d tokens: one-token kernels %v, want %v", c.o, c.T, got, c.want)
		}
	}
}

// TestGroupFourRows: the grouped products of 4 tokens or more run four rows
// a warp, and MatMulRows forces either way.
func TestGroupFourRows(t *testing.T) {
	for _, c := range []struct {
		o    Options
		T    int
		want bool
	}{
		{Options{}, 3, false}, {Options{}, 4, true}, {Options{}, 64, true},
		{Options{MatMulRows: 4}, 1, true}, {Options{MatMulRows: 1}, 64, false},
	} {
		if got := open(t, c.o).(*Backend).groupFourRows(c.T); got != c.want {
			t.Errorf("%+v, %d tokens: four rows %v, want %v", c.o, c.T, got, c.want)
		}
	}
}

// TestMatMulRowsOption: a MatMulRows other than 0, 1 and 4 is refused, and
// the choice follows the rule MatMulRows documents.
func TestMatMulRowsOption(t *testing.T) {
	if _, err := New(Options{MatMulRows: 3}); err == nil {
		t.Fatal("MatMulRows 3 accepted")
	}
	b := open(t, Options{}).(*Backend)
	for _, c := range []struct{ N, T, want int }{
		{248320, 16, 4}, {248320, 3, 4}, {248320, 1, 4}, // the LM head
		{300, 64, 1}, // 10 blocks of 32 rows × 8 of 8 tokens: under one a multiprocessor
		{32 * b.sms, 1, 4},
		{32*b.sms - 32, 1, 1},
		{16 * b.sms, 9, 4}, // two token groups
		{16*b.sms - 32, 9, 1},
	} {
		if got := b.matMulRows(c.N, c.T); got != c.want {
			t.Errorf("%d rows, %d tokens, %d multiprocessors: %d rows a warp, want %d", c.N, c.T, b.sms, got, c.want)
		}
	}
}

// BenchmarkMatMul times one BF16 MatMul of Qwen3.5-122B-A10B shapes (the LM
// head, the widest and a narrow projection, a shared expert's up and down)
// for several step sizes, with one and with four weight rows a warp, and
// reports the weight bytes and the products per second.
func BenchmarkMatMul(b *testing.B) {
	be, err := New(Options{})
	if err != nil {
		b.Skipf("no CUDA backend: %v", err)
	}
	defer be.Close()
	shapes := []struct {
		name       string
		rows, cols int
	}{{"head", 248320, 3072}, {"wide", 12288, 3072}, {"proj", 3072, 4096}, {"up", 1024, 3072}, {"down", 3072, 1024}}
	r := rand.New(rand.NewPCG(9, 10))
	// A checkpoint holds its layers' experts: one small one.
	m := &weightstest.Model{Config: []byte(testConfig), Tensors: map[string]jnf.TensorView{},
		Experts: map[weights.ExpertID][3]jnf.TensorView{{Layer: 0, Expert: 0}: {bf16Tensor(r, 24, 256), bf16Tensor(r, 24, 256), bf16Tensor(r, 256, 24)}}}
	for _, s := range shapes {
		m.Tensors[s.name] = bf16Tensor(r, s.rows, s.cols)
	}
	ck := weightstest.Open(b, m)
	q, err := be.NewQueue()
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	cb := be.(*Backend)
	for _, s := range shapes {
		vt, err := ck.Tensor(s.name)
		if err != nil {
			b.Fatal(err)
		}
		lin, err := weights.PlainLinear(vt.View())
		if err != nil {
			b.Fatal(err)
		}
		w := new(backend.Weight)
		if err := be.Upload(w, backend.Key{Digest: vt.Digest()}, lin, s.rows, s.cols, backend.UseMatMul); err != nil {
			b.Fatal(err)
		}
		for _, T := range []int{1, 4, 16, 23, 64} {
			x, err := be.Alloc(T * s.cols)
			if err != nil {
				b.Fatal(err)
			}
			y, err := be.Alloc(T * s.rows)
			if err != nil {
				b.Fatal(err)
			}
			for _, v := range []struct{ rows, depth int }{{1, 1}, {1, 4}, {4, 1}, {0, 0}} { // 0, 0: the default choice
				rows := v.rows
				b.Run(fmt.Sprintf("%s-%dx%d/T=%d/rows=%d/depth=%d", s.name, s.rows, s.cols, T, rows, v.depth), func(b *testing.B) {
					cb.o.MatMulRows, cb.o.MatMulDepth = rows, v.depth
					defer func() { cb.o.MatMulRows, cb.o.MatMulDepth = 0, 0 }()
					q.MatMul(y, w, x, T) // warm
					if err := q.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					t0 := time.Now()
					for range b.N {
						q.MatMul(y, w, x, T)
					}
					if err := q.Sync(); err != nil { // the timer stops after it
						b.Fatal(err)
					}
					per := time.Since(t0).Seconds() / float64(b.N)
					b.ReportMetric(float64(2*s.rows*s.cols)/per/1e9, "weightGB/s")
					b.ReportMetric(float64(T*s.rows*s.cols)/per/1e12, "TMAC/s")
				})
			}
			be.Free(x)
			be.Free(y)
		}
		be.Drop(w)
	}
}
