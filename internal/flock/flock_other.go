//go:build !unix

package flock

import (
	"context"
	"errors"
	"time"
)

// Name is the conventional lock file name in a directory.
const Name = ".tarfa.lock"

// PollInterval is how often Acquire retries while another process holds
// the lock.
const PollInterval = 100 * time.Millisecond

// ErrUnsupported is returned where flock(2) does not exist.
var ErrUnsupported = errors.New("flock: locking is not supported on this system")

// Lock is a held lock.
type Lock struct{ path string }

// HeldError says another process holds the lock.
type HeldError struct {
	Path string
	PID  int
}

func (e *HeldError) Error() string { return e.Path + " is held by another process" }

// TryAcquire returns ErrUnsupported.
func TryAcquire(path string) (*Lock, error) { return nil, ErrUnsupported }

// Acquire returns ErrUnsupported.
func Acquire(ctx context.Context, path string, waiting func(pid int)) (*Lock, error) {
	return nil, ErrUnsupported
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Unlock does nothing.
func (l *Lock) Unlock() error { return nil }
