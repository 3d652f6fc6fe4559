//go:build !linux

package tier

// availableMemory is unknown here.
func availableMemory() int64 { return 0 }

// TotalMemory is the machine's memory, unknown here (0).
func TotalMemory() int64 { return 0 }
