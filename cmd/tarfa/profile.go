package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of the whole command to the file that
// TARFA_CPUPROFILE names, for measuring where a benchmark's time goes (read
// it with go tool pprof). It changes nothing the command computes. The
// returned function ends the profile; it is a no-op when the variable is
// unset.
func startProfile() (stop func(), err error) {
	path := os.Getenv("TARFA_CPUPROFILE")
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("TARFA_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("TARFA_CPUPROFILE %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "tarfa: TARFA_CPUPROFILE:", err)
		}
	}, nil
}
