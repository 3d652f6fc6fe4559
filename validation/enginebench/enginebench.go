// Package enginebench measures the CPU reference engine's prefill and decode
// throughput at several thread counts on one model, and checks beside every
// number that the logits are bit-identical across the thread counts.
package enginebench

import (
	"context"
	"fmt"
	"math"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/engine/runner"
)

// Result is one thread count's measurement.
type Result struct {
	Threads       int     `json:"threads"`
	PromptTokens  int     `json:"prompt_tokens"`
	DecodeTokens  int     `json:"decode_tokens"`
	PrefillSecs   float64 `json:"prefill_seconds"`
	DecodeSecs    float64 `json:"decode_seconds"`
	PrefillTokS   float64 `json:"prefill_tokens_per_second"`
	DecodeTokS    float64 `json:"decode_tokens_per_second"`
	LogitsDigest  string  `json:"logits_digest"` // of every step's logits
	BitIdentical  bool    `json:"bit_identical"` // to the first thread count's logits
	ExpertsPerTok float64 `json:"experts_per_token_per_moe_layer"`
}

// Run opens dir once per thread count and runs the same greedy generation.
// cacheBytes is runner.Options.ExpertCacheBytes: -1 keeps every verified
// expert in RAM after the warm-up run (compute alone), 0 reads and verifies
// every expert on every use (the cost of streaming from the page cache).
func Run(ctx context.Context, dir string, threads []int, promptTokens, decodeTokens int, cacheBytes int64) ([]Result, error) {
	var out []Result
	var ref [][]float32
	for _, th := range threads {
		r, err := runner.Open(ctx, dir, runner.Options{Threads: th, ExpertCacheBytes: cacheBytes})
		if err != nil {
			return nil, err
		}
		V := r.Config.Vocab
		prompt := make([]int, promptTokens)
		for i := range prompt {
			prompt[i] = (i*7919 + 13) % V
		}
		// Warm the expert cache and the page cache with one untimed run.
		if _, err := engine.Generate(ctx, r.Engine.NewSession(), prompt, engine.GenOptions{MaxTokens: decodeTokens}, nil); err != nil {
			r.Close()
			return nil, err
		}
		before := r.Engine.Stats()
		var steps [][]float32
		res, err := engine.Generate(ctx, r.Engine.NewSession(), prompt, engine.GenOptions{MaxTokens: decodeTokens}, func(_ int, lg []float32) error {
			steps = append(steps, append([]float32(nil), lg...))
			return nil
		})
		after := r.Engine.Stats()
		r.Close()
		if err != nil {
			return nil, err
		}
		x := Result{Threads: r.Threads, PromptTokens: promptTokens, DecodeTokens: len(res.Tokens),
			PrefillSecs: res.Prefill.Seconds(), DecodeSecs: res.Decode.Seconds()}
		x.PrefillTokS = float64(promptTokens) / x.PrefillSecs
		if n := len(res.Tokens) - 1; n > 0 && x.DecodeSecs > 0 {
			x.DecodeTokS = float64(n) / x.DecodeSecs
		}
		x.LogitsDigest = digest(steps)
		if ref == nil {
			ref = steps
		}
		x.BitIdentical = identical(ref, steps)
		var evals int64
		moe := 0
		for l, n := range after.ExpertEvals {
			if r.Config.Sparse[l] {
				evals += n - before.ExpertEvals[l]
				moe++
			}
		}
		if tok := after.Tokens - before.Tokens; tok > 0 && moe > 0 {
			x.ExpertsPerTok = float64(evals) / float64(tok) / float64(moe)
		}
		out = append(out, x)
	}
	return out, nil
}

func identical(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

func digest(steps [][]float32) string {
	h := uint64(1469598103934665603)
	for _, s := range steps {
		for _, v := range s {
			h ^= uint64(math.Float32bits(v))
			h *= 1099511628211
		}
	}
	return fmt.Sprintf("fnv64:%016x", h)
}
