//go:build unix

// Package diskspace tells how much space a directory's file system has for
// a writer, so commands refuse work that cannot fit before writing a byte.
package diskspace

import "golang.org/x/sys/unix"

// Free is the space available to an unprivileged writer on dir's file
// system (statfs f_bavail × f_bsize); known is false where it cannot be
// told.
func Free(dir string) (free uint64, known bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true, nil
}
