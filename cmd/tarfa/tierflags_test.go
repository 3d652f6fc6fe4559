package main

import (
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/tier/policy"
)

// The --policy list of run, serve and bench decode names the policies a
// real model's tier can run: the default, and no measuring device.
func TestOnlinePoliciesLeaveOutMeasuringDevices(t *testing.T) {
	got := onlinePolicies()
	if !slices.Contains(got, policy.Default) {
		t.Errorf("%v lacks the default %s", got, policy.Default)
	}
	for _, n := range got {
		if policy.Evaluation(n) || policy.NeedsHeat(n) || !policy.Online(n) {
			t.Errorf("%v names %s", got, n)
		}
	}
	if slices.Contains(got, "oracle") || slices.Contains(got, "oracle-learn") || slices.Contains(got, "belady") {
		t.Errorf("%v names a measuring device", got)
	}
}
