package runner

import (
	"fmt"
	"io"
	"sync"

	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// traceRecorder writes the routing of every generation as a measured trace
// (tier/trace): the sessions' positions become consecutive trace tokens, and
// the model's MoE layers the trace's layers 0, 1, ….
type traceRecorder struct {
	mu      sync.Mutex
	w       *trace.Writer
	moe     []int // model layer → trace layer (−1: dense)
	base    int   // trace token of the current session's position 0
	maxPos  int   // last position seen in the current session
	scratch []int
	err     error
}

func newTraceRecorder(w io.Writer, r *Runner) (*traceRecorder, error) {
	t := &traceRecorder{moe: make([]int, r.Config.Layers), maxPos: -1}
	n := 0
	for l, sparse := range r.Config.Sparse {
		t.moe[l] = -1
		if sparse {
			t.moe[l] = n
			n++
		}
	}
	h := trace.Header{Format: trace.Format, Version: trace.Version, ModelRoot: r.Checkpoint.Root().String(), Layers: n,
		Experts: r.Config.Experts, TopK: r.Config.TopK, Source: trace.Measured}
	if n > 0 {
		for l, sparse := range r.Config.Sparse {
			if sparse {
				h.ExpertBytes = r.Checkpoint.ExpertBytes(l, 0)
				break
			}
		}
	}
	var err error
	if t.w, err = trace.NewWriter(w, h); err != nil {
		return nil, err
	}
	return t, nil
}

// observe records the routing l commits.
func (t *traceRecorder) observe(l *ledger.Ledger) {
	l.SetRouteObserver(func(pos, layer int, experts []int32) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.err != nil || t.moe[layer] < 0 {
			return
		}
		t.scratch = t.scratch[:0]
		for _, e := range experts {
			t.scratch = append(t.scratch, int(e))
		}
		t.maxPos = max(t.maxPos, pos)
		if err := t.w.Write(t.base+pos, t.moe[layer], t.scratch); err != nil {
			t.err = fmt.Errorf("routing trace: %w", err)
		}
	})
}

// endSession moves the next session's positions after this one's.
func (t *traceRecorder) endSession() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.base += t.maxPos + 1
	t.maxPos = -1
}

func (t *traceRecorder) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return t.w.Close()
}
