package tier

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
)

// TestLayerFilesReplacedAfterOpen: once the model and its hierarchy are
// open, layer files replaced by a FIFO, or by a symbolic link to a file of
// other bytes, are never opened or read: generation reads through the
// descriptors opened with the model and gives the logits it gives with the
// files in place. (Before, the first read of an expert opened its file by
// path: a FIFO there hung the run, a link was followed.) The run is bounded:
// a hang fails the test.
func TestLayerFilesReplacedAfterOpen(t *testing.T) {
	for _, c := range []struct {
		name    string
		direct  DirectMode
		replace func(t *testing.T, path string)
	}{
		{"fifo", DirectOff, replaceByFIFO},
		{"fifo-direct", DirectAuto, replaceByFIFO},
		{"symlink", DirectOff, replaceByLink},
		{"symlink-direct", DirectAuto, replaceByLink},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := testModel(t)
			ck := openCk(t, dir)
			ref, err := engine.Load(ck, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := run(t, ref, prompts[0], 4)
			if err != nil {
				t.Fatal(err)
			}
			size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
			h, err := New(ck, Options{StagingBudget: 2 * size, Direct: c.direct}) // no RAM tier: every use reads
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, err := engine.Load(ck, engine.Options{Experts: h})
			if err != nil {
				t.Fatal(err)
			}
			// No expert has been read yet: replace every layer file.
			var paths []string
			for l := range ck.Config().Layers {
				p := filepath.Join(dir, jnf.FileName(l))
				c.replace(t, p)
				paths = append(paths, p)
			}
			type result struct {
				rows [][]float32
				err  error
			}
			done := make(chan result, 1)
			go func() {
				rows, err := run(t, m, prompts[0], 4)
				done <- result{rows, err}
			}()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("generation after the files were replaced: %v", r.err)
				}
				if !same(r.rows, want) {
					t.Fatal("logits differ from those of the files opened with the model")
				}
			case <-time.After(60 * time.Second):
				// Unblock readers stuck opening a FIFO, so Close returns.
				for _, p := range paths {
					if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
				}
				<-done
				t.Fatal("generation hung on a layer file replaced after the model was opened")
			}
			if st := h.Stats(); st.Streamed == 0 || st.Failures != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// replaceByFIFO renames a FIFO over path.
func replaceByFIFO(t *testing.T, path string) {
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// replaceByLink renames over path a symbolic link to a copy of it with
// every byte flipped: read through the link, no expert would verify.
func replaceByLink(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	other := path + ".other"
	if err := os.WriteFile(other, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".link"
	if err := os.Symlink(filepath.Base(other), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
