// Package iobench measures tarfa convert and tarfa verify against the raw
// copy and the raw read of the same bytes, on the same disk, in the same
// run, so that the ratios (not the absolute numbers of a shared machine) are
// what BENCHMARKS.md reports.
//
// # Method
//
// Every round runs the arms in one fixed order, and Options.Repeat rounds
// are run (A B C … A B C …, see package benchrun); each figure is the
// minimum, median and maximum over the rounds, and a ratio is the ratio of
// the medians of a figure and its baseline.
//
// Like is compared with like. convert (read, hash, write, fsync) is
// compared with a raw copy of the source shards into files with fsync, with
// the same number of parallel workers; verify (read, hash) with a raw read
// of the same files. Before every run of a cold arm the page cache is
// dropped (sync, then 3 into /proc/sys/vm/drop_caches: root on Linux), so
// that disk is compared with disk; the raw read uses O_DIRECT when the file
// system allows it and falls back to a buffered read of a dropped cache.
// When the cache cannot be dropped, every figure is measured warm (the
// inputs read once, untimed, before every run: memory compared with
// memory) and the Result says why. Options.Warm adds the warm read pair to
// a cold run.
package iobench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/validation/benchrun"
	"github.com/tarfa-ai/tarfa/verify"
)

// Cache states of a figure.
const (
	// CacheCold: the page cache was dropped before every run.
	CacheCold = "cold"
	// CacheDirect: read with O_DIRECT, past the page cache (dropped too).
	CacheDirect = "O_DIRECT"
	// CacheWarm: the inputs were read once, untimed, before every run, so
	// that they are served from memory (writes still go to the disk).
	CacheWarm = "warm"
)

// Options configures Run.
type Options struct {
	// Workers is the number of files converted, copied and read in
	// parallel (default 2); verify hashes records on GOMAXPROCS cores.
	Workers int
	// Repeat is the number of rounds (default 5).
	Repeat int
	// Warm adds a raw read and a verify with the files in the page cache
	// to a cold run.
	Warm bool
	// DropCaches empties the page cache (nil: DropCaches). Tests replace it.
	DropCaches func() error
	// Progress, if not nil, is called with the bytes done and an estimate
	// of the bytes of all rounds, from one goroutine at a time.
	Progress func(done, total int64)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Figure is one arm's measurement over all rounds.
type Figure struct {
	Name string `json:"name"`
	// Baseline names the figure this one is compared with ("" for a baseline).
	Baseline string `json:"baseline,omitempty"`
	// Cache is CacheCold, CacheDirect or CacheWarm.
	Cache string `json:"cache"`
	// Note says why the cache state is not the one asked for, if it is not.
	Note string `json:"note,omitempty"`
	// Bytes is the input of one run: the source shards for the copy and
	// convert, the files of the JNF directory for the read and verify. A
	// figure and its baseline process the same bytes.
	Bytes   int64            `json:"bytes"`
	Seconds benchrun.Summary `json:"seconds"`
	GBps    benchrun.Summary `json:"gb_per_s"` // 10^9 bytes per second
	// Rounds are the seconds of every run, in round order.
	Rounds []float64 `json:"seconds_per_round"`
	// Ratio is GBps.Median ÷ the baseline's GBps.Median (0 for a baseline).
	Ratio float64 `json:"ratio_to_baseline,omitempty"`
	// PairRatio summarises the same ratio taken round by round.
	PairRatio benchrun.Summary `json:"pair_ratio,omitzero"`
}

// Result is a whole run.
type Result struct {
	Checkpoint string        `json:"checkpoint"`
	Host       benchrun.Host `json:"host"`
	Started    time.Time     `json:"started"`
	// LoadBefore and LoadAfter are the 1-minute load averages (-1: unknown).
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
	Repeat     int     `json:"repeat"`
	Workers    int     `json:"workers"`
	// CacheDropped says whether the page cache could be dropped; when not,
	// CacheError says why and every figure is warm.
	CacheDropped bool   `json:"cache_dropped"`
	CacheError   string `json:"cache_error,omitempty"`
	// Order is the order of the arms within each round.
	Order   []string `json:"order"`
	Figures []Figure `json:"figures"`
}

// Figure returns the figure called name, or nil.
func (r *Result) Figure(name string) *Figure {
	for i := range r.Figures {
		if r.Figures[i].Name == name {
			return &r.Figures[i]
		}
	}
	return nil
}

// Arm names.
const (
	ArmCopy          = "raw copy"
	ArmConvert       = "tarfa convert"
	ArmConvertVerify = "tarfa convert --verify"
	ArmRead          = "raw read"
	ArmVerify        = "tarfa verify"
	ArmReadWarm      = "raw read (page cache)"
	ArmVerifyWarm    = "tarfa verify (page cache)"
)

// Run measures convert and verify of the Hugging Face checkpoint src with
// their baselines. Its scratch files go into a new directory that Run
// creates inside scratch (os.TempDir() when ""), and removes when it
// returns, on an error or a cancelled ctx too; nothing else in scratch is
// touched. scratch needs room for two copies of the checkpoint.
func Run(ctx context.Context, src, scratch string, opt Options) (_ *Result, err error) {
	if opt.Workers == 0 {
		opt.Workers = 2
	}
	if opt.Repeat == 0 {
		opt.Repeat = 5
	}
	if opt.Workers < 1 || opt.Repeat < 1 {
		return nil, fmt.Errorf("iobench: workers %d and repeat %d, want both at least 1", opt.Workers, opt.Repeat)
	}
	if opt.DropCaches == nil {
		opt.DropCaches = DropCaches
	}
	ck, err := hf.Open(src)
	if err != nil {
		return nil, err
	}
	var shards []string
	var shardBytes int64
	for _, s := range ck.Shards {
		p := filepath.Join(src, s.File)
		fi, err := os.Stat(p)
		if err != nil {
			ck.Close()
			return nil, err
		}
		shards = append(shards, p)
		shardBytes += fi.Size()
	}
	ck.Close()
	if scratch == "" {
		scratch = os.TempDir()
	}
	work, err := os.MkdirTemp(scratch, "tarfa-iobench-")
	if err != nil {
		return nil, fmt.Errorf("iobench: scratch directory: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = fmt.Errorf("iobench: removing the scratch directory: %w", rerr)
		}
	}()

	b := &bench{opt: opt, src: src, shards: shards,
		copyDir: filepath.Join(work, "rawcopy"), jnfDir: filepath.Join(work, "jnf")}
	res := &Result{Checkpoint: src, Host: benchrun.ThisHost(), Started: time.Now().UTC(),
		LoadBefore: benchrun.LoadAverage(), Repeat: opt.Repeat, Workers: opt.Workers}
	cold := CacheCold
	if err := opt.DropCaches(); err != nil {
		res.CacheError = err.Error()
		cold = CacheWarm
	} else {
		res.CacheDropped = true
	}
	type arm struct {
		benchrun.Arm
		baseline, cache string
		bytes           func() int64
	}
	shardSize := func() int64 { return shardBytes }
	jnfSize := func() int64 { return b.jnfBytes }
	prepare := func(remove string, inputs func() []string, cache string) func(context.Context) error {
		return func(ctx context.Context) error {
			if remove != "" {
				if err := os.RemoveAll(remove); err != nil {
					return err
				}
			}
			if cache == CacheWarm {
				_, err := b.read(ctx, inputs(), false, nil)
				return err
			}
			return opt.DropCaches()
		}
	}
	srcFiles := func() []string { return shards }
	copyName := fmt.Sprintf("%s (shards → files, fsync, %d workers)", ArmCopy, opt.Workers)
	arms := []arm{
		{benchrun.Arm{Name: copyName, Prepare: prepare(b.copyDir, srcFiles, cold), Run: b.copy,
			After: func(context.Context) error { return os.RemoveAll(b.copyDir) }}, "", cold, shardSize},
		{benchrun.Arm{Name: ArmConvert, Prepare: prepare(b.jnfDir, srcFiles, cold), Run: b.convert(false)}, copyName, cold, shardSize},
		// The JNF directory written here is what the read and verify arms read.
		{benchrun.Arm{Name: ArmConvertVerify, Prepare: prepare(b.jnfDir, srcFiles, cold), Run: b.convert(true)}, copyName, cold, shardSize},
	}
	if res.CacheDropped {
		arms = append(arms,
			arm{benchrun.Arm{Name: ArmRead, Prepare: prepare("", b.jnfFiles, CacheCold), Run: b.rawRead}, "", CacheDirect, jnfSize},
			arm{benchrun.Arm{Name: ArmVerify, Prepare: prepare("", b.jnfFiles, CacheCold), Run: b.verify}, ArmRead, CacheCold, jnfSize})
	}
	if !res.CacheDropped || opt.Warm {
		arms = append(arms,
			arm{benchrun.Arm{Name: ArmReadWarm, Prepare: prepare("", b.jnfFiles, CacheWarm), Run: b.warmRead}, "", CacheWarm, jnfSize},
			arm{benchrun.Arm{Name: ArmVerifyWarm, Prepare: prepare("", b.jnfFiles, CacheWarm), Run: b.verify}, ArmReadWarm, CacheWarm, jnfSize})
	}

	var runs []benchrun.Arm
	for _, a := range arms {
		runs = append(runs, a.Arm)
		res.Order = append(res.Order, a.Name)
	}
	total := int64(opt.Repeat) * int64(len(arms)) * shardBytes
	var mu sync.Mutex
	var done int64
	b.progress = func(n int64) {
		if opt.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done += n
		opt.Progress(min(done, total), total)
	}
	ds, err := benchrun.Runner{Rounds: opt.Repeat, Now: opt.Now}.Interleave(ctx, runs)
	if err != nil {
		return nil, err
	}
	res.LoadAfter = benchrun.LoadAverage()
	rates := map[string][]float64{}
	for i, a := range arms {
		n := a.bytes()
		f := Figure{Name: a.Name, Baseline: a.baseline, Cache: a.cache, Bytes: n, Rounds: benchrun.Seconds(ds[i])}
		f.Seconds = benchrun.Summarize(f.Rounds)
		if a.cache == CacheWarm && !res.CacheDropped {
			f.Note = "the page cache could not be dropped: " + res.CacheError
		}
		if a.Name == ArmRead && b.directErr != nil {
			f.Cache, f.Note = CacheCold, "O_DIRECT refused, buffered read of a dropped cache instead: "+b.directErr.Error()
		}
		r := benchrun.Rates(float64(n)/1e9, ds[i])
		rates[a.Name] = r
		f.GBps = benchrun.Summarize(r)
		if a.baseline != "" {
			f.Ratio = benchrun.Ratio(f.GBps, benchrun.Summarize(rates[a.baseline]))
			f.PairRatio = benchrun.PairRatios(r, rates[a.baseline])
		}
		res.Figures = append(res.Figures, f)
	}
	return res, nil
}

// bench holds one run's state.
type bench struct {
	opt             Options
	src             string
	shards          []string
	copyDir, jnfDir string
	jnfBytes        int64 // size of the files of jnfDir, set by the convert --verify arm
	progress        func(n int64)

	directOnce sync.Once
	directErr  error // O_DIRECT refused: the raw read falls back to buffered
}

func (b *bench) copy(ctx context.Context) error {
	if err := os.MkdirAll(b.copyDir, 0o755); err != nil {
		return err
	}
	return b.each(ctx, b.shards, func(p string, buf []byte) (int64, error) {
		return copyFile(ctx, p, filepath.Join(b.copyDir, filepath.Base(p)), buf, b.progress)
	})
}

func (b *bench) convert(check bool) func(context.Context) error {
	return func(ctx context.Context) error {
		var last atomic.Int64
		_, err := convert.Convert(ctx, b.src, b.jnfDir, convert.Options{LastLayer: -1, Workers: b.opt.Workers, Verify: check,
			Progress: func(done, _ int64) {
				if d := done - last.Swap(done); d > 0 {
					b.progress(d)
				}
			}})
		if err != nil || !check {
			return err
		}
		files, err := b.jnfFilesErr()
		if err != nil {
			return err
		}
		var n int64
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		b.jnfBytes = n
		return nil
	}
}

func (b *bench) verify(ctx context.Context) error {
	rep, err := verify.Check(ctx, b.jnfDir, verify.CheckOptions{OnRecord: func(_ string, r *jnf.Record) { b.progress(r.Length) }})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("verify found %d %s, first: %v", len(rep.Problems), map[bool]string{true: "problem", false: "problems"}[len(rep.Problems) == 1], rep.Problems[0])
	}
	return nil
}

func (b *bench) rawRead(ctx context.Context) error {
	files, err := b.jnfFilesErr()
	if err != nil {
		return err
	}
	_, err = b.read(ctx, files, true, b.progress)
	return err
}

func (b *bench) warmRead(ctx context.Context) error {
	files, err := b.jnfFilesErr()
	if err != nil {
		return err
	}
	_, err = b.read(ctx, files, false, b.progress)
	return err
}

// read reads the files, Workers at a time, with O_DIRECT if direct (and
// the file system allows it), and returns the bytes read.
func (b *bench) read(ctx context.Context, files []string, direct bool, progress func(int64)) (int64, error) {
	var total atomic.Int64
	err := b.each(ctx, files, func(p string, buf []byte) (int64, error) {
		var f *os.File
		var err error
		if direct {
			f, err = openDirect(p)
			if err != nil {
				if _, serr := os.Stat(p); serr != nil {
					return 0, serr
				}
				b.directOnce.Do(func() { b.directErr = err })
			}
		}
		if f == nil {
			if f, err = os.Open(p); err != nil {
				return 0, err
			}
		}
		defer f.Close()
		n, err := readAll(ctx, f, buf, progress)
		total.Add(n)
		return n, err
	})
	return total.Load(), err
}

// each runs f on every path, Workers at a time, each worker with its own
// 4096-aligned 8 MiB buffer; the first error cancels the rest.
func (b *bench) each(ctx context.Context, paths []string, f func(p string, buf []byte) (int64, error)) error {
	g, ctx := errgroup.WithContext(ctx)
	bufs := make(chan []byte, b.opt.Workers)
	for range b.opt.Workers {
		buf, free, err := alignedBuffer(8 << 20)
		if err != nil {
			return err
		}
		defer free()
		bufs <- buf
	}
	g.SetLimit(b.opt.Workers)
	for _, p := range paths {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			buf := <-bufs
			defer func() { bufs <- buf }()
			_, err := f(p, buf)
			return err
		})
	}
	return g.Wait()
}

// jnfFiles lists the regular files of the JNF directory (every byte verify
// reads): the record files, the manifest and the copied auxiliary files.
func (b *bench) jnfFiles() []string {
	files, _ := b.jnfFilesErr()
	return files
}

func (b *bench) jnfFilesErr() ([]string, error) {
	var files []string
	err := filepath.WalkDir(b.jnfDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("iobench: %s holds no files", b.jnfDir)
	}
	return files, err
}

// readAll reads r to its end into buf, checking ctx between reads.
func readAll(ctx context.Context, r io.Reader, buf []byte, progress func(int64)) (int64, error) {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := r.Read(buf)
		n += int64(k)
		if progress != nil && k > 0 {
			progress(int64(k))
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func copyFile(ctx context.Context, src, dst string, buf []byte, progress func(int64)) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		var k int
		k, err = in.Read(buf)
		if k > 0 {
			if _, werr := out.Write(buf[:k]); werr != nil {
				err = werr
				break
			}
			n += int64(k)
			progress(int64(k))
		}
		if errors.Is(err, io.EOF) {
			err = out.Sync()
			break
		}
		if err != nil {
			break
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
