package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// TestFP8Mode: serving a block-FP8 checkpoint, every response says so in
// X-Tarfa-Mode and in its tarfa member ("exact, fp8 checkpoint"), never
// just "exact".
func TestFP8Mode(t *testing.T) {
	o, err := synth.DefaultOptions()
	if err != nil {
		t.Fatal(err)
	}
	o.DType = synth.DTypeFP8
	dir, err := synth.Converted(context.Background(), t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureDir(t, dir, Options{}, runner.SchedOptions{MaxBatch: 2})
	resp, err := http.Post(f.hs.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"Hello","max_tokens":3,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get(HeaderMode); got != "exact, fp8 checkpoint" {
		t.Errorf("%s: %q, want %q", HeaderMode, got, "exact, fp8 checkpoint")
	}
	var body struct {
		Tarfa struct {
			Mode string `json:"mode"`
		} `json:"tarfa"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Tarfa.Mode != "exact, fp8 checkpoint" {
		t.Errorf("tarfa member mode %q (%v): %s", body.Tarfa.Mode, err, b)
	}
}
