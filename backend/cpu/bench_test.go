package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
)

// BenchmarkMatMul: BF16 weight streaming for 1 to 64 tokens (decode
// batches, a prefill chunk) on three shapes: 2048×2048 (8 MiB) and the two
// halves of a routed expert of Qwen3.5-122B (gate or up 1024×3072, down
// 3072×1024); MB/s counts weight bytes, GFLOP/s 2·N·K·T.
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range [][2]int{{2048, 2048}, {1024, 3072}, {3072, 1024}} {
		N, K := sh[0], sh[1]
		w := bf16Mat(r, N, K)
		for _, T := range []int{1, 2, 4, 8, 16, 64} {
			for _, th := range []int{1, runtime.GOMAXPROCS(0)} {
				b.Run(fmt.Sprintf("%dx%d/T=%d/threads=%d", N, K, T, th), func(b *testing.B) {
					c := New(th)
					x := rnd(r, T*K, 1)
					y := make([]float32, T*N)
					q, yb, xb, wt := c.NewHostQueue(), Wrap(y), Wrap(x), &backend.Weight{Host: *w}
					b.SetBytes(int64(2 * N * K))
					b.ReportAllocs()
					for range b.N {
						q.MatMul(yb, wt, xb, T)
					}
					if err := q.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(2*N*K*T*b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkMatMulFP8: the block-FP8 product (128×128 blocks) of the shape
// of BenchmarkMatMul, beside the BF16 one; MB/s counts weight bytes (codes
// and scales), GFLOP/s 2·N·K·T.
func BenchmarkMatMulFP8(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	N, K := 2048, 2048
	w8 := fp8Mat(r, N, K, 128, 128)
	w16 := bf16Mat(r, N, K)
	for _, T := range []int{1, 4, 64} {
		for _, th := range []int{1, runtime.GOMAXPROCS(0)} {
			for _, m := range []struct {
				name  string
				w     *backend.Mat
				bytes int64
			}{{"fp8", w8, int64(N*K + 4*len(w8.Scale))}, {"bf16", w16, int64(2 * N * K)}} {
				b.Run(fmt.Sprintf("%s/T=%d/threads=%d", m.name, T, th), func(b *testing.B) {
					c := New(th)
					x := rnd(r, T*K, 1)
					y := make([]float32, T*N)
					q, yb, xb, wt := c.NewHostQueue(), Wrap(y), Wrap(x), &backend.Weight{Host: *m.w}
					b.SetBytes(m.bytes)
					b.ReportAllocs()
					for range b.N {
						q.MatMul(yb, wt, xb, T)
					}
					if err := q.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(2*N*K*T*b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
