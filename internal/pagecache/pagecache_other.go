//go:build !linux

// Package pagecache asks the kernel whether a file's pages are in the page
// cache; only on Linux (elsewhere Resident says no).
package pagecache

// Supported says whether Resident can answer here.
const Supported = false

// Resident is always false here.
func Resident(int, int64, int) bool { return false }
