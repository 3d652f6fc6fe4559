package jnf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Size limits for the files Tarfa reads whole. Every file that comes with a
// model (which users download from strangers) or that a user names on the
// command line is read through ReadFileLimit with one of these caps, so no
// input can make Tarfa allocate more than its cap, and a device, FIFO or
// socket is refused before a byte is read. Each cap is a generous multiple
// of what the format needs for the largest models Tarfa targets; the figures
// are in SPEC.md §8.
const (
	// MaxManifestSize bounds manifest.json. Qwen3.5-122B-A10B's manifest
	// (12,288 expert and ~1,100 tensor entries) is about 16 MB.
	MaxManifestSize = 128 << 20
	// MaxConfigSize bounds config.json (a few KB in every release).
	MaxConfigSize = 1 << 20
	// MaxAuxFileSize bounds every other auxiliary file: tokenizer.json
	// (11 MB for Qwen3's 151k-token vocabulary), vocab.json, merges.txt,
	// the chat template and tokenizer_config.json.
	MaxAuxFileSize = 64 << 20
	// MaxEnvelopeSize bounds a DSSE envelope (manifest.sig.json, a run
	// report).
	MaxEnvelopeSize = 64 << 20
	// MaxKeyFileSize bounds a PEM key file.
	MaxKeyFileSize = 64 << 10
	// MaxJSONMetaSize bounds other Tarfa metadata files read whole
	// (golden.json, fixture references).
	MaxJSONMetaSize = 256 << 20
)

// LimitError says a file is larger than Tarfa reads for its kind.
type LimitError struct {
	Path  string
	Size  int64 // bytes seen: the file's size, or Max+1 for a file that grew while read
	Max   int64
	Which string // the limit's name, e.g. "config.json"
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %d bytes, more than the %s limit of %d bytes", e.Path, e.Size, e.Which, e.Max)
}

// NotRegularError says a path names something other than a regular file (a
// directory, device, FIFO or socket), which Tarfa never reads as data.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, describeMode(e.Mode))
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return fmt.Sprintf("a special file (mode %v)", m)
}

// OpenRegular opens path for reading and returns it only if it is a regular
// file. The check is made on the opened descriptor (no race with a rename),
// and the open itself never blocks: a FIFO is opened non-blocking and then
// refused. Symbolic links are followed (files a user names; where a link's
// target matters, as in a conversion source, the caller checks with
// os.Lstat first). The files of a model directory are opened with
// OpenModelFile, which refuses links.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	return checkRegular(f, path)
}

// OpenModelFile opens path, a file of a JNF model directory (a JNF file,
// the manifest, an auxiliary file), for reading: it must be a regular file
// and not a symbolic link, which is refused, never followed. As with
// OpenRegular the check is made on the opened descriptor and the open
// never blocks; the descriptor is then made blocking. A model is opened
// once: its files are read only through the descriptors opened here, so a
// file replaced afterwards (by another file, a FIFO or a link) is never
// read.
func OpenModelFile(path string) (*os.File, fs.FileInfo, error) {
	if oNoFollow == 0 {
		if st, err := os.Lstat(path); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return nil, nil, &NotRegularError{Path: path, Mode: st.Mode()}
		}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|oNoFollow, 0)
	if err != nil {
		// O_NOFOLLOW fails on a link with ELOOP (EMLINK on some systems):
		// say what is there.
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
			return nil, nil, &NotRegularError{Path: path, Mode: st.Mode()}
		}
		return nil, nil, err
	}
	f, st, err := checkRegular(f, path)
	if err != nil {
		return nil, nil, err
	}
	if err := setBlocking(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, st, nil
}

// ReopenModelFile opens path again with the extra open flags (O_DIRECT),
// checked as OpenModelFile checks, and returns the descriptor only if it
// is the file st describes (the same device and inode, from a descriptor
// opened earlier): a file replaced in between gives a *ReplacedError.
func ReopenModelFile(path string, st fs.FileInfo, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|oNoFollow|flag, 0)
	if err != nil {
		if lst, lerr := os.Lstat(path); lerr == nil && !os.SameFile(lst, st) {
			return nil, &ReplacedError{Path: path}
		}
		return nil, err
	}
	f, got, err := checkRegular(f, path)
	if err != nil {
		return nil, &ReplacedError{Path: path, Err: err}
	}
	if !os.SameFile(got, st) {
		f.Close()
		return nil, &ReplacedError{Path: path}
	}
	if err := setBlocking(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ReplacedError says a model file is no longer the file opened when the
// model was: it was replaced, moved or removed since. It matches
// ErrVerification.
type ReplacedError struct {
	Path string
	Err  error // what is there now, if known
}

func (e *ReplacedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s was replaced since the model was opened (%v)", e.Path, e.Err)
	}
	return fmt.Sprintf("%s was replaced since the model was opened: it is no longer the file that was checked", e.Path)
}
func (e *ReplacedError) Is(target error) bool { return target == ErrVerification }

func checkRegular(f *os.File, path string) (*os.File, fs.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return f, st, nil
}

// ReadFileLimit reads the whole regular file at path, refusing anything
// that is not a regular file and any file of more than max bytes (checked
// before allocating, and again while reading, in case the file grows).
// which names the limit in the error ("config.json", "manifest").
func ReadFileLimit(path string, max int64, which string) ([]byte, error) {
	f, st, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path, st.Size(), max, which)
}

// ReadModelFileLimit is ReadFileLimit for a file of a model directory:
// opened with OpenModelFile (a symbolic link is refused, not followed).
func ReadModelFileLimit(path string, max int64, which string) ([]byte, error) {
	f, st, err := OpenModelFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path, st.Size(), max, which)
}

// ReadAllLimit reads r to its end, refusing more than max bytes (for
// standard input and other streams). path names the stream in errors.
func ReadAllLimit(r io.Reader, path string, max int64, which string) ([]byte, error) {
	return readLimited(r, path, 0, max, which)
}

func readLimited(r io.Reader, path string, size, max int64, which string) ([]byte, error) {
	if size > max {
		return nil, &LimitError{Path: path, Size: size, Max: max, Which: which}
	}
	buf := make([]byte, 0, min(size, max)+1)
	for {
		if int64(len(buf)) > max {
			return nil, &LimitError{Path: path, Size: int64(len(buf)), Max: max, Which: which}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := min(int64(cap(buf)), max+1)
		n, err := r.Read(buf[len(buf):room])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > max {
				return nil, &LimitError{Path: path, Size: int64(len(buf)), Max: max, Which: which}
			}
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
}
