//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package runner

import (
	"context"
	"runtime"
	"testing"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/tier"
)

// allocRunner is the embedded default model with every expert resident in
// the RAM tier and one engine thread: steady-state decoding touches no
// storage.
func allocRunner(tb testing.TB) *Runner {
	tb.Helper()
	dir := defaultModel(tb)
	r, err := Open(context.Background(), dir, Options{Threads: 1, Tier: &tier.Options{RAMBudget: tier.Auto, StagingBudget: tier.Auto}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// schedGen is one greedy generation of exactly n tokens through the
// runner's scheduler (Runner.Generate, the path of run, golden and serve).
func schedGen(tb testing.TB, r *Runner, n int) {
	tb.Helper()
	_, res, err := r.Generate(context.Background(), []int{1, 2, 3}, n, nil, golden.Sampling{}, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if len(res.Tokens) != n {
		tb.Fatalf("generated %d tokens, want %d", len(res.Tokens), n)
	}
}

// TestSchedulerDecodeAllocations: on the scheduler path a decoded token
// allocates at most 2 objects in steady state. Per-request costs (the
// session, the stream, the result) cancel out of the difference between a
// long and a short generation.
func TestSchedulerDecodeAllocations(t *testing.T) {
	r := allocRunner(t)
	const short, long = 8, 136
	gen := func(n int) float64 {
		return testing.AllocsPerRun(5, func() { schedGen(t, r, n) })
	}
	gen(long) // warm: every expert cached, every buffer grown
	a, b := gen(short), gen(long)
	per := (b - a) / (long - short)
	t.Logf("%v allocations for %d tokens, %v for %d: %.2f per decoded token", a, short, b, long, per)
	if per > 2 {
		t.Errorf("%.2f allocations per decoded token on the scheduler path, want at most 2", per)
	}
}

// BenchmarkSchedulerDecode: 256-token greedy generations through the
// runner's scheduler (Runner.Generate: Scheduler.Submit, Batch.Step,
// Stream.Next); allocs/token and B/token are per generated token of the
// whole request (its per-request costs, about 290 objects, included),
// ns/token the wall time per token.
func BenchmarkSchedulerDecode(b *testing.B) {
	r := allocRunner(b)
	const n = 256
	schedGen(b, r, n) // warm
	var m0, m1 runtime.MemStats
	b.ReportAllocs()
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for range b.N {
		schedGen(b, r, n)
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	toks := float64(n * b.N)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/toks, "allocs/token")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/toks, "B/token")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/toks, "ns/token")
}
