package convert

import (
	"errors"
	"fmt"
	"github.com/tarfa-ai/tarfa/internal/diskspace"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// resolve returns p as a cleaned absolute path with every symbolic link
// resolved, for a path whose tail may not exist yet (a new --out): the
// longest existing prefix is resolved and the rest appended.
func resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for cur := abs; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// checkDisjoint refuses an output directory that is the source, inside it,
// or contains it: a JNF directory inside a checkpoint (or the reverse)
// mixes two formats, and the next conversion would read its own output.
func checkDisjoint(src, dst string) error {
	s, err := resolve(src)
	if err != nil {
		return err
	}
	d, err := resolve(dst)
	if err != nil {
		return err
	}
	inside := func(root, p string) bool {
		rel, err := filepath.Rel(root, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	switch {
	case s == d:
		return fmt.Errorf("output directory %s is the source checkpoint: convert into a new directory", dst)
	case inside(s, d):
		return fmt.Errorf("output directory %s is inside the source checkpoint %s: convert into a directory outside it", dst, src)
	case inside(d, s):
		return fmt.Errorf("source checkpoint %s is inside the output directory %s: convert into a directory outside it", src, dst)
	}
	return nil
}

// SpaceError says the output file system has too little room.
type SpaceError struct {
	Dir        string
	Free, Need uint64
	Files      int
}

func (e *SpaceError) Error() string {
	gib := func(n uint64) float64 { return float64(n) / (1 << 30) }
	return fmt.Sprintf("%s: %.2f GiB (%d bytes) free on its file system, this conversion needs %.2f GiB (%d bytes, %d files to write); free some space, or convert part of the model with --layers",
		e.Dir, gib(e.Free), e.Free, gib(e.Need), e.Need, e.Files)
}

// checkSpace compares the space the files still to write will take (their
// planned sizes, less what their interrupted partial files already hold,
// plus 2 KiB per record for the manifest) with the space available on
// dst's file system.
func checkSpace(ck *hf.Checkpoint, dst string, todo []*unit, cfgSum string, ignored []jnf.Ignored,
	free func(string) (uint64, bool, error)) error {
	if len(todo) == 0 {
		return nil
	}
	if free == nil {
		free = diskspace.Free
	}
	avail, known, err := free(dst)
	if err != nil {
		return fmt.Errorf("%s: free space: %w", dst, err)
	}
	if !known {
		return nil
	}
	var need int64
	for _, u := range todo {
		// Source digests have a fixed width: placeholders give the same
		// table length as the real ones.
		var sources []jnf.SourceFile
		for _, s := range u.shards() {
			f, _ := ck.ShardFile(s)
			sources = append(sources, jnf.SourceFile{File: s, Size: f.Size, SHA256: zeroDigest})
		}
		t, _, size, err := u.plan(ck, cfgSum, ignored, sources)
		if err != nil {
			return err
		}
		if st, err := os.Lstat(jnf.PartialName(filepath.Join(dst, u.file))); err == nil && st.Mode().IsRegular() {
			size -= min(size, st.Size())
		}
		need += size + 2<<10*int64(len(t.Records))
	}
	if uint64(need) > avail {
		return &SpaceError{Dir: dst, Free: avail, Need: uint64(need), Files: len(todo)}
	}
	return nil
}
