package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/tier"
)

func benchThreads() []int {
	if n := runtime.GOMAXPROCS(0); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

var benchCkpts = []string{"qwen3moe-dev-a/checkpoint", "qwen35moe-dev-c/checkpoint", "qwen35moe-dev-e-long/checkpoint"}

// BenchmarkPrefill: one Forward over a 64-token prompt per iteration.
func BenchmarkPrefill(b *testing.B) {
	for _, ck := range benchCkpts {
		for _, th := range benchThreads() {
			for _, cache := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/cache=%v/threads=%d", ck, cache, th), func(b *testing.B) {
					load := loadWith
					if cache {
						load = loadResident
					}
					m := load(b, ck, Options{Threads: th})
					benchPrefill(b, m, 64)
				})
			}
		}
	}
}

// BenchmarkDecode: one Forward of a single token per iteration, with a
// context that grows from 16 to 144 tokens and then restarts.
func BenchmarkDecode(b *testing.B) {
	for _, ck := range benchCkpts {
		for _, th := range benchThreads() {
			for _, cache := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/cache=%v/threads=%d", ck, cache, th), func(b *testing.B) {
					load := loadWith
					if cache {
						load = loadResident
					}
					m := load(b, ck, Options{Threads: th})
					benchDecode(b, m)
				})
			}
		}
	}
}

func benchPrefill(b *testing.B, m *Model, n int) {
	toks := benchTokens(m, n)
	s := m.NewSession()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Reset()
		if _, err := s.Forward(toks, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
}

func benchDecode(b *testing.B, m *Model) {
	toks := benchTokens(m, 144)
	s := m.NewSession()
	prefill := func() {
		s.Reset()
		if _, err := s.Forward(toks[:16], false); err != nil {
			b.Fatal(err)
		}
	}
	prefill()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if s.Len() == len(toks) {
			b.StopTimer()
			prefill()
			b.StartTimer()
		}
		if _, err := s.Forward(toks[s.Len():s.Len()+1], false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

func benchTokens(m *Model, n int) []int {
	r := rand.New(rand.NewPCG(1, 2))
	t := make([]int, n)
	for i := range t {
		t[i] = r.IntN(m.Config().Vocab)
	}
	return t
}

// realLayers is a two-layer model (one Gated DeltaNet + one gated
// full-attention layer) with the real per-layer shapes of Qwen3.5-35B-A3B
// but 16 experts and a 4096-token vocabulary: per-token time × 20 ≈ the
// layer stack of the 40-layer model on this CPU (expert choice aside).
const realLayers = `{"model_type":"qwen3_5_moe_text","hidden_size":2048,"num_hidden_layers":2,"num_attention_heads":16,
  "num_key_value_heads":2,"head_dim":256,"vocab_size":4096,"num_experts":16,"num_experts_per_tok":8,
  "moe_intermediate_size":512,"shared_expert_intermediate_size":512,"layer_types":["linear_attention","full_attention"],
  "linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,
  "linear_conv_kernel_dim":4,"rope_parameters":{"rope_type":"default","rope_theta":10000000.0,"partial_rotary_factor":0.25},
  "rms_norm_eps":1e-6,"max_position_embeddings":262144}`

func BenchmarkRealShapes(b *testing.B) {
	_, w := synthModel(b, realLayers, 1, nil)
	ck := w.open(b)
	for _, th := range benchThreads() {
		m, err := Load(ck, Options{Backend: cpu.New(th), Experts: ramTier(b, ck, tier.Auto)})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("qwen35-35B-2layers/decode/threads=%d", th), func(b *testing.B) { benchDecode(b, m) })
		b.Run(fmt.Sprintf("qwen35-35B-2layers/prefill64/threads=%d", th), func(b *testing.B) { benchPrefill(b, m, 64) })
	}
}
