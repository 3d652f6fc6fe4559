package main

import (
	"errors"
	"fmt"
	"github.com/tarfa-ai/tarfa/internal/diskspace"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/reports"
)

// Every command that writes a directory (convert, synth, golden record,
// manifest sign) holds DIR/.tarfa.lock while it writes: a second tarfa
// writing the same directory says which process holds it and waits, or with
// --no-wait fails at once. Before any work it checks that the directory can
// be written and, where the size is known, that its file system has room;
// the errors name the directory, never a hidden temporary file.

// noWaitHelp is the --no-wait flag's help.
const noWaitHelp = "fail at once if another tarfa is writing the output directory, instead of waiting for it"

// lockDir takes dir's lock (dir exists). Unlock it when done.
func lockDir(cmd *cobra.Command, dir string, noWait bool) (*flock.Lock, error) {
	path := filepath.Join(dir, flock.Name)
	if noWait {
		l, err := flock.TryAcquire(path)
		if held := (*flock.HeldError)(nil); errors.As(err, &held) {
			return nil, fmt.Errorf("%s is writing %s: not waiting for it (--no-wait)", holder(held.PID), dir)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		return l, nil
	}
	stderr := cmd.ErrOrStderr()
	l, err := flock.Acquire(cmd.Context(), path, func(pid int) {
		fmt.Fprintf(stderr, "%s is writing %s, waiting… (Ctrl-C stops; --no-wait fails at once)\n", holder(pid), dir)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return l, nil
}

// holder names the process holding a lock.
func holder(pid int) string {
	if pid == 0 {
		return "another tarfa"
	}
	return fmt.Sprintf("another tarfa (pid %d)", pid)
}

// makeOutDir creates the output directory dir (flag names it in errors) and
// its parents, after checking that the nearest existing one is a directory
// Tarfa can write in: a read-only place fails here, before any work. It
// returns a function that removes dir again if it created it and dir is
// still empty (for a command that fails).
func makeOutDir(flag, dir string) (undo func(), err error) {
	if dir == "" {
		return nil, fmt.Errorf("%s: empty directory name", flag)
	}
	existing := dir
	for {
		st, err := os.Stat(existing)
		if err == nil {
			if !st.IsDir() {
				return nil, fmt.Errorf("%s %s: %s is not a directory", flag, dir, existing)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s %s: %w", flag, dir, err)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	if err := checkWritable(existing); err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, dir, pathErr(err))
	}
	if filepath.Clean(existing) == filepath.Clean(dir) {
		return func() {}, nil
	}
	return func() { os.Remove(dir) }, nil
}

// checkWritable makes sure files can be created in the existing directory
// dir, by creating and removing one.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".tarfa-write-test-*")
	if err != nil {
		return fmt.Errorf("cannot write in directory %s: %w", dir, pathErr(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// pathErr drops the path of a *fs.PathError (a temporary file's name, which
// means nothing to the user), keeping what went wrong.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkFree refuses to start writing need bytes into dir (an existing
// directory) when its file system has less room.
func checkFree(flag, dir string, need int64, advice string) error {
	free, known, err := diskspace.Free(dir)
	if err != nil {
		return fmt.Errorf("%s %s: free space: %w", flag, dir, err)
	}
	if known && need > 0 && uint64(need) > free {
		return fmt.Errorf("%s %s: needs %s (%d bytes), its file system has %s free%s",
			flag, dir, reports.Bytes(need), need, reports.Bytes(int64(min(free, 1<<62))), advice)
	}
	return nil
}

// createNew creates the output file path (flag names it in errors) for a
// command with no --force: an existing file, whatever it is, is refused and
// left as it is, never truncated.
func createNew(flag, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s %s exists: tarfa replaces nothing here; remove it or name a new file", flag, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return f, nil
}
