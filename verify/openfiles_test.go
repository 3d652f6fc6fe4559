package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
	. "github.com/tarfa-ai/tarfa/verify"
)

// TestOpenDirRefusesLinksAndSpecialFiles: a model file that is a symbolic
// link (even to an identical copy, which would hash right) or a FIFO when
// the directory is opened is refused, in bounded time, by an error naming
// the file and what it is; nothing is followed or waited for.
func TestOpenDirRefusesLinksAndSpecialFiles(t *testing.T) {
	for _, name := range []string{"layer-00000.jnf", "global.jnf", ManifestFile, "config.json", "generation_config.json"} {
		for _, kind := range []string{"symlink", "fifo"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				dir := converted(t, -1)
				p := filepath.Join(dir, name)
				switch kind {
				case "symlink":
					copyPath := filepath.Join(t.TempDir(), name)
					b, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					os.WriteFile(copyPath, b, 0o644)
					os.Remove(p)
					if err := os.Symlink(copyPath, p); err != nil {
						t.Fatal(err)
					}
				case "fifo":
					os.Remove(p)
					if err := syscall.Mkfifo(p, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				done := make(chan error, 1)
				go func() {
					d, err := OpenDir(context.Background(), dir)
					if err == nil {
						d.Close()
					}
					done <- err
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(30 * time.Second):
					if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
					t.Fatalf("OpenDir hung on %s", name)
				}
				var nr *jnf.NotRegularError
				want := map[string]string{"symlink": "a symbolic link", "fifo": "a named pipe (FIFO)"}[kind]
				if !errors.As(err, &nr) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) {
					t.Fatalf("OpenDir with %s as a %s: %v", name, kind, err)
				}
			})
		}
	}
}
