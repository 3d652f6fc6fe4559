//go:build linux

package tier

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// availableMemory is MemAvailable of /proc/meminfo in bytes (0 if unknown).
func availableMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemAvailable:" {
			n, _ := strconv.ParseInt(fs[1], 10, 64)
			return n << 10
		}
	}
	return 0
}
