package main

import (
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
)

// TestDescribeResidency: the banner line of a device backend says the
// budget, the memory in use and which weights stay on the host.
func TestDescribeResidency(t *testing.T) {
	got := describeResidency(backend.Residency{Device: "NVIDIA H200 (sm_90, 139.8 GiB)", Budget: 16 << 30, InUse: 3 << 29,
		DeviceWeights: 1 << 30, DeviceWeightCount: 21, HostWeights: 1 << 29, HostWeightCount: 1, HostResident: []string{"model.embed_tokens.weight"}})
	for _, want := range []string{"NVIDIA H200", "budget 16.00 GiB", "1.50 GiB in use", "1.00 GiB on the device (21)", "0.50 GiB on the host (1): model.embed_tokens.weight"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if got := describeResidency(backend.Residency{Device: "d"}); !strings.Contains(got, "whole device") || strings.Contains(got, "(0):") {
		t.Errorf("no budget, nothing on the host: %q", got)
	}
}
