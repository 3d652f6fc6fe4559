package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// MaxIndexSize bounds model.safetensors.index.json. Real ones are 100 KB to
// 9 MB; an index of a per-expert checkpoint at MaxRoutedExperts (three
// tensors of about 100 bytes of weight_map each) is about 20 MB.
const MaxIndexSize = 64 << 20

// MaxHeaderBytes bounds the safetensors headers of all shards together,
// checked before each header is read: a checkpoint of many shards, each
// header within safetensors.MaxHeaderSize, must not make Open parse
// gigabytes of JSON. Real checkpoints have 1 to 20 MB of headers in all
// (about 130 bytes per tensor).
const MaxHeaderBytes = safetensors.MaxHeaderSize

// Every file Open reads from a checkpoint directory is opened by a
// dirReader: only regular files (a FIFO, device or socket is refused, never
// opened for a blocking read), and a symbolic link only when the caller asks
// for it and its fully resolved target stays inside the checkpoint. What a
// conversion reads is hashed into the root and published with the model, so
// a link such as tokenizer.json → /etc/passwd must never be followed
// silently.
type dirReader struct {
	dir    string // as given, for messages
	follow bool   // follow links that resolve inside root
	root   string // resolved: the directory, or models--ORG--NAME of a hub cache snapshot
	hub    bool   // root is a hub cache repository directory
}

// hubSnapshot matches a Hugging Face hub cache snapshot directory,
// …/models--ORG--NAME/snapshots/REV with REV a 40-hex-digit commit. Its files
// are links to ../../blobs/SHA, so links may resolve anywhere inside
// models--ORG--NAME.
var (
	hubRepo = regexp.MustCompile(`^models--[^/]+$`)
	hubRev  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

func newDirReader(dir string, follow bool) (*dirReader, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	d := &dirReader{dir: dir, follow: follow, root: real}
	snaps, repo := filepath.Dir(real), filepath.Dir(filepath.Dir(real))
	if hubRev.MatchString(filepath.Base(real)) && filepath.Base(snaps) == "snapshots" && hubRepo.MatchString(filepath.Base(repo)) {
		if st, err := os.Stat(filepath.Join(repo, "blobs")); err == nil && st.IsDir() {
			d.root, d.hub = repo, true
		}
	}
	return d, nil
}

// LinkError says a file of a checkpoint is a symbolic link that Open does
// not follow.
type LinkError struct {
	Path     string // the link, under the directory as given
	Target   string // what the link says
	Resolved string // its fully resolved target; "" if it does not resolve
	Dir      string // the checkpoint directory as given
	Root     string // where a followed link must stay (resolved)
	Follow   bool   // following links was asked for
	Hub      bool   // Root is a Hugging Face hub cache repository
}

func (e *LinkError) Error() string {
	inside := e.Resolved != "" && within(e.Root, e.Resolved)
	root := e.Dir
	if e.Hub {
		root = e.Root
	}
	switch {
	case e.Resolved == "":
		return fmt.Sprintf("%s is a symbolic link to %s, which does not resolve to a file", e.Path, e.Target)
	case !inside && e.Follow:
		return fmt.Sprintf("%s is a symbolic link to %s, outside %s: refusing to read a file from outside the checkpoint, even with --follow-symlinks", e.Path, e.Resolved, root)
	case !inside:
		return fmt.Sprintf("%s is a symbolic link to %s: refusing to read a file from outside the checkpoint (--follow-symlinks reads links that stay inside %s)", e.Path, e.Resolved, root)
	case e.Hub:
		return fmt.Sprintf("%s is a symbolic link to %s: this is a Hugging Face hub cache snapshot, whose files link into %s; --follow-symlinks reads links that stay inside it", e.Path, e.Target, filepath.Join(e.Root, "blobs"))
	}
	return fmt.Sprintf("%s is a symbolic link to %s: refusing to follow it without --follow-symlinks (whatever it points to is hashed into the root and published with the model)", e.Path, e.Target)
}

// within reports whether the cleaned absolute path p is root or below it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// path is name under the directory as given.
func (d *dirReader) path(name string) string { return filepath.Join(d.dir, name) }

// exists reports whether name is present (as anything, a dangling link included).
func (d *dirReader) exists(name string) bool {
	_, err := os.Lstat(d.path(name))
	return err == nil
}

// open opens name for reading under the link policy. The checks are made on
// the opened descriptor: a regular file is opened with O_NOFOLLOW, so a
// link swapped in after the Lstat fails to open; a followed link's
// descriptor must be the same file as its resolved target inside the root.
// A missing file gives an error matching fs.ErrNotExist.
func (d *dirReader) open(name string) (*os.File, fs.FileInfo, error) {
	p := d.path(name)
	lst, err := os.Lstat(p)
	if err != nil {
		return nil, nil, err
	}
	if lst.Mode()&fs.ModeSymlink == 0 {
		if !lst.Mode().IsRegular() {
			return nil, nil, &jnf.NotRegularError{Path: p, Mode: lst.Mode()}
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|oNoFollow, 0)
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, d.linkError(p)
		}
		if err != nil {
			return nil, nil, err
		}
		return regular(f, p)
	}
	e := d.linkError(p)
	if !d.follow || e.Resolved == "" || !within(d.root, e.Resolved) {
		return nil, nil, e
	}
	f, st, err := jnf.OpenRegular(p)
	if err != nil {
		return nil, nil, err
	}
	if rst, err := os.Lstat(e.Resolved); err != nil || !os.SameFile(st, rst) {
		f.Close()
		return nil, nil, fmt.Errorf("%s: the link changed while it was opened", p)
	}
	return f, st, nil
}

func regular(f *os.File, p string) (*os.File, fs.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &jnf.NotRegularError{Path: p, Mode: st.Mode()}
	}
	return f, st, nil
}

func (d *dirReader) linkError(p string) *LinkError {
	e := &LinkError{Path: p, Dir: d.dir, Root: d.root, Follow: d.follow, Hub: d.hub}
	e.Target, _ = os.Readlink(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		if r, err = filepath.Abs(r); err == nil {
			e.Resolved = r
		}
	}
	return e
}

// readFile reads name whole, refusing more than max bytes.
func (d *dirReader) readFile(name string, max int64) ([]byte, error) {
	f, st, err := d.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := d.path(name)
	if st.Size() > max {
		return nil, &jnf.LimitError{Path: p, Size: st.Size(), Max: max, Which: name}
	}
	return jnf.ReadAllLimit(f, p, max, name)
}

// readConfig reads and parses config.json, returning its bytes too.
func (d *dirReader) readConfig() ([]byte, *Config, error) {
	b, err := d.readFile("config.json", jnf.MaxConfigSize)
	if err != nil {
		return nil, nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", d.path("config.json"), err)
	}
	return b, c, nil
}
