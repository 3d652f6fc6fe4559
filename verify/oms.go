package verify

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	sha256simd "github.com/minio/sha256-simd"

	"github.com/tarfa-ai/tarfa/jnf"
)

// This file is the model-directory side of OpenSSF Model Signing (OMS) v1.0
// with the "files" serialization and sha256 (the spec's §6.1–6.3.1 and
// §8.4–8.5, as model-transparency implements them): which files of a
// directory are in the signing scope, their digests, and the comparison of
// a directory with a signed list. The signature itself is package attest's.
//
// The scope is every regular file under the directory, at any depth,
// hidden files included (Python's Path.glob("**/*"), which
// model-transparency walks, matches dot files), except the ignored paths:
// the defaults OMSDefaultIgnore and the signature's ignore_paths, each an
// exact slash-separated path relative to the directory that excludes that
// file or that whole directory tree (".git" excludes ".git/HEAD" but not
// "sub/.git"). Symbolic links are refused (allow_symlinks false), as are
// sockets, devices and pipes, and names that are not valid UTF-8.

// OMSSignatureFile is the file name of the OMS signature Tarfa writes in a
// JNF directory: model-transparency's default `--signature` name.
const OMSSignatureFile = "model.sig"

// OMSDefaultIgnore are the paths OMS v1.0 §6.2 excludes by default.
var OMSDefaultIgnore = []string{".git", ".gitattributes", ".github", ".gitignore"}

// MaxOMSFiles bounds the files of one signing scope.
const MaxOMSFiles = 1 << 20

// FileDigest is one OMS resource of the "files" method: a path relative to
// the model directory, slash-separated, and the SHA-256 of the whole file.
type FileDigest struct {
	Name   string
	SHA256 jnf.Digest
}

// OMSError is a directory that breaks the OMS enumeration rules (a symbolic
// link, a special file, a name that is not UTF-8, a malformed ignore path).
// It matches jnf.ErrVerification.
type OMSError struct{ Path, What string }

func (e *OMSError) Error() string        { return e.Path + ": " + e.What }
func (e *OMSError) Is(target error) bool { return target == jnf.ErrVerification }

// ValidOMSIgnorePath checks an ignore_paths entry (§6.2.1): a clean relative
// slash path without glob characters, leading "/" or ".." components.
func ValidOMSIgnorePath(p string) error {
	if p == "" || p == "." || pathpkg.Clean(p) != p || strings.HasPrefix(p, "/") || p == ".." ||
		strings.HasPrefix(p, "../") || strings.ContainsAny(p, "*?[\\") {
		return fmt.Errorf("ignore path %q is not a clean relative slash path without glob characters", p)
	}
	return nil
}

func ignored(rel string, ignore []string) bool {
	for _, p := range ignore {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// OMSFiles lists the files of dir in the OMS signing scope, sorted as OMS
// sorts resources (by path components; see attest.SortResources), with
// ignore applied on top of OMSDefaultIgnore.
func OMSFiles(dir string, ignore []string) ([]string, error) {
	for _, p := range ignore {
		if err := ValidOMSIgnorePath(p); err != nil {
			return nil, &OMSError{Path: dir, What: err.Error()}
		}
	}
	ignore = append(slices.Clone(OMSDefaultIgnore), ignore...)
	var out []string
	var walk func(rel string) error
	walk = func(rel string) error {
		ents, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		for _, e := range ents {
			name := pathpkg.Join(rel, e.Name())
			if !utf8.ValidString(e.Name()) {
				return &OMSError{Path: filepath.Join(dir, filepath.FromSlash(rel), e.Name()), What: "file name is not valid UTF-8 (OMS resource names are UTF-8)"}
			}
			if ignored(name, ignore) {
				continue
			}
			switch t := e.Type(); {
			case t&fs.ModeSymlink != 0:
				return &OMSError{Path: filepath.Join(dir, filepath.FromSlash(name)), What: "is a symbolic link (OMS signatures Tarfa writes and reads have allow_symlinks false)"}
			case t.IsDir():
				if err := walk(name); err != nil {
					return err
				}
			case t.IsRegular():
				if len(out) >= MaxOMSFiles {
					return &OMSError{Path: dir, What: fmt.Sprintf("more than %d files", MaxOMSFiles)}
				}
				out = append(out, name)
			default:
				return &OMSError{Path: filepath.Join(dir, filepath.FromSlash(name)), What: fmt.Sprintf("is not a regular file or directory (mode %s)", t)}
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b string) int { return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/")) })
	return out, nil
}

// HashOMSFiles returns the SHA-256 of each named file of dir (in the same
// order), hashing in parallel (workers ≤ 0: GOMAXPROCS). onFile, if set, is
// called after each file with its size, from one goroutine at a time.
func HashOMSFiles(ctx context.Context, dir string, names []string, workers int, onFile func(name string, size int64)) ([]FileDigest, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([]FileDigest, len(names))
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range min(workers, max(len(names), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4<<20)
			for i := range next {
				d, n, err := hashFile(ctx, filepath.Join(dir, filepath.FromSlash(names[i])), buf)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				out[i] = FileDigest{Name: names[i], SHA256: d}
				if err == nil && onFile != nil {
					onFile(names[i], n)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range names {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func hashFile(ctx context.Context, p string, buf []byte) (jnf.Digest, int64, error) {
	f, _, err := jnf.OpenRegular(p)
	if err != nil {
		return jnf.Digest{}, 0, err
	}
	defer f.Close()
	h := sha256simd.New()
	n, err := io.CopyBuffer(h, ctxReader{ctx, f}, buf)
	if err != nil {
		return jnf.Digest{}, 0, fmt.Errorf("%s: %w", p, err)
	}
	d := jnf.Digest{Alg: jnf.SHA256}
	h.Sum(d.Sum[:0])
	return d, n, nil
}

// CheckOMS compares dir with a signed OMS resource list (§8.4 steps 6–9):
// the files in scope (OMSFiles with ignore) must be exactly the signed ones,
// none missing and none unsigned (an extra file fails, as
// --ignore-unsigned-files is not offered), and every one must hash to its
// signed SHA-256. Differences are returned as problems, sorted by name;
// the error is for I/O failures and for a directory that breaks the
// enumeration rules (*OMSError).
func CheckOMS(ctx context.Context, dir string, signed []FileDigest, ignore []string, onFile func(name string, size int64)) ([]Problem, error) {
	names, err := OMSFiles(dir, ignore)
	if err != nil {
		return nil, err
	}
	want := make(map[string]jnf.Digest, len(signed))
	for _, s := range signed {
		want[s.Name] = s.SHA256
	}
	var ps []Problem
	add := func(kind Kind, name, format string, a ...any) {
		ps = append(ps, Problem{Kind: kind, File: name, Layer: -1, Expert: -1, Offset: -1, What: fmt.Sprintf(format, a...)})
	}
	var common []string
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
		if _, ok := want[n]; ok {
			common = append(common, n)
		} else {
			add(KindExtra, n, "in the directory but not in the signature (an unsigned file)")
		}
	}
	for _, s := range signed {
		if !have[s.Name] {
			add(KindMissing, s.Name, "signed but missing from the directory (or ignored, or not a regular file)")
		}
	}
	got, err := HashOMSFiles(ctx, dir, common, 0, onFile)
	if err != nil {
		return nil, err
	}
	for _, g := range got {
		if w := want[g.Name]; !g.SHA256.Equal(w) {
			add(KindDigest, g.Name, "sha256 %s, the signature says %s", g.SHA256.Hex(), w.Hex())
		}
	}
	slices.SortStableFunc(ps, func(a, b Problem) int { return strings.Compare(a.File, b.File) })
	return ps, nil
}
