// Package outdir is the record a Tarfa command keeps of what it writes into
// an output directory (convert, synth), so that it deletes or replaces only
// what a Tarfa writer wrote there. Before a command creates a file it
// appends the file's name to the directory's journal (JournalName, synced);
// the name covers the file and the temporaries Tarfa writes it through
// (".NAME.tmp-*", ".NAME.partial", ".NAME.journal"). A later run, resuming
// an interrupted one, may delete or replace what the journal names; any
// other file in the directory is the user's, and the command refuses the
// directory, naming the file, unless it is given --force (which still
// deletes nothing of the user's: it writes over the names it writes).
// The journal is removed when the command succeeds. Hold the directory's
// lock (internal/flock) while using it.
package outdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/tarfa-ai/tarfa/internal/flock"
)

// JournalName is the journal's file name in the directory.
const JournalName = ".tarfa.written"

// maxJournal bounds the journal read back (a name per line).
const maxJournal = 16 << 20

// Journal is an open journal of one directory.
type Journal struct {
	dir   string
	f     *os.File
	names map[string]bool
}

// Open reads dir's journal, if any; the journal is created by the first
// Record. A journal that is not a regular file, is too large, or holds a
// line that is no plain file name is refused.
func Open(dir string) (*Journal, error) {
	path := filepath.Join(dir, JournalName)
	j := &Journal{dir: dir, names: map[string]bool{}}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil && st.Size() > maxJournal {
		err = fmt.Errorf("%s: %d bytes, more than a Tarfa write journal holds (%d)", path, st.Size(), maxJournal)
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.NewSectionReader(f, 0, maxJournal))
	}
	if err != nil {
		return nil, err
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		name := string(line)
		if name == "" {
			continue
		}
		if !validName(name) {
			return nil, fmt.Errorf("%s: line %d (%q) is not a file name Tarfa writes", path, i+1, name)
		}
		j.names[name] = true
	}
	return j, nil
}

func validName(name string) bool {
	return name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && name != JournalName && name != flock.Name
}

// Record appends names to the journal (synced) before the files are
// created.
func (j *Journal) Record(names ...string) error {
	var b strings.Builder
	for _, n := range names {
		if !validName(n) {
			return fmt.Errorf("outdir: %q is not a file name", n)
		}
		if !j.names[n] {
			b.WriteString(n + "\n")
			j.names[n] = true
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if j.f == nil {
		f, err := os.OpenFile(filepath.Join(j.dir, JournalName), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		j.f = f
	}
	if _, err := j.f.WriteString(b.String()); err != nil {
		return fmt.Errorf("%s: %w", j.f.Name(), err)
	}
	return j.f.Sync()
}

// Owns reports whether name is a file the journal records, or one of the
// temporaries of such a file.
func (j *Journal) Owns(name string) bool {
	if name == JournalName || name == flock.Name || j.names[name] {
		return true
	}
	if strings.HasPrefix(name, ".") {
		base := name[1:]
		for _, suffix := range []string{".partial", ".journal"} {
			if j.names[strings.TrimSuffix(base, suffix)] && strings.HasSuffix(base, suffix) {
				return true
			}
		}
		if i := strings.LastIndex(base, ".tmp-"); i > 0 && j.Owns(base[:i]) {
			return true
		}
	}
	return false
}

// ForeignError names a file in an output directory that no Tarfa writer
// recorded writing.
type ForeignError struct {
	Dir, Name string
	Command   string // "convert", "synth"
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("%s holds %s, which %s did not write: %s replaces nothing without --force (write into a new or empty directory, or remove it)", e.Dir, e.Name, e.Command, e.Command)
}

// Check lists dir and returns a *ForeignError for the first entry (by
// name) that neither the journal owns nor ours accepts; with force it
// returns nil. ours may be nil.
func (j *Journal) Check(command string, ours func(name string) bool, force bool) error {
	if force {
		return nil
	}
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		if !j.Owns(n) && (ours == nil || !ours(n)) {
			return &ForeignError{Dir: j.dir, Name: n, Command: command}
		}
	}
	return nil
}

// RemoveStaleTemps deletes the temporaries (".NAME.tmp-*") of the names
// the journal records, as left by a writer that was killed; no other file.
func (j *Journal) RemoveStaleTemps() error {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if i := strings.LastIndex(n, ".tmp-"); strings.HasPrefix(n, ".") && i > 1 && j.Owns(n[1:i]) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(j.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Close closes the journal, leaving it for a later run.
func (j *Journal) Close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// Done closes and removes the journal: the command finished.
func (j *Journal) Done() error {
	j.Close()
	if err := os.Remove(filepath.Join(j.dir, JournalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
