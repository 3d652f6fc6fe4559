//go:build !linux

// Package pagecache asks the kernel whether a file's pages are in the page
// cache; only on Linux (elsewhere Resident says no).
package pagecache

// Supported says whether Resident can answer here.
const Supported = false

// Resident is always false here.
func Resident(int, int64, int) bool { return false }

// A Map answers no here.
type Map struct{}

// NewMap makes a Map that answers no.
func NewMap(int, int64) (*Map, error) { return &Map{}, nil }

// Resident is always false here.
func (*Map) Resident(int64, int) bool { return false }

// Likely is always false here.
func (*Map) Likely(int64, int) bool { return false }

// Close does nothing.
func (*Map) Close() error { return nil }
