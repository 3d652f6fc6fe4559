//go:build unix

// Package flock is an exclusive lock on a directory a Tarfa command writes:
// flock(2) on a lock file in it, holding the holder's process id. A second
// writer waits for the first (or is refused at once) and can say who holds
// the lock. The kernel releases a flock when its holder exits, however it
// exits, so a killed writer never leaves a stale lock: the file it leaves
// behind is taken over by the next writer.
package flock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Name is the conventional lock file name in a directory.
const Name = ".tarfa.lock"

// PollInterval is how often Acquire retries while another process holds
// the lock.
const PollInterval = 100 * time.Millisecond

// Lock is a held lock. Unlock releases it.
type Lock struct {
	f    *os.File
	path string
}

// HeldError says another process holds the lock.
type HeldError struct {
	Path string
	PID  int // the holder's process id; 0 if it has not written it yet
}

func (e *HeldError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s is held by another process", e.Path)
	}
	return fmt.Sprintf("%s is held by process %d", e.Path, e.PID)
}

// TryAcquire takes the lock at path, creating the file, or returns a
// *HeldError at once if another process (or another Lock in this one)
// holds it.
func TryAcquire(path string) (*Lock, error) {
	// The file can be replaced between our open and our flock (a holder
	// removes it on Unlock): retry until the locked file is the one at path.
	for range 100 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if !st.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("lock %s is not a regular file", path)
		}
		if openedHook != nil {
			openedHook(path)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := readPID(f)
			f.Close()
			return nil, &HeldError{Path: path, PID: pid}
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if now, err := os.Lstat(path); err != nil || !os.SameFile(st, now) {
			f.Close() // removed or replaced since we opened it
			continue
		}
		if err := writePID(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return &Lock{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("lock %s: the file keeps being replaced", path)
}

// openedHook, set by tests only, runs between TryAcquire's open and its
// flock: where another process can remove or replace the file.
var openedHook func(path string)

// Acquire takes the lock at path, waiting while another process holds it.
// waiting, if not nil, is called when Acquire starts to wait and again if
// the holder changes, with the holder's pid (0 if unknown). Acquire returns
// ctx's error if ctx is done first.
func Acquire(ctx context.Context, path string, waiting func(pid int)) (*Lock, error) {
	told := -1
	for {
		l, err := TryAcquire(path)
		var held *HeldError
		if !errors.As(err, &held) {
			return l, err
		}
		if waiting != nil && held.PID != told {
			waiting(held.PID)
			told = held.PID
		}
		t := time.NewTimer(PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Unlock removes the lock file and releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Removed while held, so no one can lock the old file after us; a
	// waiter that opened it retries on the new one (see TryAcquire).
	err := os.Remove(l.path)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// readPID reads the holder's pid (at most 32 bytes); 0 if there is none yet.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
