//go:build !unix

package jnf

import "os"

// oNoFollow is not available here; OpenModelFile's Lstat still refuses a
// link.
const oNoFollow = 0

func setBlocking(*os.File) error { return nil }
