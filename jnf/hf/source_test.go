package hf

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

const devA = fixtures + "qwen3moe-dev-a/checkpoint"

// wantErr fails unless err contains every one of want.
func wantErr(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want an error containing %q", what, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not contain %q", what, err, w)
		}
	}
}

func TestOpenRefusesLinksByDefault(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("root:x:0:0\n"), 0o644)

	t.Run("aux file to a file outside", func(t *testing.T) {
		d := copyCheckpoint(t, devA)
		link := filepath.Join(d, "tokenizer.json")
		os.Symlink(outside, link)
		_, err := Open(d)
		wantErr(t, "default", err, link+" is a symbolic link to "+outside+": refusing to read a file from outside the checkpoint (--follow-symlinks reads links that stay inside "+d+")")
		var le *LinkError
		if !errors.As(err, &le) {
			t.Errorf("%v is not a *LinkError", err)
		}
		_, err = OpenWith(d, Options{FollowSymlinks: true})
		wantErr(t, "--follow-symlinks", err, link+" is a symbolic link to "+outside+", outside "+d+": refusing to read a file from outside the checkpoint, even with --follow-symlinks")
	})
	t.Run("config to /dev/urandom", func(t *testing.T) {
		d := copyCheckpoint(t, devA)
		os.Remove(filepath.Join(d, "config.json"))
		os.Symlink("/dev/urandom", filepath.Join(d, "config.json"))
		for _, follow := range []bool{false, true} {
			_, err := OpenWith(d, Options{FollowSymlinks: follow})
			wantErr(t, "config.json → /dev/urandom", err, "config.json is a symbolic link to /dev/urandom", "refusing to read a file from outside the checkpoint")
		}
	})
	t.Run("shard outside", func(t *testing.T) {
		d := copyCheckpoint(t, devA)
		shard := filepath.Join(d, "model-00002-of-00003.safetensors")
		moved := filepath.Join(t.TempDir(), "shard")
		os.Rename(shard, moved)
		os.Symlink(moved, shard)
		for _, follow := range []bool{false, true} {
			_, err := OpenWith(d, Options{FollowSymlinks: follow})
			wantErr(t, "shard link", err, shard+" is a symbolic link to "+moved)
		}
	})
	t.Run("link inside, through a directory link out", func(t *testing.T) {
		d := copyCheckpoint(t, devA)
		os.Symlink(filepath.Dir(outside), filepath.Join(d, "sub"))
		os.Symlink("sub/secret", filepath.Join(d, "tokenizer.json"))
		_, err := OpenWith(d, Options{FollowSymlinks: true})
		wantErr(t, "escaping through sub/", err, "is a symbolic link to "+outside+", outside")
	})
	t.Run("dangling", func(t *testing.T) {
		d := copyCheckpoint(t, devA)
		os.Symlink("nowhere.json", filepath.Join(d, "tokenizer.json"))
		_, err := OpenWith(d, Options{FollowSymlinks: true})
		wantErr(t, "dangling link", err, "is a symbolic link to nowhere.json, which does not resolve to a file")
	})
}

// With FollowSymlinks, a link whose resolved target stays inside the
// checkpoint is read, and what is read is the target's content.
func TestOpenFollowsLinksInside(t *testing.T) {
	d := copyCheckpoint(t, devA)
	os.Mkdir(filepath.Join(d, "sub"), 0o755)
	os.WriteFile(filepath.Join(d, "sub", "tok.json"), []byte(`{"tok":1}`), 0o644)
	os.Symlink("sub/tok.json", filepath.Join(d, "tokenizer.json"))
	// Relative through the parent and back in: still inside.
	os.Symlink(filepath.Join("..", filepath.Base(d), "sub", "tok.json"), filepath.Join(d, "vocab.json"))
	_, err := Open(d)
	wantErr(t, "link inside, not following", err, "tokenizer.json is a symbolic link to sub/tok.json: refusing to follow it without --follow-symlinks")
	c, err := OpenWith(d, Options{FollowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range []string{"tokenizer.json", "vocab.json"} {
		if b, err := c.ReadAux(a); err != nil || string(b) != `{"tok":1}` {
			t.Errorf("ReadAux(%s) = %q, %v", a, b, err)
		}
	}
}

// Only regular files are read; a FIFO in place of any file is refused at
// once (a blocking open would hang the test).
func TestOpenRefusesNonRegularFiles(t *testing.T) {
	for _, name := range []string{"config.json", "tokenizer.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors"} {
		d := copyCheckpoint(t, devA)
		p := filepath.Join(d, name)
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := Open(d); done <- err }()
		select {
		case err := <-done:
			var nr *jnf.NotRegularError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), p+" is a named pipe (FIFO), not a regular file") {
				t.Errorf("%s as a FIFO: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Open blocked on %s, a FIFO", name)
		}
	}
}

// Whole-file reads are capped before a byte is read: config.json at
// jnf.MaxConfigSize, the index at MaxIndexSize (sparse files here, so the
// test writes nothing).
func TestOpenCapsFileSizes(t *testing.T) {
	for _, c := range []struct {
		name string
		size int64
	}{{"config.json", jnf.MaxConfigSize + 1}, {"model.safetensors.index.json", MaxIndexSize + 1}} {
		d := copyCheckpoint(t, devA)
		if err := os.Truncate(filepath.Join(d, c.name), c.size); err != nil {
			t.Fatal(err)
		}
		_, err := Open(d)
		var le *jnf.LimitError
		if !errors.As(err, &le) || le.Max != c.size-1 || le.Size != c.size {
			t.Errorf("%s of %d bytes: %v", c.name, c.size, err)
		}
	}
}

// The shards' headers together are bounded too, before the header that
// would pass the bound is read: here a second shard whose header (of the
// largest size one file may have) is never read (a sparse file).
func TestOpenCapsHeadersOfAllShards(t *testing.T) {
	d := copyCheckpoint(t, devA)
	p := filepath.Join(d, "model-00002-of-00003.safetensors")
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], safetensors.MaxHeaderSize)
	os.WriteFile(p, lb[:], 0o644)
	os.Truncate(p, 8+safetensors.MaxHeaderSize+64)
	_, err := Open(d)
	wantErr(t, "headers over the bound", err, "the safetensors headers of the shards up to model-00002-of-00003.safetensors add up to more than the 100000000 bytes Tarfa reads")
}

const rev = "0123456789abcdef0123456789abcdef01234567"

// hubCache lays a checkpoint out as the Hugging Face hub cache does:
// models--ORG--NAME/blobs/<sha256> holds the files,
// models--ORG--NAME/snapshots/REV/<name> are links to ../../blobs/<sha256>.
func hubCache(t *testing.T, src, snapshot string) (repo, snap string) {
	t.Helper()
	repo = filepath.Join(t.TempDir(), "hub", "models--tarfa--dev-a")
	snap = filepath.Join(repo, "snapshots", snapshot)
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(snapshot), 0o644)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := jnf.SHA256Bytes(b).Hex()
		os.WriteFile(filepath.Join(repo, "blobs", sum), b, 0o644)
		if err := os.Symlink(filepath.Join("..", "..", "blobs", sum), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return repo, snap
}

func TestOpenHubCacheSnapshot(t *testing.T) {
	repo, snap := hubCache(t, devA, rev)
	_, err := Open(snap)
	wantErr(t, "hub snapshot, not following", err, "this is a Hugging Face hub cache snapshot, whose files link into "+filepath.Join(repo, "blobs")+"; --follow-symlinks reads links that stay inside it")
	c, err := OpenWith(snap, Options{FollowSymlinks: true})
	if err != nil {
		t.Fatal(err)
	}
	plain := open(t, devA)
	if len(c.Tensors) != len(plain.Tensors) || len(c.Shards) != 3 || !slicesEqual(c.Aux, plain.Aux) {
		t.Errorf("hub snapshot: %d tensors, %d shards, aux %v", len(c.Tensors), len(c.Shards), c.Aux)
	}
	c.Close()

	// A link out of models--ORG--NAME is refused even there.
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(snap, "tokenizer.json"))
	_, err = OpenWith(snap, Options{FollowSymlinks: true})
	wantErr(t, "hub snapshot, link out of the repository", err, "is a symbolic link to "+outside+", outside "+repo)

	// Not exactly the layout (a snapshot named "main", not a commit): the
	// links into ../../blobs leave the directory and are refused.
	// The repository directory instead of a snapshot: a hint.
	_, err = Open(repo)
	wantErr(t, "hub repository directory", err, "did you mean "+snap+"?")

	_, other := hubCache(t, devA, "main")
	_, err = OpenWith(other, Options{FollowSymlinks: true})
	wantErr(t, "look-alike layout", err, "refusing to read a file from outside the checkpoint, even with --follow-symlinks")
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// A directory that is no checkpoint gets a hint: a JNF directory is named
// as such, a fixture's parent directory points at the checkpoint below it.
func TestNotACheckpointHints(t *testing.T) {
	jnfDir := t.TempDir()
	os.WriteFile(filepath.Join(jnfDir, "config.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(jnfDir, "manifest.json"), []byte("{}"), 0o644)
	file := filepath.Join(jnfDir, "config.json")
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{jnfDir, []string{jnfDir + " is a JNF directory (tarfa convert's output), not a Hugging Face checkpoint"}},
		{fixtures + "qwen3moe-dev-a", []string{"neither model.safetensors.index.json nor model.safetensors found; did you mean " + fixtures + "qwen3moe-dev-a/checkpoint?"}},
		{fixtures + "qwen35moe-dev-c", []string{"did you mean one of " + fixtures + "qwen35moe-dev-c/checkpoint, " + fixtures + "qwen35moe-dev-c/checkpoint-official?"}},
		{t.TempDir(), []string{"neither model.safetensors.index.json nor model.safetensors found"}},
		{file, []string{file + " is a file, not a directory"}},
	} {
		_, err := Open(c.dir)
		var nc *NotCheckpointError
		if !errors.As(err, &nc) {
			t.Errorf("Open(%s) = %v, want a NotCheckpointError", c.dir, err)
		}
		wantErr(t, c.dir, err, c.want...)
	}
	if _, err := Open(filepath.Join(jnfDir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}
