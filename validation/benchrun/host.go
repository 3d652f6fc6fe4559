package benchrun

import (
	"bufio"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Host describes the machine a benchmark ran on, for the record that goes
// beside its figures.
type Host struct {
	CPU        string `json:"cpu"`  // model name from /proc/cpuinfo ("" when unknown)
	CPUs       int    `json:"cpus"` // runtime.NumCPU
	GOMAXPROCS int    `json:"gomaxprocs"`
	MemBytes   int64  `json:"mem_bytes"` // MemTotal from /proc/meminfo (0 when unknown)
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
}

// ThisHost describes the current machine. Fields it cannot read (off
// Linux) are left empty.
func ThisHost() Host {
	h := Host{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	h.CPU = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		h.MemBytes = kb << 10
	}
	return h
}

// LoadAverage returns the 1-minute load average from /proc/loadavg, or -1
// when it cannot be read: a load well above the core count says other work
// shared the machine during the measurement.
func LoadAverage() float64 {
	f, err := os.Open("/proc/loadavg")
	if err != nil {
		return -1
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// procField returns the trimmed value of the first line "key: value" of
// a small /proc file, or "".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
