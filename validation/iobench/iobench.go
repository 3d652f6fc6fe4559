// Package iobench measures convert and verify throughput against the raw
// read and copy of the same bytes in the same run, so that the ratios (not
// the absolute numbers of a shared machine) are what BENCHMARKS.md reports.
package iobench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tarfa-ai/tarfa/jnf/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/verify"
)

// Phase is one measured step.
type Phase struct {
	Name    string  `json:"name"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Ratio is this phase's throughput divided by the raw copy's.
	Ratio float64 `json:"ratio_to_raw_copy"`
}

// GBps is the throughput in 10^9 bytes per second.
func (p Phase) GBps() float64 { return float64(p.Bytes) / p.Seconds / 1e9 }

// Result lists the phases in the order run.
type Result struct {
	Checkpoint string  `json:"checkpoint"`
	Phases     []Phase `json:"phases"`
}

// Run measures, on the checkpoint src with scratch space in dir:
// raw read of every shard, raw copy of every shard into dir, convert
// (workers files in parallel), convert --verify, and verify of the result.
func Run(ctx context.Context, src, dir string, workers int) (*Result, error) {
	ck, err := hf.Open(src)
	if err != nil {
		return nil, err
	}
	var shards []string
	for _, s := range ck.Shards {
		shards = append(shards, filepath.Join(src, s.File))
	}
	ck.Close()
	res := &Result{Checkpoint: src}
	add := func(name string, bytes int64, start time.Time) {
		res.Phases = append(res.Phases, Phase{Name: name, Bytes: bytes, Seconds: time.Since(start).Seconds()})
	}
	// Warm-up read so that every phase sees the same cache state.
	if _, err := readAll(shards); err != nil {
		return nil, err
	}
	t := time.Now()
	n, err := readAll(shards)
	if err != nil {
		return nil, err
	}
	add("raw read (shards)", n, t)

	copyDir := filepath.Join(dir, "rawcopy")
	os.MkdirAll(copyDir, 0o755)
	t = time.Now()
	n, err = copyAll(shards, copyDir, workers)
	if err != nil {
		return nil, err
	}
	add(fmt.Sprintf("raw copy (shards → files, fsync, %d workers)", workers), n, t)
	os.RemoveAll(copyDir)

	for _, v := range []bool{false, true} {
		out := filepath.Join(dir, "jnf")
		os.RemoveAll(out)
		t = time.Now()
		r, err := convert.Convert(ctx, src, out, convert.Options{LastLayer: -1, Workers: workers, Verify: v})
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("tarfa convert (%d workers)", workers)
		if v {
			name += " --verify"
		}
		add(name, r.Bytes, t)
	}
	t = time.Now()
	rep, err := verify.Check(ctx, filepath.Join(dir, "jnf"), verify.CheckOptions{})
	if err != nil {
		return nil, err
	}
	if !rep.OK() {
		return nil, fmt.Errorf("verify found problems: %v", rep.Problems[0])
	}
	add("tarfa verify", rep.BytesChecked, t)
	os.RemoveAll(filepath.Join(dir, "jnf"))

	var copyRate float64
	for _, p := range res.Phases {
		if p.Name[:8] == "raw copy" {
			copyRate = p.GBps()
		}
	}
	for i := range res.Phases {
		res.Phases[i].Ratio = res.Phases[i].GBps() / copyRate
	}
	return res, nil
}

func readAll(paths []string) (int64, error) {
	buf := make([]byte, 4<<20)
	var n int64
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return n, err
		}
		k, err := io.CopyBuffer(io.Discard, f, buf)
		f.Close()
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// copyAll copies the shards into dir with the given number of parallel
// workers (the same parallelism convert gets), each file fsynced.
func copyAll(paths []string, dir string, workers int) (int64, error) {
	if workers <= 0 {
		workers = 1
	}
	var g errgroup.Group
	g.SetLimit(workers)
	var total atomic.Int64
	for _, p := range paths {
		g.Go(func() error {
			n, err := copyFile(p, filepath.Join(dir, filepath.Base(p)), make([]byte, 4<<20))
			total.Add(n)
			return err
		})
	}
	err := g.Wait()
	return total.Load(), err
}

func copyFile(src, dst string, buf []byte) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(out, in, buf)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
