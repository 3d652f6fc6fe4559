package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/internal/flock"
)

const devACheckpoint = fixtures + "qwen3moe-dev-a/checkpoint"

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCLIContext runs the command line under ctx, returning stdout and the
// buffer stderr goes to.
func runCLIContext(ctx context.Context, stderr *syncBuffer, args ...string) (string, error) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func copyFixture(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ckpt")
	os.MkdirAll(dst, 0o755)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

func TestConvertRefusesBadFlags(t *testing.T) {
	src := copyFixture(t, devACheckpoint)
	out := filepath.Join(t.TempDir(), "m")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", out, "--workers", "0"}, "--workers 0: want 1 to 64"},
		{[]string{"--out", out, "--workers", "-3"}, "--workers -3: want 1 to 64"},
		{[]string{"--out", out, "--workers", "100000"}, "--workers 100000: want 1 to 64"},
		{[]string{"--out", src}, "is the source checkpoint"},
		{[]string{"--out", filepath.Join(src, "jnf")}, "is inside the source checkpoint"},
		{[]string{"--out", filepath.Dir(src)}, "is inside the output directory"},
	} {
		_, err := runCLI(t, "", append([]string{"convert", src}, c.args...)...)
		if exitCode(err) != exitError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("convert %v: exit %d, %v; want %q", c.args, exitCode(err), err, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused conversion created --out: %v", err)
	}
	if ents, _ := os.ReadDir(src); len(ents) != 6 {
		t.Errorf("the source holds %d entries after the refused conversions", len(ents))
	}
}

// A second tarfa writing the same --out says who holds it and waits, or
// with --no-wait fails at once.
func TestConvertLockMessages(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	os.MkdirAll(out, 0o755)
	l, err := flock.TryAcquire(filepath.Join(out, flock.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	holder := fmt.Sprintf("another tarfa (pid %d) is writing %s", os.Getpid(), out)
	_, err = runCLI(t, "", "convert", devACheckpoint, "--out", out, "--no-wait")
	if exitCode(err) != exitError || err.Error() != holder+": not waiting for it (--no-wait)" {
		t.Errorf("--no-wait: exit %d, %v", exitCode(err), err)
	}
	var stderr syncBuffer
	done := make(chan error, 1)
	var stdout string
	go func() {
		var err error
		stdout, err = runCLIContext(context.Background(), &stderr, "convert", devACheckpoint, "--out", out)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), holder+", waiting…") {
		if time.Now().After(deadline) {
			t.Fatalf("no waiting message; stderr: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Unlock()
	if err := <-done; err != nil || !strings.Contains(stdout, "5 files written") {
		t.Fatalf("after the lock was released: %v\n%s", err, stdout)
	}
}

// An interrupted conversion says how to resume.
func TestConvertInterruptedSaysHowToResume(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr syncBuffer
	_, err := runCLIContext(ctx, &stderr, "convert", devACheckpoint, "--out", filepath.Join(t.TempDir(), "m"))
	if exitCode(err) != exitInterrupted || !strings.HasPrefix(errorMessage(err), "interrupted: rerun the same command to resume") {
		t.Errorf("interrupted convert: exit %d, %v", exitCode(err), err)
	}
}

// A JNF directory or a fixture's parent where a checkpoint is expected gets
// a hint, in inspect and convert alike.
func TestInspectAndConvertHints(t *testing.T) {
	jnfDir := filepath.Join(t.TempDir(), "m")
	if _, err := runCLI(t, "", "convert", devACheckpoint, "--out", jnfDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
	}{
		{jnfDir, jnfDir + " is a JNF directory (tarfa convert's output), not a Hugging Face checkpoint"},
		{fixtures + "qwen3moe-dev-a", "did you mean " + fixtures + "qwen3moe-dev-a/checkpoint?"},
	} {
		for _, args := range [][]string{{"inspect", c.dir}, {"convert", c.dir, "--out", filepath.Join(t.TempDir(), "x")}} {
			if args[0] == "inspect" && c.dir == jnfDir {
				continue // inspect describes a JNF model (TestInspectFP8)
			}
			_, err := runCLI(t, "", args...)
			if exitCode(err) != exitError || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: exit %d, %v; want %q", args, exitCode(err), err, c.want)
			}
		}
	}
}

// --follow-symlinks, in convert and inspect: a link inside the checkpoint is
// read only with it; a link out of the checkpoint never.
func TestFollowSymlinksFlag(t *testing.T) {
	src := copyFixture(t, devACheckpoint)
	os.WriteFile(filepath.Join(src, "real-tokenizer.json"), []byte(`{"model":{}}`), 0o644)
	os.Symlink("real-tokenizer.json", filepath.Join(src, "tokenizer.json"))
	for _, cmd := range [][]string{{"inspect", src}, {"convert", src, "--out", filepath.Join(t.TempDir(), "m")}} {
		if _, err := runCLI(t, "", cmd...); err == nil || !strings.Contains(err.Error(), "tokenizer.json is a symbolic link to real-tokenizer.json: refusing to follow it without --follow-symlinks") {
			t.Errorf("%v: %v", cmd, err)
		}
		if _, err := runCLI(t, "", append(cmd, "--follow-symlinks")...); err != nil {
			t.Errorf("%v --follow-symlinks: %v", cmd, err)
		}
	}
	secret := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(secret, []byte("root:x:0:0\n"), 0o644)
	os.Remove(filepath.Join(src, "tokenizer.json"))
	os.Symlink(secret, filepath.Join(src, "tokenizer.json"))
	_, err := runCLI(t, "", "convert", src, "--out", filepath.Join(t.TempDir(), "m"), "--follow-symlinks")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(src, "tokenizer.json")+" is a symbolic link to "+secret+", outside "+src) {
		t.Errorf("link out of the checkpoint with --follow-symlinks: %v", err)
	}
}
