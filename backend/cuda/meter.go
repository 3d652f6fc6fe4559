//go:build cuda

package cuda

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/backend"
)

// meter holds the backend's counters (backend.Meter). Bytes and counts
// are added when an operation is enqueued; device times when a queue's
// synchronisation has completed the timed work (Options.Timing).
type meter struct {
	h2d, h2dCopies, expertH2D, d2h atomic.Int64
	kernels, loaded, cached, host  atomic.Int64
	direct                         atomic.Int64
	upload                         atomic.Int64
	h2dNs, kernelNs                atomic.Int64
	verified, verifiedBytes        atomic.Int64
	scrubbedBytes, verifyFailures  atomic.Int64
	waitNs, waits                  atomic.Int64 // drain's synchronisations

	// byName are the timed kernels' launches and device time by the name
	// of their operation (Options.Timing), added under mu by collect.
	mu     sync.Mutex
	byName map[string]backend.KernelTime
}

var _ backend.Meter = (*Backend)(nil)

// Counters reports the backend's counters: the bytes every queue copied
// each way (activations, index lists, streamed experts), the kernels
// launched, the experts loaded, served resident and computed on the host,
// the bytes of weights uploaded; with Options.Timing, the device time of
// the kernels and of the host-to-device copies, measured with CUDA events
// around each.
func (b *Backend) Counters() backend.Counters {
	m := &b.meter
	m.mu.Lock()
	byName := maps.Clone(m.byName)
	m.mu.Unlock()
	return backend.Counters{
		KernelTimes: byName,
		H2DBytes:    m.h2d.Load(), H2DCopies: m.h2dCopies.Load(), ExpertH2DBytes: m.expertH2D.Load(),
		H2DSeconds: time.Duration(m.h2dNs.Load()).Seconds(), D2HBytes: m.d2h.Load(),
		Kernels: m.kernels.Load(), KernelSeconds: time.Duration(m.kernelNs.Load()).Seconds(),
		ExpertsLoaded: m.loaded.Load(), ExpertsDirect: m.direct.Load(), ExpertsCached: m.cached.Load(), HostExperts: m.host.Load(),
		UploadBytes:    m.upload.Load(),
		DeviceVerified: m.verified.Load(), DeviceVerifiedBytes: m.verifiedBytes.Load(),
		DeviceScrubbedBytes: m.scrubbedBytes.Load(), DeviceVerifyFailures: m.verifyFailures.Load(),
		WaitSeconds: time.Duration(m.waitNs.Load()).Seconds(), Waits: m.waits.Load(),
	}
}

// timed is a pair of timing events around one kernel or copy.
type timed struct {
	start, end cu.Event
	copy       bool
	name       string // the kernel's operation (launchOn)
}

// event returns a timing event from the queue's pool.
func (q *Queue) event() (cu.Event, bool) {
	if n := len(q.evPool); n > 0 {
		ev := q.evPool[n-1]
		q.evPool = q.evPool[:n-1]
		return ev, true
	}
	ev, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		q.check("timing event", err)
		return ev, false
	}
	q.evAll = append(q.evAll, ev)
	return ev, true
}

// timeStart records the start of a timed operation on stream s; timeEnd
// (with its result) records its end. Without Options.Timing they do
// nothing.
func (q *Queue) timeStart(s cu.Stream) (cu.Event, bool) {
	if !q.b.o.Timing || !q.ok() {
		return cu.Event{}, false
	}
	ev, ok := q.event()
	if ok {
		q.check("timing event", ev.Record(s))
	}
	return ev, ok
}

func (q *Queue) timeEnd(s cu.Stream, start cu.Event, ok, isCopy bool, name string) {
	if !ok {
		return
	}
	end, ok := q.event()
	if !ok {
		q.evPool = append(q.evPool, start)
		return
	}
	q.check("timing event", end.Record(s))
	q.timings = append(q.timings, timed{start: start, end: end, copy: isCopy, name: name})
}

// collect adds the device times of the completed timed operations to the
// backend's counters and returns their events to the pool (after both
// streams were synchronised).
func (q *Queue) collect() {
	m := &q.b.meter
	if len(q.timings) > 0 {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.byName == nil {
			m.byName = make(map[string]backend.KernelTime)
		}
	}
	for _, t := range q.timings {
		if ms, err := t.start.Elapsed(t.end); err == nil {
			ns := int64(ms * 1e6)
			if t.copy {
				m.h2dNs.Add(ns)
			} else {
				m.kernelNs.Add(ns)
				k := m.byName[t.name]
				k.Launches++
				k.Seconds += time.Duration(ns).Seconds()
				m.byName[t.name] = k
			}
		} else {
			q.check("timing", err)
		}
		q.evPool = append(q.evPool, t.start, t.end)
	}
	clear(q.timings)
	q.timings = q.timings[:0]
}

// destroyEvents destroys the queue's timing events.
func (q *Queue) destroyEvents() {
	for j := range q.evAll {
		cu.DestroyEvent(&q.evAll[j])
	}
	q.evAll, q.evPool, q.timings = nil, nil, nil
}
