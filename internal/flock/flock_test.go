//go:build unix

package flock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// helperEnv makes the test binary a lock holder: it takes the lock at the
// path the variable names, prints "locked", and sleeps until killed.
const helperEnv = "TARFA_FLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		l, err := Acquire(context.Background(), path, nil)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println("locked")
		time.Sleep(time.Hour)
		l.Unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holder starts a child process that holds the lock at path.
func holder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder: %q, %v", line, err)
	}
	return cmd
}

func TestTryAcquireReportsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = TryAcquire(path)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("second TryAcquire: %v, want a HeldError with pid %d", err, os.Getpid())
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("lock file left behind after Unlock: %v", err)
	}
	l, err = TryAcquire(path)
	if err != nil {
		t.Fatalf("TryAcquire after Unlock: %v", err)
	}
	l.Unlock()
}

// Goroutines contending for one lock never hold it at the same time, and
// every one gets it.
func TestAcquireExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	var in, max, done atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := Acquire(context.Background(), path, nil)
			if err != nil {
				t.Error(err)
				return
			}
			n := in.Add(1)
			for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			in.Add(-1)
			done.Add(1)
			if err := l.Unlock(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if max.Load() != 1 || done.Load() != 8 {
		t.Errorf("%d holders at once, %d of 8 got the lock", max.Load(), done.Load())
	}
}

// Acquire waits for the holder, says who it is, and gives up when its
// context ends.
func TestAcquireWaitsAndReportsPID(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	child := holder(t, path)
	var told []int
	ctx, cancel := context.WithTimeout(context.Background(), 3*PollInterval)
	defer cancel()
	start := time.Now()
	_, err := Acquire(ctx, path, func(pid int) { told = append(told, pid) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while another process holds the lock: %v", err)
	}
	if len(told) != 1 || told[0] != child.Process.Pid {
		t.Errorf("waiting called with %v, want [%d] once", told, child.Process.Pid)
	}
	if d := time.Since(start); d > 3*PollInterval+time.Second {
		t.Errorf("Acquire returned %v after its context ended", d)
	}
}

// The kernel releases the lock when its holder dies (SIGKILL: no cleanup
// runs); a waiter gets it, taking over the file left behind.
func TestLockReleasedOnProcessDeath(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	child := holder(t, path)
	var held *HeldError
	if _, err := TryAcquire(path); !errors.As(err, &held) || held.PID != child.Process.Pid {
		t.Fatalf("TryAcquire while the child holds the lock: %v, want pid %d", err, child.Process.Pid)
	}
	got := make(chan error, 1)
	go func() {
		l, err := Acquire(context.Background(), path, nil)
		if err == nil {
			err = l.Unlock()
		}
		got <- err
	}()
	time.Sleep(2 * PollInterval)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock of a killed process was not released")
	}
}

func TestRefusesLinkedLockFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	path := filepath.Join(dir, Name)
	os.Symlink(target, path)
	if _, err := TryAcquire(path); err == nil {
		t.Fatal("locked through a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestReplacedBetweenOpenAndFlock: the lock file is removed, or replaced by
// another holder's, after TryAcquire opened it and before it locked it.
// Locking the orphaned file would let two writers hold "the" lock at once;
// TryAcquire must lock the file that is at path when it returns.
func TestReplacedBetweenOpenAndFlock(t *testing.T) {
	for _, c := range []struct {
		name string
		race func(t *testing.T, path string) *Lock // runs once, after the open
	}{
		{"removed (a holder's Unlock)", func(t *testing.T, path string) *Lock {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"replaced by another holder's file", func(t *testing.T, path string) *Lock {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			other, err := TryAcquire(path)
			if err != nil {
				t.Fatal(err)
			}
			return other
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), Name)
			if err := os.WriteFile(path, nil, 0o644); err != nil { // left by a killed holder
				t.Fatal(err)
			}
			var other *Lock
			openedHook = func(p string) {
				openedHook = nil // once; the other holder's TryAcquire runs without it
				other = c.race(t, p)
			}
			defer func() { openedHook = nil }()
			l, err := TryAcquire(path)
			if other != nil {
				defer other.Unlock()
				var held *HeldError
				if !errors.As(err, &held) {
					l.Unlock()
					t.Fatalf("TryAcquire while another Lock holds the file now at the path: %v, want a HeldError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock()
			st, err := l.f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if now, err := os.Lstat(path); err != nil || !os.SameFile(st, now) {
				t.Fatalf("the locked file is not the one at %s (%v): another writer can lock that one", path, err)
			}
		})
	}
}
