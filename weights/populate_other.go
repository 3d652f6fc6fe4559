//go:build !linux

package weights

// mapPopulate is 0 where mmap has no MAP_POPULATE: a spare buffer's pages
// are faulted in by its pinning, or by its first use.
const mapPopulate = 0
