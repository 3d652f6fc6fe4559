package jnf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// AtomicFile is written under a temporary name (".NAME.tmp-*", in the target's
// directory) and appears under its final name only when Commit succeeds, so a
// crash never leaves a half-written file under the real name. Writers remove
// stale temporaries on their next start.
type AtomicFile struct {
	*os.File
	path string
	done bool
}

// CreateAtomic starts writing path.
func CreateAtomic(path string, mode os.FileMode) (*AtomicFile, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &AtomicFile{File: f, path: path}, nil
}

// PartialSuffix names the temporary of a file opened with OpenPartial.
const PartialSuffix = ".partial"

// PartialName is the temporary name OpenPartial uses for path.
func PartialName(path string) string {
	dir, base := filepath.Split(path)
	return filepath.Join(dir, "."+base+PartialSuffix)
}

// OpenPartial is CreateAtomic with a fixed temporary name (PartialName) that
// is opened without truncation, so that work interrupted by a kill can be
// continued by a later process: the caller decides which of the bytes
// already there it can prove good. Suspend leaves the temporary for that
// later process; Commit and Abort work as for CreateAtomic.
func OpenPartial(path string, mode os.FileMode) (*AtomicFile, error) {
	f, err := os.OpenFile(PartialName(path), os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return nil, err
	}
	return &AtomicFile{File: f, path: path}, nil
}

// Suspend closes the temporary file and leaves it in place for a later
// OpenPartial; it is a no-op after Commit or Abort.
func (a *AtomicFile) Suspend() error {
	if a.done {
		return nil
	}
	a.done = true
	return a.Close()
}

// Commit syncs the data, renames the file into place (replacing any file of
// that name) and syncs the directory.
func (a *AtomicFile) Commit() error { return a.commit(true) }

// CommitNoReplace is Commit that fails with fs.ErrExist instead of replacing
// an existing file (link(2): no check-then-rename race).
func (a *AtomicFile) CommitNoReplace() error { return a.commit(false) }

func (a *AtomicFile) commit(replace bool) error {
	if a.done {
		return fmt.Errorf("%s: already committed or aborted", a.path)
	}
	a.done = true
	tmp := a.Name()
	err := a.Sync()
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if replace {
			err = os.Rename(tmp, a.path)
		} else if err = os.Link(tmp, a.path); err == nil {
			err = os.Remove(tmp)
		} else if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%s: %w", a.path, fs.ErrExist)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(a.path))
}

// Abort closes and removes the temporary file; it is a no-op after Commit.
func (a *AtomicFile) Abort() {
	if a.done {
		return
	}
	a.done = true
	a.Close()
	os.Remove(a.Name())
}

// WriteFileAtomic writes data to path atomically.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := CreateAtomic(path, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
