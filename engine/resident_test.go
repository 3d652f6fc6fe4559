package engine

import (
	"testing"

	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/weights"
)

// ramTier is a streaming hierarchy over ck that keeps up to ram bytes of
// verified experts resident in RAM (tier.Auto: every one, for these small
// models), closed when the test ends: the engine keeps no expert, so a
// test that wants them kept in memory gives it this source, as the runner
// does in production.
func ramTier(tb testing.TB, ck *weights.Checkpoint, ram int64) *tier.Hierarchy {
	tb.Helper()
	h, err := tier.New(ck, tier.Options{RAMBudget: ram, StagingBudget: tier.Auto})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := h.Close(); err != nil {
			tb.Errorf("closing the tier: %v", err)
		}
	})
	return h
}

// loadResident is loadWith with every routed expert kept in a RAM tier.
func loadResident(tb testing.TB, ckpt string, opt Options) *Model {
	tb.Helper()
	opt.Experts = ramTier(tb, attested(tb, ckpt), tier.Auto)
	return loadWith(tb, ckpt, opt)
}
