//go:build unix

package jnf

import (
	"os"
	"syscall"
)

// oNoFollow makes an open fail on a symbolic link instead of following it.
const oNoFollow = syscall.O_NOFOLLOW

// setBlocking clears the O_NONBLOCK flag a file was opened with (so that
// opening a FIFO could not block), once it is known to be a regular file.
func setBlocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
