//go:build unix

package hf

import "syscall"

// oNoFollow makes an open fail on a symbolic link (ELOOP).
const oNoFollow = syscall.O_NOFOLLOW
