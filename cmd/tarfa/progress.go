package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress, one style for every long step: a line on stderr, redrawn at
// most ten times a second and cleared when the step ends, only when stderr
// is a terminal (never in pipes or CI, where scripts read the results, with
// --json where they want them typed). byteProgress is for steps whose size
// is known (bytes converted, hashed, written); stepProgress for steps that
// report none (opening and verifying a model, a conformance run), with the
// elapsed time.

// showProgress reports whether progress is drawn on w.
func showProgress(w io.Writer) bool {
	return isTerminal(w) && os.Getenv("CI") == ""
}

// byteProgress returns a progress callback drawing a bytes bar with rate and
// ETA on w, or a no-op when w is not a terminal.
func byteProgress(w io.Writer, desc string) (update func(done, total int64), finish func()) {
	return barProgress(w, desc, true)
}

// itemProgress is byteProgress for steps counted in items (figures, cells).
func itemProgress(w io.Writer, desc string) (update func(done, total int64), finish func()) {
	return barProgress(w, desc, false)
}

// countProgress is itemProgress with int counts (prompts).
func countProgress(w io.Writer, desc string) (update func(done, total int), finish func()) {
	u, finish := itemProgress(w, desc)
	return func(done, total int) { u(int64(done), int64(total)) }, finish
}

// barProgress is byteProgress and itemProgress: a bar of bytes (with
// bytes true) or of items.
func barProgress(w io.Writer, desc string, bytes bool) (update func(done, total int64), finish func()) {
	if !showProgress(w) {
		return func(int64, int64) {}, func() {}
	}
	var (
		mu  sync.Mutex
		bar *progressbar.ProgressBar
	)
	update = func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription(desc),
				progressbar.OptionShowBytes(bytes),
				progressbar.OptionUseIECUnits(true), // GiB, as every other figure
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		if total != bar.GetMax64() {
			bar.ChangeMax64(total) // the work can grow (convert: a kept file that fails re-verification)
		}
		bar.Set64(done)
	}
	finish = func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil {
			bar.Finish()
		}
	}
	return update, finish
}

// stepProgress draws desc with a spinner and the elapsed time on w until
// done is called, or nothing when w is not a terminal.
func stepProgress(w io.Writer, desc string) (done func()) {
	if !showProgress(w) {
		return func() {}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				bar.Add(1)
			case <-stop:
				bar.Finish()
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-stopped
		})
	}
}

// phasedProgress draws desc with a spinner (stepProgress) until the first
// update, then as a bytes bar with rate and ETA (byteProgress): for a step
// whose size is known only once it has begun (opening a model: the
// manifest is checked, then the non-expert tensors are hashed).
func phasedProgress(w io.Writer, desc string) (update func(done, total int64), finish func()) {
	spin := stepProgress(w, desc)
	bar, barDone := byteProgress(w, desc)
	return func(done, total int64) {
			spin()
			bar(done, total)
		}, func() {
			spin()
			barDone()
		}
}
