//go:build unix

package main

import "golang.org/x/sys/unix"

// freeSpace is the space available to an unprivileged writer on dir's file
// system (statfs f_bavail × f_bsize); known is false where it cannot be told.
func freeSpace(dir string) (free uint64, known bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true, nil
}
