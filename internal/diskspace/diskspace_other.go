//go:build !unix

package diskspace

// Free cannot tell the free space here: known is false.
func Free(dir string) (free uint64, known bool, err error) { return 0, false, nil }
