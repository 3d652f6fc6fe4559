package enginebench

import (
	"context"
	"testing"

	"github.com/tarfa-ai/tarfa/validation/synth"
)

func TestRunChecksBitIdentity(t *testing.T) {
	dir, _, err := synth.EnsureDefault(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), dir, []int{1, 2, 3}, 9, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.BitIdentical || r.PrefillTokS <= 0 || r.DecodeTokS <= 0 || r.DecodeTokens != 4 || r.ExpertsPerTok != 2 || r.LogitsDigest != res[0].LogitsDigest {
			t.Errorf("%+v", r)
		}
	}
	if res[0].Threads != 1 || res[2].Threads != 3 {
		t.Errorf("thread counts %d %d", res[0].Threads, res[2].Threads)
	}
}
