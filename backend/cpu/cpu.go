// Package cpu is the pure-Go reference implementation of backend.Backend.
// Its queue runs each operation as it is enqueued, on host memory (Go
// slices), and its weights view the verified bytes in place.
//
// It is the definition of Tarfa's canonical arithmetic in executable form
// (see package canon and EXACTNESS.md): every output element is computed by
// exactly one goroutine with the canonical reduction order, so results are
// bit-identical for every thread count, batch size and prompt chunking.
// Work is split over rows, heads, channels or tokens by a fixed pool of
// worker goroutines; weights stay BF16 and are widened to float32 on the
// fly. In steady state an operation allocates nothing.
package cpu

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tarfa-ai/tarfa/backend"
)

// CPU is the CPU backend. It is safe for concurrent use.
type CPU struct {
	threads int
	minWork int
	tasks   chan *task   // to the threads−1 workers; nil when threads == 1
	loaded  atomic.Int64 // LoadExpert and FillSlot calls (Counters)
	cached  atomic.Int64 // BindSlot calls (Counters)
	slotState
}

var _ backend.Backend = (*CPU)(nil)

// DefaultMinParallelWork is the smallest job (in multiply-adds) that is
// split across goroutines; smaller jobs run on the calling goroutine.
const DefaultMinParallelWork = 1 << 15

// New returns a CPU backend using up to threads goroutines per operation
// (threads <= 0 means GOMAXPROCS). Its threads−1 worker goroutines end when
// the backend becomes unreachable.
func New(threads int) *CPU {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	c := &CPU{threads: threads, minWork: DefaultMinParallelWork}
	if threads > 1 {
		c.tasks = make(chan *task, 4*threads)
		for range threads - 1 {
			go worker(c.tasks)
		}
		runtime.AddCleanup(c, func(ch chan *task) { close(ch) }, c.tasks)
	}
	return c
}

// SetMinParallelWork sets the smallest job that is split across goroutines
// (0 splits every job; tests use it to exercise the parallel paths on tiny
// models). It changes only speed, never results.
func (c *CPU) SetMinParallelWork(n int) { c.minWork = max(n, 0) }

func (c *CPU) Name() string { return "cpu" }
func (c *CPU) Threads() int { return c.threads }

// job is one operation's work over the item range [lo, hi).
type job interface{ run(lo, hi int) }

// task is a job being split into blocks that the caller and the workers
// claim in turn.
type task struct {
	j      job
	n      int
	blocks int
	next   atomic.Int64
	wg     sync.WaitGroup
}

var taskPool = sync.Pool{New: func() any { return new(task) }}

func (t *task) work() {
	for {
		b := int(t.next.Add(1) - 1)
		if b >= t.blocks {
			return
		}
		t.j.run(b*t.n/t.blocks, (b+1)*t.n/t.blocks)
	}
}

func worker(tasks chan *task) {
	for t := range tasks {
		t.work()
		t.wg.Done()
	}
}

// par runs j on disjoint blocks covering [0, n); work is the approximate
// cost of one item. Which goroutine runs a block never changes a result.
func (c *CPU) par(n, work int, j job) {
	if n <= 0 {
		return
	}
	if c.tasks == nil || n == 1 || n*work < c.minWork {
		j.run(0, n)
		return
	}
	helpers := min(c.threads, n) - 1
	t := taskPool.Get().(*task)
	t.j, t.n, t.blocks = j, n, min(n, 4*(helpers+1))
	t.next.Store(0)
	t.wg.Add(helpers)
	for range helpers {
		c.tasks <- t
	}
	t.work()
	t.wg.Wait()
	t.j = nil
	taskPool.Put(t)
}

// exec copies the job value v into a pooled job, runs it with par and
// returns it to the pool: no allocation per operation.
func exec[J any, P interface {
	*J
	job
}](c *CPU, pool *sync.Pool, n, work int, v J) {
	p, _ := pool.Get().(P)
	if p == nil {
		p = P(new(J))
	}
	*p = v
	c.par(n, work, p)
	var zero J
	*p = zero
	pool.Put(p)
}

// scratch hands out reusable float32 buffers.
var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		// Round up so that a slowly growing need (attention over a growing
		// context) reallocates only O(log n) times.
		*p = make([]float32, n, 1<<bits.Len(uint(n-1)))
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
