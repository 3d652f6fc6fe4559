package backendtest

import (
	"fmt"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
)

// TestCPU runs the suite on the CPU backend with several thread counts,
// every operation forced onto its parallel path.
func TestCPU(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprintf("threads=%d", n), func(t *testing.T) {
			c := cpu.New(n)
			c.SetMinParallelWork(0)
			Run(t, c, Options{})
		})
	}
}

// TestDevice runs the suite on the simulated device (it must itself be a
// conforming backend for the tests that use it to mean anything).
func TestDevice(t *testing.T) {
	Run(t, NewDevice(2, 3), Options{})
}
