//go:build linux

package tier

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// availableMemory is MemAvailable of /proc/meminfo in bytes (0 if unknown).
func availableMemory() int64 { return meminfo("MemAvailable:") }

// TotalMemory is the machine's memory (MemTotal of /proc/meminfo) in
// bytes, 0 if unknown.
func TotalMemory() int64 { return meminfo("MemTotal:") }

// meminfo is the field of /proc/meminfo named key, in bytes.
func meminfo(key string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == key {
			n, _ := strconv.ParseInt(fs[1], 10, 64)
			return n << 10
		}
	}
	return 0
}
