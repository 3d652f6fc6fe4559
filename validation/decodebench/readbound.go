package decodebench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tarfa-ai/tarfa/validation/benchrun"
	"github.com/tarfa-ai/tarfa/validation/iobench"
	"github.com/tarfa-ai/tarfa/weights"
)

// ReadBoundResult is the storage bound of a model: every routed expert
// record read once, in file order, with Jobs reads in flight, nothing else
// done with the bytes.
type ReadBoundResult struct {
	Model        string            `json:"model"`
	Host         benchrun.Host     `json:"host"`
	LoadBefore   float64           `json:"load_before"`
	LoadAfter    float64           `json:"load_after"`
	Experts      int               `json:"experts"` // records read per figure
	Bytes        int64             `json:"bytes"`   // read per figure (aligned read lengths)
	CacheDropped bool              `json:"cache_dropped"`
	CacheNote    string            `json:"cache_note,omitempty"`
	Figures      []ReadBoundFigure `json:"figures"`
	Best         ReadBoundFigure   `json:"best"` // the fastest: the bound
}

// ReadBoundFigure is one read of every record.
type ReadBoundFigure struct {
	Jobs    int     `json:"jobs"`
	Direct  bool    `json:"direct"` // every read bypassed the page cache (O_DIRECT)
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gbps"`
}

// ReadBound reads every routed expert record of the JNF model in dir once
// for each entry of jobs (reads in flight), with O_DIRECT where asked and
// the file system allows it, dropping the page cache before each read
// unless noDrop (a drop that fails is noted, and the figures are then
// warm).
func ReadBound(ctx context.Context, dir string, jobs []int, direct, noDrop bool) (*ReadBoundResult, error) {
	if len(jobs) == 0 {
		return nil, errors.New("decodebench: no job counts to read with")
	}
	for _, j := range jobs {
		if j < 1 || j > 1024 {
			return nil, fmt.Errorf("decodebench: %d reads in flight: want 1 to 1024", j)
		}
	}
	ck, err := weights.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	cfg := ck.Config()
	res := &ReadBoundResult{Model: dir, Host: benchrun.ThisHost(), CacheDropped: !noDrop, LoadBefore: benchrun.LoadAverage()}
	var refs []weights.ExpertRef
	size := int64(0)
	for l, sp := range cfg.Sparse {
		if !sp {
			continue
		}
		for e := range cfg.Experts {
			ref, err := ck.ExpertRef(l, e)
			if err != nil {
				return nil, err
			}
			refs = append(refs, ref)
			res.Bytes += ref.ReadLength()
			size = max(size, ref.ReadLength())
		}
	}
	if len(refs) == 0 {
		return nil, errors.New("decodebench: the model has no routed experts")
	}
	res.Experts = len(refs)
	if noDrop {
		res.CacheNote = "page cache not dropped: the figures may come from memory"
	}
	for _, j := range jobs {
		if !noDrop && res.CacheDropped {
			if err := iobench.DropCaches(); err != nil {
				res.CacheDropped, res.CacheNote = false, err.Error()+"; the figures may come from the page cache"
			}
		}
		start := time.Now()
		d, err := rawRead(ctx, refs, j, direct, int(size))
		if err != nil {
			return nil, err
		}
		s := time.Since(start).Seconds()
		f := ReadBoundFigure{Jobs: j, Direct: d, Seconds: s, GBps: float64(res.Bytes) / s / 1e9}
		res.Figures = append(res.Figures, f)
		if f.GBps > res.Best.GBps {
			res.Best = f
		}
	}
	res.LoadAfter = benchrun.LoadAverage()
	return res, nil
}
