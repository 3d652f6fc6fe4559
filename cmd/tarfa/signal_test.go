//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the built binary: signals, exit statuses as the shell
// sees them, several processes at once.

var (
	goCache string // the build cache before TestMain moved XDG_CACHE_HOME
	binOnce sync.Once
	binPath string
	binErr  error
)

// tarfaBinary builds the command once for the package's tests.
func tarfaBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tarfa-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "tarfa")
		c := exec.Command("go", "build", "-o", binPath, ".")
		if goCache != "" {
			c.Env = append(os.Environ(), "GOCACHE="+goCache)
		}
		out, err := c.CombinedOutput()
		if err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v", binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	if os.Getenv("TARFA_TEST_STUCK_COMMAND") != "" {
		stuckCommand()
	}
	// The tests never touch the user's cache (default model, heat ledgers):
	// one temporary cache for the whole test binary, unless a test sets its own.
	cache, err := os.MkdirTemp("", "tarfa-cmd-test-cache-")
	if err != nil {
		panic(err)
	}
	// The binary the tests run is built with the user's Go build cache,
	// which lives under XDG_CACHE_HOME unless GOCACHE says otherwise.
	if b, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
		goCache = strings.TrimSpace(string(b))
	}
	os.Setenv("XDG_CACHE_HOME", cache)
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.RemoveAll(cache)
	os.Exit(code)
}

// stuckCommand stands for a command that does not stop when its context
// is cancelled: it runs main's signal handling and then ignores the
// cancellation (run in a child process by TestSecondSignalExits).
func stuckCommand() {
	ctx, stop := interruptContext(context.Background())
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("cancelled")
	time.Sleep(time.Hour)
	os.Exit(0)
}

// The first SIGINT cancels the command and says so; a second one exits at
// once with status 130, even if the command does not stop.
func TestSecondSignalExits(t *testing.T) {
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), "TARFA_TEST_STUCK_COMMAND=1")
	p := &proc{cmd: c, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	c.Stdout, c.Stderr = p.stdout, p.stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = c.Wait(); close(p.done) }()
	defer c.Process.Kill()
	waitFor(t, "the helper to start", 30*time.Second, func() bool { return strings.Contains(p.stdout.String(), "ready") })
	c.Process.Signal(os.Interrupt)
	waitFor(t, "the cancellation", 5*time.Second, func() bool { return strings.Contains(p.stdout.String(), "cancelled") })
	if !strings.Contains(p.stderr.String(), "interrupted, stopping (interrupt again to quit at once)") {
		t.Errorf("first signal: stderr %q", p.stderr.String())
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case <-p.done:
		t.Fatal("the first signal ended the process")
	default:
	}
	c.Process.Signal(os.Interrupt)
	if code := p.exitWithin(t, 2*time.Second); code != exitInterrupted {
		t.Errorf("second signal: exit %d, want %d", code, exitInterrupted)
	}
}

// proc is a started tarfa.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

func start(t *testing.T, env []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	c := exec.Command(tarfaBinary(t), args...)
	c.Env = append(os.Environ(), env...)
	p := &proc{cmd: c, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	c.Stdout, c.Stderr, c.Stdin = p.stdout, p.stderr, stdin
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = c.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			c.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exitWithin waits up to d for the process and returns its exit status.
func (p *proc) exitWithin(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%v still running %v after the signal; stderr:\n%s", p.cmd.Args, d, p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// interrupt sends SIGINT and checks that the process exits with status 130
// within two seconds, saying it was interrupted.
func interrupt(t *testing.T, p *proc, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := p.exitWithin(t, 2*time.Second); code != exitInterrupted {
		t.Fatalf("%v after %v: exit %d, want %d; stderr:\n%s", p.cmd.Args[1:], sig, code, exitInterrupted, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "tarfa: interrupted") || strings.Contains(p.stderr.String(), "context canceled") {
		t.Errorf("%v: stderr does not say interrupted:\n%s", p.cmd.Args[1:], p.stderr.String())
	}
}

// A synth writing gigabytes stops within a second of Ctrl-C and removes what
// it wrote; what a killed one leaves is removed by the next.
func TestSignalSynth(t *testing.T) {
	out := filepath.Join(t.TempDir(), "real")
	real := []string{"synth", "--arch", "qwen3_moe", "--preset", "real", "--layers", "1", "--no-tokenizer", "--out", out}
	temps := func() []string { m, _ := filepath.Glob(filepath.Join(out, ".*.tmp-*")); return m }
	p := start(t, nil, nil, real...)
	waitFor(t, "synth to start writing", 60*time.Second, func() bool { return len(temps()) > 0 })
	interrupt(t, p, os.Interrupt)
	if !strings.Contains(p.stderr.String(), "is removed") {
		t.Errorf("no word on what was left:\n%s", p.stderr.String())
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(out)
		t.Errorf("an interrupted synth left %v (%v)", ents, err)
	}

	// Killed (no cleanup possible): the next synth into the same
	// directory removes the leftovers.
	p = start(t, nil, nil, real...)
	waitFor(t, "synth to start writing", 60*time.Second, func() bool { return len(temps()) > 0 })
	p.cmd.Process.Kill()
	<-p.done
	if len(temps()) == 0 {
		t.Fatal("a killed synth left no temporary file: the test does not test the clean-up")
	}
	if out, err := exec.Command(tarfaBinary(t), "synth", "--out", out, "--no-tokenizer").CombinedOutput(); err != nil {
		t.Fatalf("synth over a killed synth's leftovers: %v\n%s", err, out)
	}
	if left := temps(); len(left) != 0 {
		t.Errorf("leftovers of the killed synth remain: %v", left)
	}
}

// Commands reading standard input stop on SIGINT and SIGTERM although
// nothing arrives there.
func TestSignalStdinCommands(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, c := range []struct {
		args []string
		sig  os.Signal
	}{
		{[]string{"tokenize", "--tokenizer", qwenTokenizerDir}, os.Interrupt},
		{[]string{"tokenize", "--tokenizer", qwenTokenizerDir, "--decode"}, syscall.SIGTERM},
		{[]string{"template", "--tokenizer", qwenTokenizerDir}, os.Interrupt},
		{[]string{"run", "-"}, syscall.SIGTERM},
	} {
		r, w, err := os.Pipe() // stays open: the command waits on it
		if err != nil {
			t.Fatal(err)
		}
		p := start(t, nil, r, c.args...)
		r.Close()
		time.Sleep(time.Second) // the command is waiting on its input by now
		interrupt(t, p, c.sig)
		w.Close()
	}
}

// run stops within a second of Ctrl-C in the middle of generating, and the
// text it printed ends with a newline before the message.
func TestSignalRun(t *testing.T) {
	env := []string{"XDG_CACHE_HOME=" + t.TempDir()}
	p := start(t, env, nil, "run", "Tell me about experts.", "--max-tokens", "100000")
	waitFor(t, "generated text", 60*time.Second, func() bool { return len(p.stdout.String()) > 20 })
	interrupt(t, p, os.Interrupt)
	if out := p.stdout.String(); !strings.HasSuffix(out, "\n") {
		t.Errorf("the output does not end with a newline: %q", out[max(0, len(out)-40):])
	}
}

// Four tarfa run started together on an empty cache: one builds the
// embedded default model, the others wait for it; all give the same tokens.
func TestConcurrentFirstRuns(t *testing.T) {
	env := []string{"XDG_CACHE_HOME=" + t.TempDir()}
	var ps []*proc
	for range 4 {
		ps = append(ps, start(t, env, nil, "run", "Hello", "--max-tokens", "5", "--json"))
	}
	var first []int
	built := 0
	for i, p := range ps {
		if code := p.exitWithin(t, 120*time.Second); code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, p.stderr.String())
		}
		var r struct {
			Tokens []int `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(p.stdout.String()), &r); err != nil || len(r.Tokens) == 0 {
			t.Fatalf("run %d: %v %q", i, err, p.stdout.String())
		}
		if i == 0 {
			first = r.Tokens
		} else if !slices.Equal(r.Tokens, first) {
			t.Errorf("run %d generated %v, run 0 %v", i, r.Tokens, first)
		}
		built += strings.Count(p.stderr.String(), "built the embedded default model")
	}
	if built != 1 {
		t.Errorf("the embedded default model was built %d times", built)
	}
}

// The exit statuses as the shell sees them.
func TestBinaryExitStatuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"version"}, 0},
		{[]string{"run", "--max-tokens", "0", "x"}, 1},
		{[]string{"verify", fixtures + "qwen3moe-dev-a/checkpoint"}, 1},
	} {
		err := exec.Command(tarfaBinary(t), c.args...).Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.want {
			t.Errorf("tarfa %v: exit %d, want %d", c.args, code, c.want)
		}
	}
}
