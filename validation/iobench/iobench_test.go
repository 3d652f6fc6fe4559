package iobench

import (
	"context"
	"testing"
)

func TestRunOnFixture(t *testing.T) {
	res, err := Run(context.Background(), "../../validation/testdata/fixtures/qwen35moe-dev-e-long/checkpoint", t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 5 {
		t.Fatalf("%d phases", len(res.Phases))
	}
	for _, p := range res.Phases {
		if p.Bytes <= 0 || p.Seconds <= 0 || p.Ratio <= 0 {
			t.Errorf("phase %+v", p)
		}
	}
	// Convert writes exactly the tensor bytes; the shards hold those plus headers (and nothing is ignored here).
	if conv, raw := res.Phases[2].Bytes, res.Phases[0].Bytes; conv >= raw || conv < raw*9/10 {
		t.Errorf("convert wrote %d bytes of %d shard bytes", conv, raw)
	}
}
