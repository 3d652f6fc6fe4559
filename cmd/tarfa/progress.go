package main

import (
	"io"
	"os"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// byteProgress returns a progress callback drawing a bytes bar with rate and
// ETA on stderr, or a no-op when stderr is not a terminal (pipes, CI).
func byteProgress(w io.Writer, desc string) (update func(done, total int64), finish func()) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || os.Getenv("CI") != "" {
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
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100_000_000),
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
