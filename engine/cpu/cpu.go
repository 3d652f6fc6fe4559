// Package cpu is the pure-Go reference implementation of backend.Backend.
//
// It is the definition of Tarfa's canonical arithmetic in executable form
// (see package canon and EXACTNESS.md): every output element is computed by
// exactly one goroutine with the canonical reduction order, so results are
// bit-identical for every thread count, batch size and prompt chunking.
// Work is split over rows, heads, channels or experts with goroutines; weights
// stay BF16 and are widened to float32 on the fly.
package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/engine/backend"
)

// CPU is the CPU backend. It is safe for concurrent use.
type CPU struct {
	threads int
	minWork int
}

var _ backend.Backend = (*CPU)(nil)

// DefaultMinParallelWork is the smallest job (in multiply-adds) that is
// split across goroutines; smaller jobs run on the calling goroutine.
const DefaultMinParallelWork = 1 << 15

// New returns a CPU backend using up to threads goroutines per operation
// (threads <= 0 means GOMAXPROCS).
func New(threads int) *CPU {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &CPU{threads: threads, minWork: DefaultMinParallelWork}
}

// SetMinParallelWork sets the smallest job that is split across goroutines
// (0 splits every job; tests use it to exercise the parallel paths on tiny
// models). It changes only speed, never results.
func (c *CPU) SetMinParallelWork(n int) { c.minWork = max(n, 0) }

func (c *CPU) Name() string { return "cpu" }
func (c *CPU) Threads() int { return c.threads }

// par calls fn on disjoint blocks [lo,hi) covering [0,n). work is the
// approximate cost of one item.
func (c *CPU) par(n, work int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if c.threads <= 1 || n == 1 || n*work < c.minWork {
		fn(0, n)
		return
	}
	workers := min(c.threads, n)
	blocks := min(n, 4*workers)
	var next atomic.Int64
	run := func() {
		for {
			b := int(next.Add(1) - 1)
			if b >= blocks {
				return
			}
			fn(b*n/blocks, (b+1)*n/blocks)
		}
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for range workers - 1 {
		go func() {
			defer wg.Done()
			run()
		}()
	}
	run()
	wg.Wait()
}

// scratch hands out reusable float32 buffers.
var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

func putScratch(p *[]float32) { scratchPool.Put(p) }

func need(what string, got, want int) {
	if got < want {
		panic("cpu: " + what + ": slice too short")
	}
}
