package tier

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/validation/synth"
	"github.com/tarfa-ai/tarfa/weights"
)

// nopConsumer counts the bytes delivered and the time from each step's
// start to its first expert.
type nopConsumer struct {
	n      int64
	start  time.Time
	first  time.Duration
	firsts int
}

func (c *nopConsumer) Consume(e int, p expertstream.Placed, _ ledger.Tier) error {
	if !c.start.IsZero() {
		c.first += time.Since(c.start)
		c.firsts++
		c.start = time.Time{}
	}
	c.n += p.Host.Bytes()
	return nil
}

// BenchmarkStreamPageCache: every step of top-8 experts of 6 MiB (hidden
// and expert width 1024) read from the page cache (--direct off, no RAM
// tier) and verified, consumed by nothing: the host side of the
// copy-and-hash path, GB/s of experts delivered.
func BenchmarkStreamPageCache(b *testing.B) {
	dir := b.TempDir()
	o := synth.Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 3, Set: map[string]any{"num_experts": 16, "num_experts_per_tok": 8,
		"hidden_size": 1024, "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 64}}
	if err := synth.Write(filepath.Join(dir, "hf"), o); err != nil {
		b.Fatal(err)
	}
	if _, err := convert.Convert(context.Background(), filepath.Join(dir, "hf"), filepath.Join(dir, "jnf"), convert.Options{LastLayer: -1}); err != nil {
		b.Fatal(err)
	}
	ck := openCk(b, filepath.Join(dir, "jnf"))
	for _, readers := range []int{2, DefaultReaders} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) { streamPageCache(b, ck, readers) })
	}
}

func streamPageCache(b *testing.B, ck *weights.Checkpoint, readers int) {
	h, err := New(ck, Options{StagingBudget: Auto, Direct: DirectOff, Readers: readers})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	cfg := ck.Config()
	var c nopConsumer
	steps := 0
	t0 := time.Now()
	for b.Loop() {
		for l := range cfg.Layers {
			if !cfg.Sparse[l] {
				continue
			}
			experts := make([]int, 0, 8)
			for i := range 8 {
				experts = append(experts, (steps*5+i)%cfg.Experts)
			}
			c.start = time.Now()
			if err := h.Stream(context.Background(), l, experts, &c); err != nil {
				b.Fatal(err)
			}
			steps++
		}
	}
	b.ReportMetric(float64(c.n)/time.Since(t0).Seconds()/1e9, "GB/s")
	b.ReportMetric(c.first.Seconds()*1e3/float64(max(c.firsts, 1)), "ms-to-first")
}

// BenchmarkStreamDeviceResident: the host side of a batched step's MoE
// layer when the device level holds every expert (the H200's 16-client
// serve: about 100 of 256 experts a layer at 16 rows, all in slots). Each
// op is one Stream of `experts` distinct experts, consumed by nothing: the
// hierarchy's bookkeeping (leases, the device level's policy, counters),
// per expert.
func BenchmarkStreamDeviceResident(b *testing.B) {
	o := synth.Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 3, Set: map[string]any{"num_experts": 256, "num_experts_per_tok": 8}}
	dir, err := synth.Converted(context.Background(), b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	ck := openCk(b, dir)
	cfg := ck.Config()
	be := cpu.New(1)
	be.SetSlots(cfg.Layers * cfg.Experts)
	h, err := New(ck, Options{RAMBudget: Auto, StagingBudget: Auto, Slots: be})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	sc := newSlotConsumer(b, be, cfg)
	c := &sc
	all := everyExpert(cfg.Experts)
	layer := -1
	for l := range cfg.Layers {
		if cfg.Sparse[l] {
			layer = l
			break
		}
	}
	for range 2 { // every expert of the layer into a slot
		if err := h.Stream(context.Background(), layer, all, c); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{8, 100} {
		b.Run(fmt.Sprintf("experts=%d", n), func(b *testing.B) {
			d0 := h.Stats().Device.Hits
			step := 0
			for b.Loop() {
				xs := make([]int, 0, n)
				for i := range n {
					xs = append(xs, (step*37+i*5)%cfg.Experts)
				}
				if err := h.Stream(context.Background(), layer, xs, c); err != nil {
					b.Fatal(err)
				}
				step++
			}
			if hits := h.Stats().Device.Hits - d0; hits != int64(step*n) {
				b.Fatalf("%d device hits of %d uses: not every expert was in a slot", hits, step*n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(step*n)/1e3, "µs/expert")
		})
	}
}
