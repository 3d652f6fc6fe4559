package conformance

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

const fixtures = "../../validation/testdata/fixtures/"

func TestFixturesConform(t *testing.T) {
	for _, c := range []struct{ ckpt, ref string }{
		{"qwen3moe-dev-a/checkpoint", "qwen3moe-dev-a"},
		{"qwen35moe-dev-c/checkpoint", "qwen35moe-dev-c"},
		{"qwen35moe-dev-c/checkpoint-official", "qwen35moe-dev-c"},
		{"qwen35moe-dev-e-long/checkpoint", "qwen35moe-dev-e-long"},
		// Synthetic checkpoints with HF references (validation/testdata/synthref/PROVENANCE.md).
		{"../synthref/q3-dense-tied-norenorm/checkpoint", "../synthref/q3-dense-tied-norenorm"},
		{"../synthref/q3-heap-topk-sparse-step/checkpoint", "../synthref/q3-heap-topk-sparse-step"},
		{"../synthref/q35-ratio3-hd40-tied/checkpoint", "../synthref/q35-ratio3-hd40-tied"},
		// Block-FP8 checkpoints against transformers' FP8Linear / FP8Experts
		// (W8A8, the function Tarfa computes; atol 5e-4) and against its
		// dequantize=True fallback (W8A16, another function: atol 4e-3)
		// (validation/testdata/synthref-fp8/PROVENANCE.md).
		{"../synthref-fp8/q3-fp8/checkpoint", "../synthref-fp8/q3-fp8"},
		{"../synthref-fp8/q35-fp8/checkpoint", "../synthref-fp8/q35-fp8"},
		{"../synthref-fp8/q3-fp8/checkpoint", "../synthref-fp8/q3-fp8/w8a16"},
		{"../synthref-fp8/q35-fp8/checkpoint", "../synthref-fp8/q35-fp8/w8a16"},
	} {
		t.Run(c.ref, func(t *testing.T) {
			rep, err := Run(context.Background(), fixtures+c.ckpt, fixtures+c.ref, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Pass || !rep.ExpertEvalsOK {
				t.Errorf("does not conform: %+v", rep)
			}
			for _, p := range rep.Prompts {
				if len(p.MaxAbsAt) != p.Tokens || p.ArgmaxAgree != p.Tokens {
					t.Errorf("prompt %d: %d positions, argmax agrees at %d", p.Index, len(p.MaxAbsAt), p.ArgmaxAgree)
				}
				t.Logf("prompt %d (%d tokens): max|Δ| %.3g (atol %g), greedy match %v, bf16 max|Δ| %.3g", p.Index, p.Tokens, p.MaxAbs, rep.Atol, p.GreedyMatch, p.MaxAbsBF16)
			}
		})
	}
}

// A reference with one perturbed logit beyond atol must fail.
func TestPerturbedReferenceFails(t *testing.T) {
	ref := filepath.Join(t.TempDir(), "ref")
	os.MkdirAll(ref, 0o755)
	src := fixtures + "qwen3moe-dev-a/"
	js, _ := os.ReadFile(src + "reference.json")
	os.WriteFile(filepath.Join(ref, "reference.json"), js, 0o644)
	st, _ := os.ReadFile(src + "reference.safetensors")
	h, err := safetensors.ReadHeader(bytes.NewReader(st), int64(len(st)), "reference.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	tt, _ := h.Lookup("prompt1.logits.fp32")
	st[tt.Begin+4*10+3] ^= 0x40 // one fp32 logit: flip an exponent bit
	os.WriteFile(filepath.Join(ref, "reference.safetensors"), st, 0o644)
	rep, err := Run(context.Background(), src+"checkpoint", ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass {
		t.Error("a perturbed reference passed")
	}
}
