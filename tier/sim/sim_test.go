package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

const root = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// measured builds a measured trace from explicit routing: sets[t][l].
func measured(t *testing.T, experts, k int, sets [][][]int) *trace.Trace {
	t.Helper()
	tr, err := trace.New(trace.Header{Format: trace.Format, Version: trace.Version, ModelRoot: root,
		Layers: len(sets[0]), Experts: experts, TopK: k, Source: trace.Measured})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range sets {
		if err := tr.Append(tok); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func synth(t *testing.T, spec string, layers, experts, k, tokens int) *trace.Trace {
	t.Helper()
	g, err := trace.ParseSynthetic(spec)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Synthesize(g, layers, experts, k, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// hw is hardware with round numbers: 1 GB experts read at 2 GB/s with 100 µs
// latency one at a time, hashed at 1 GB/s on 2 cores, copied at 4 GB/s,
// 10 ms per expert on the device, 50 ms on the CPU, 1 ms dense per layer,
// 5 ms per token.
var hw = Hardware{StorageGBps: 2, StorageLatencyUS: 100, QueueDepth: 1, H2DGBps: 4, HashGBpsPerCore: 1, HashCores: 2,
	GPUExpertUS: 10000, CPUExpertUS: 50000, DenseMSPerLayer: 1, TokenMS: 5}

const gb = 1_000_000_000

func TestLayerTime(t *testing.T) {
	for _, tc := range []struct {
		name            string
		w               Work
		device          bool
		prefetch, slack float64
		want            Stages
		wantSlack       float64
	}{
		{"device hits only", Work{Device: 8}, true, 0, 0,
			Stages{Dense: 0.001, Compute: 0.08, Total: 0.081}, 0.081},
		// read 2 × 0.5 s + 2 × 100 µs; hash 2 × 0.5 s; copy 2 × 0.25 s; fill
		// = one expert through the other stages: 0.5 + 0.25 + 0.01 (read
		// 0.5001 is the largest).
		{"two storage reads", Work{Storage: 2}, true, 0, 0,
			Stages{Dense: 0.001, Read: 1.0002, Hash: 1, Copy: 0.5, Compute: 0.02, Fill: 0.76, Total: 0.001 + 1.0002 + 0.76}, 0.76 + 0.001},
		{"prefetch hides half", Work{Storage: 2}, true, 0.5, 10,
			Stages{Dense: 0.001, Read: 1.0002, Hash: 1, Copy: 0.5, Compute: 0.02, Fill: 0.76, Hidden: 0.5001, Total: 0.001 + 0.5001 + 0.76}, 0.761},
		{"prefetch limited by slack", Work{Storage: 2}, true, 1, 0.2,
			Stages{Dense: 0.001, Read: 1.0002, Hash: 1, Copy: 0.5, Compute: 0.02, Fill: 0.76, Hidden: 0.2, Total: 0.001 + 0.8002 + 0.76}, 0.761},
		// RAM hits on a device: copy 3 × 0.25 s bounds; fill = compute of one.
		{"RAM hits copied", Work{RAM: 3, Device: 1}, true, 0, 0,
			Stages{Dense: 0.001, Copy: 0.75, Compute: 0.04, Fill: 0.01, Total: 0.001 + 0.75 + 0.01}, 0.001 + 0.01},
		// No device: compute 3 × 50 ms on the CPU, read 0.5001, hash 0.5, no
		// copy; fill 0.5 + 0.05.
		{"CPU", Work{RAM: 2, Storage: 1}, false, 0, 0,
			Stages{Dense: 0.001, Read: 0.5001, Hash: 0.5, Compute: 0.15, Fill: 0.55, Total: 0.001 + 0.5001 + 0.55}, 0.551},
	} {
		got, slack := hw.LayerTime(tc.w, gb, tc.device, tc.prefetch, tc.slack)
		g, w := []float64{got.Dense, got.Read, got.Hash, got.Copy, got.Compute, got.Fill, got.Hidden, got.Total},
			[]float64{tc.want.Dense, tc.want.Read, tc.want.Hash, tc.want.Copy, tc.want.Compute, tc.want.Fill, tc.want.Hidden, tc.want.Total}
		for i := range g {
			if !near(g[i], w[i]) {
				t.Errorf("%s: stages %+v, want %+v", tc.name, got, tc.want)
				break
			}
		}
		if !near(slack, tc.wantSlack) {
			t.Errorf("%s: slack %v, want %v", tc.name, slack, tc.wantSlack)
		}
	}
	q := hw
	q.QueueDepth = 4
	if s, _ := q.LayerTime(Work{Storage: 5}, gb, true, 0, 0); !near(s.Read, 2.5+2*100e-6) {
		t.Errorf("5 reads at queue depth 4: %v s, want 2.5 s + 2 latencies", s.Read)
	}
}

// Hand-computed runs of a one-layer model, top-1.
func TestRunByHand(t *testing.T) {
	// No device, RAM of 1 slot: expert 0 (storage), 0 (RAM), 1 (storage).
	tr := measured(t, 4, 1, [][][]int{{{0}}, {{0}}, {{1}}})
	cfg := Config{Hardware: hw, ExpertBytes: gb, RAMSlots: 1, Policy: "lru", Partition: "global"}
	r, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// dense + read + hash (in parts, on both hashers) + compute + token
	storageTok := 0.001 + 0.5001 + 0.5 + 0.05 + 0.005
	ramTok := 0.001 + 0.05 + 0.005
	if r.Label != Label || r.Source != trace.Measured || r.Device || r.Tokens != 3 {
		t.Errorf("result header %+v", r)
	}
	if !near(r.SecondsPerToken.Mean, (2*storageTok+ramTok)/3) || !near(r.SecondsPerToken.P50, storageTok) || !near(r.SecondsPerToken.P99, storageTok) {
		t.Errorf("seconds per token %+v, want mean %v p50 %v", r.SecondsPerToken, (2*storageTok+ramTok)/3, storageTok)
	}
	if !near(r.HitRAM, 1.0/3) || !near(r.FromStorage, 2.0/3) || r.HitDevice != 0 || !near(r.StorageBytesPerToken, 2.0/3*gb) || r.CopyBytesPerToken != 0 {
		t.Errorf("hits %v/%v/%v bytes %v/%v", r.HitDevice, r.HitRAM, r.FromStorage, r.StorageBytesPerToken, r.CopyBytesPerToken)
	}
	if r.Bound != "storage read" {
		t.Errorf("bound %q", r.Bound)
	}

	// Device of 1 slot, RAM of 2: 0 (storage), 1 (storage), 0 (RAM, copied).
	tr = measured(t, 4, 1, [][][]int{{{0}}, {{1}}, {{0}}})
	cfg.RAMSlots, cfg.DeviceSlots = 2, 1
	if r, err = Run(tr, cfg); err != nil {
		t.Fatal(err)
	}
	storageTok = 0.001 + 0.5001 + (0.5 + 0.25 + 0.01) + 0.005
	copyTok := 0.001 + 0.25 + 0.01 + 0.005
	if !r.Device || !near(r.HitRAM, 1.0/3) || !near(r.FromStorage, 2.0/3) || !near(r.CopyBytesPerToken, gb) || !near(r.SecondsPerToken.Mean, (2*storageTok+copyTok)/3) {
		t.Errorf("device run: %+v", r)
	}
	// Warm-up: the first token is left out.
	cfg.Warmup = 1
	if r, err = Run(tr, cfg); err != nil {
		t.Fatal(err)
	}
	if r.Tokens != 2 || !near(r.WarmupSeconds, storageTok) || !near(r.SecondsPerToken.Mean, (storageTok+copyTok)/2) || !near(r.HitRAM, 0.5) {
		t.Errorf("warm-up run: %+v", r)
	}
	// The device holds the previous token's expert: a device hit costs compute only.
	tr = measured(t, 4, 1, [][][]int{{{2}}, {{2}}})
	cfg.Warmup = 0
	if r, err = Run(tr, cfg); err != nil {
		t.Fatal(err)
	}
	if !near(r.HitDevice, 0.5) || !near(r.SecondsPerToken.Mean, (storageTok+0.001+0.01+0.005)/2) {
		t.Errorf("device hit: %+v", r)
	}
}

// TestRunHintsByHand: without a device, the hint given before layer 0's
// Stream reads layer 1's expert into the RAM tier after layer 0's own miss
// (a read ahead never delays a needed one: the tier's readers serve the
// Streams' reads first); layer 1 then waits for it less than for a read of
// its own. A hint for an expert that is never used is wasted when it is
// evicted.
func TestRunHintsByHand(t *testing.T) {
	tr := measured(t, 4, 1, [][][]int{{{0}, {1}}})
	cfg := Config{Hardware: hw, ExpertBytes: gb, RAMSlots: 2, Policy: "lru", Partition: "global",
		Hints: []Hint{{Layer: 1, Experts: []int32{1}}, {}}, TrustHints: true}
	r, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 0 at 0.001: its own read by 0.5011, hashed (in parts, on both
	// hashers) by 1.0011, computed by 1.0511; the prefetch read after it by
	// 1.0012, hashed by 1.5012. Layer 1 at 1.0521: resident but still
	// being read, computed by 1.5512: a read ahead used late.
	want := Counters{Hits: 1, Misses: 1, BytesRead: 2 * gb, PrefetchIssued: 1, PrefetchUseful: 1, PrefetchLate: 1}
	if *r.Counters != want || !near(r.SecondsPerToken.Mean, 1.5512+0.005) || !near(r.HitRAM, 0.5) || !near(r.StorageBytesPerToken, 2*gb) {
		t.Errorf("%+v: %v s/token, hit %v, %v bytes", *r.Counters, r.SecondsPerToken.Mean, r.HitRAM, r.StorageBytesPerToken)
	}
	// Two tokens: the hint for layer 1's expert 2 is read after layer 0's
	// own and still leased (being read) when layer 1's miss needs room, so
	// that miss evicts expert 0 (the read ahead is unused by that step);
	// the next token's layer 0 misses again and evicts the prefetched copy,
	// never used; its layer 1 hits.
	tr = measured(t, 4, 1, [][][]int{{{0}, {1}}, {{0}, {1}}})
	cfg.Hints = []Hint{{Layer: 1, Experts: []int32{2}}, {}, {}, {}}
	if r, err = Run(tr, cfg); err != nil {
		t.Fatal(err)
	}
	want = Counters{Hits: 1, Misses: 3, BytesRead: 4 * gb, Evictions: 2, PrefetchIssued: 1, PrefetchWasted: 1, PrefetchUnused: 1}
	if *r.Counters != want {
		t.Errorf("wasted prefetch: %+v, want %+v", *r.Counters, want)
	}
	// QueueDepth bounds the prefetch reads in flight: one of the two, with
	// room for both.
	cfg.RAMSlots = 3
	cfg.Hints = []Hint{{Layer: 1, Experts: []int32{2, 3}}, {}, {}, {}}
	if r, err = Run(tr, cfg); err != nil {
		t.Fatal(err)
	}
	if r.Counters.PrefetchIssued != 1 {
		t.Errorf("queue depth 1: %d prefetches issued at once", r.Counters.PrefetchIssued)
	}
}

func TestRunErrors(t *testing.T) {
	tr := measured(t, 4, 2, [][][]int{{{0, 1}, {2, 3}}})
	ok := Config{Hardware: hw, ExpertBytes: gb, RAMSlots: 4, DeviceSlots: 2, Policy: "lru", Partition: "global"}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Hardware.StorageGBps = 0 }, "StorageGBps = 0"},
		{func(c *Config) { c.Hardware.HashCores = 0 }, "HashCores = 0"},
		{func(c *Config) { c.Hardware.GPUExpertUS = math.NaN() }, "GPUExpertUS = NaN"},
		{func(c *Config) { c.RAMSlots = 1 }, "1 slots for layer 0 (global, 1 experts in all) cannot hold the layer's top-2"},
		{func(c *Config) { c.DeviceSlots = 1 }, "device slots"},
		{func(c *Config) { c.RAMSlots = 9 }, "RAMSlots 9: want 1 to 8"},
		{func(c *Config) { c.Partition = "per-layer" }, "sim: device slots: 1 slots for layer 0 (per-layer, 2 experts in all)"},
		{func(c *Config) { c.Partition = "striped" }, `partition "striped"`},
		{func(c *Config) { c.Policy = "mru" }, `unknown policy "mru"`},
		{func(c *Config) { c.Policy = "static" }, "heat ledger has 0 entries"},
		{func(c *Config) { c.Prefetch = 1.5 }, "Prefetch 1.5"},
		{func(c *Config) { c.Warmup = 1 }, "Warmup 1 tokens: want 0 to 0"},
		{func(c *Config) { c.ExpertBytes = 0 }, "ExpertBytes 0"},
		{func(c *Config) { c.Hints = make([]Hint, 2) }, "Hints are replayed by the CPU hierarchy (DeviceSlots 0), not with 2 device slots"},
		{func(c *Config) { c.DeviceSlots, c.Hints = 0, make([]Hint, 1) }, "1 hints for a trace of 2 steps (1 tokens × 2 layers)"},
		{func(c *Config) { c.DeviceSlots, c.Hints, c.Prefetch = 0, make([]Hint, 2), 0.5 }, "Hints and Prefetch 0.5"},
		{func(c *Config) { c.DeviceSlots, c.Hints = 0, []Hint{{Layer: 2, Experts: []int32{0}}, {}} }, "hint of step 0 (token 0, layer 0) names layer 2 of 2"},
		{func(c *Config) { c.DeviceSlots, c.Hints = 0, []Hint{{}, {Layer: 0, Experts: []int32{4}}} }, "hint of step 1 (token 0, layer 1) names expert 4 of 4"},
	} {
		c := ok
		tc.edit(&c)
		if _, err := Run(tr, c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	if _, err := Run(tr, ok); err != nil {
		t.Fatalf("the base config: %v", err)
	}
}

func TestNextUses(t *testing.T) {
	tr := measured(t, 3, 1, [][][]int{{{0}, {0}}, {{1}, {0}}, {{0}, {2}}})
	// steps: (0,0)=0 (0,1)=1 (1,0)=2 (1,1)=3 (2,0)=4 (2,1)=5
	want := []int64{4, 3, policy.NoNext, policy.NoNext, policy.NoNext, policy.NoNext}
	if got := NextUses(tr); !slices.Equal(got, want) {
		t.Errorf("next uses %v, want %v", got, want)
	}
}

// Uniform independent routing: with per-layer partitions every online policy
// hits about as often as the fraction of experts it holds, Belady far more.
// With a global capacity LRU hits less: it keeps fewest experts of the layer
// about to run; leaststale does not.
func TestCompare(t *testing.T) {
	tr := synth(t, "zipf:s=0,reuse=0", 4, 64, 4, 1500)
	vs := []Variant{{Label: "lru", Policy: "lru"}, {Label: "leaststale", Policy: "leaststale"}, {Label: "heat", Policy: "heat"}}
	rows, err := Compare(tr, []float64{0.25, 0.5}, []policy.Partition{policy.Global, policy.PerLayer}, vs, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows", len(rows))
	}
	hit := map[string]float64{}
	for _, r := range rows {
		hit[fmt.Sprintf("%s %s %.2f", r.Label, r.Partition, r.Fraction)] = r.HitRate
		if (r.Partition == "per-layer" || r.Label == "leaststale") && math.Abs(r.HitRate-r.Fraction) > 0.015 {
			t.Errorf("%s %s %.2f: hit rate %.3f on uniform routing, want ≈ %.2f", r.Label, r.Partition, r.Fraction, r.HitRate, r.Fraction)
		}
		if r.Belady < r.HitRate+0.2 || r.BeladyGlobal < r.Belady-1e-12 || !near(r.OfBelady, r.HitRate/r.Belady) {
			t.Errorf("%s %s %.2f: belady %.3f global %.3f hit %.3f", r.Label, r.Partition, r.Fraction, r.Belady, r.BeladyGlobal, r.HitRate)
		}
	}
	if l, s := hit["lru global 0.25"], hit["leaststale global 0.25"]; l > s-0.01 {
		t.Errorf("global 25%%: lru %.3f, leaststale %.3f: the cyclic bias of global LRU is gone?", l, s)
	}
	// Skewed routing with reuse: still bounded, and policies differ.
	tr = synth(t, "zipf:s=1,reuse=0.5", 4, 64, 4, 800)
	all := []Variant{}
	r, err := RoutingOf(tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range policy.Names() {
		if !policy.NeedsHeat(n) {
			all = append(all, Variant{Label: n, Policy: n, Options: policy.Options{Routing: r}})
		}
	}
	all = append(all, Variant{Label: "static+ledger", Policy: "static", Options: policy.Options{Heat: tr.Counts()}})
	if rows, err = Compare(tr, []float64{0.1, 0.3}, []policy.Partition{policy.Global, policy.PerLayer}, all, 50); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.HitRate > r.Belady+1e-12 {
			t.Errorf("%s %s %.2f: %.4f above belady %.4f", r.Label, r.Partition, r.Fraction, r.HitRate, r.Belady)
		}
		if r.Label == "belady" && r.OfBelady != 1 {
			t.Errorf("belady row ratio %v", r.OfBelady)
		}
	}
	if _, err := Compare(tr, []float64{0}, []policy.Partition{policy.Global}, vs, 0); err == nil {
		t.Error("capacity 0 accepted")
	}
}

// The oracle, an online policy that knows the generator, through Compare:
// on uniform independent routing it hits as often as the fraction it holds
// (as every online policy); without reuse it is static with the true
// popularity (A0, the optimal online policy there) up to ties between
// layers; with reuse it is bounded by Belady and not behind heat, which has
// to learn what the oracle is told (measured: 0.003 to 0.017 ahead here).
func TestOracle(t *testing.T) {
	rows := func(tr *trace.Trace, fracs []float64, vs ...Variant) map[string]CompareRow {
		t.Helper()
		r, err := RoutingOf(tr)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, Variant{Label: "oracle", Policy: "oracle", Options: policy.Options{Routing: r}})
		rs, err := Compare(tr, fracs, []policy.Partition{policy.Global, policy.PerLayer}, vs, 100)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]CompareRow{}
		for _, r := range rs {
			m[fmt.Sprintf("%s %s %.2f", r.Label, r.Partition, r.Fraction)] = r
		}
		return m
	}
	for k, r := range rows(synth(t, "zipf:s=0,reuse=0", 4, 64, 4, 1500), []float64{0.25, 0.5}) {
		if math.Abs(r.HitRate-r.Fraction) > 0.015 {
			t.Errorf("uniform, %s: hit rate %.3f, want ≈ %.2f", k, r.HitRate, r.Fraction)
		}
	}
	tr := synth(t, "zipf:s=1,reuse=0", 8, 64, 4, 1500)
	pop, err := trace.PopularityOf(*tr.Header.Generator, 8, 64, 4, tr.Tokens())
	if err != nil {
		t.Fatal(err)
	}
	truth := make([]float64, 8*64)
	for x, rk := range pop.Ranks[0] {
		truth[x] = pop.Weights[rk]
	}
	m := rows(tr, []float64{0.1, 0.3}, Variant{Label: "a0", Policy: "static", Options: policy.Options{Heat: truth}})
	for _, k := range []string{"per-layer 0.10", "per-layer 0.30", "global 0.10", "global 0.30"} {
		o, a := m["oracle "+k], m["a0 "+k]
		if tol := map[bool]float64{true: 0, false: 0.01}[strings.HasPrefix(k, "per-layer")]; math.Abs(o.HitRate-a.HitRate) > tol {
			t.Errorf("no reuse, %s: oracle %.4f, static with the true popularity %.4f", k, o.HitRate, a.HitRate)
		}
	}
	m = rows(synth(t, "zipf:s=1,reuse=0.5", 8, 64, 4, 1500), []float64{0.1, 0.2, 0.3}, Variant{Label: "heat", Policy: "heat"})
	for _, k := range []string{"global 0.10", "global 0.20", "global 0.30", "per-layer 0.10", "per-layer 0.20", "per-layer 0.30"} {
		o, h := m["oracle "+k], m["heat "+k]
		if o.HitRate > o.Belady+1e-12 || o.HitRate < h.HitRate-0.002 {
			t.Errorf("reuse, %s: oracle %.4f, heat %.4f, belady %.4f", k, o.HitRate, h.HitRate, o.Belady)
		}
	}
	if _, err := RoutingOf(measured(t, 4, 1, [][][]int{{{0}}})); err == nil || !strings.Contains(err.Error(), "the oracle policies (oracle, oracle-learn) need the generator of a synthetic trace; this trace's source is measured") {
		t.Errorf("measured trace: %v", err)
	}
	if _, err := RoutingOf(synth(t, "zipf:s=1,reuse=0.5", 32, 65536, 1024, 2)); err == nil || !strings.Contains(err.Error(), "the oracle on 2 tokens × 32 layers × 65536 experts × top-1024: over the limit of 2147483648") {
		t.Errorf("a trace over MaxOracleWork: %v", err)
	}
}

// The online bound is above every online policy on the same trace (up to
// noise) and below Belady where reuse makes the future worth knowing; on
// uniform routing it is the fraction held (one token's overhang more), and
// without reuse it is what A0 reaches.
func TestOnlineBound(t *testing.T) {
	fracs, parts := []float64{0.1, 0.3}, []policy.Partition{policy.Global, policy.PerLayer}
	check := func(spec string) (map[string]CompareRow, map[string]BoundRow) {
		t.Helper()
		tr := synth(t, spec, 4, 64, 4, 1500)
		r, err := RoutingOf(tr)
		if err != nil {
			t.Fatal(err)
		}
		vs := []Variant{{Label: "oracle", Policy: "oracle", Options: policy.Options{Routing: r}}}
		for _, n := range []string{"lru", "leaststale", "lfu", "lfu-decay", "heat", "lru2"} {
			vs = append(vs, Variant{Label: n, Policy: n})
		}
		rows, err := Compare(tr, fracs, parts, vs, 100)
		if err != nil {
			t.Fatal(err)
		}
		bounds, err := OnlineBound(tr, r, fracs, parts, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(bounds) != 4 {
			t.Fatalf("%d bounds", len(bounds))
		}
		b := map[string]BoundRow{}
		for _, x := range bounds {
			b[fmt.Sprintf("%s %.2f", x.Partition, x.Fraction)] = x
		}
		m := map[string]CompareRow{}
		for _, row := range rows {
			k := fmt.Sprintf("%s %.2f", row.Partition, row.Fraction)
			m[row.Label+" "+k] = row
			if x := b[k]; row.HitRate > x.HitRate+0.01 || x.Capacity != row.Capacity {
				t.Errorf("%s, %s %s: hit rate %.4f above the online bound %.4f (capacity %d, %d)", spec, row.Label, k, row.HitRate, x.HitRate, row.Capacity, x.Capacity)
			}
		}
		return m, b
	}
	m, b := check("zipf:s=1,reuse=0.5")
	for k, x := range b {
		if o := m["oracle "+k]; x.HitRate > o.HitRate+0.03 {
			t.Errorf("reuse, %s: bound %.4f far above the oracle %.4f", k, x.HitRate, o.HitRate)
		}
	}
	_, b = check("zipf:s=0,reuse=0")
	for k, x := range b {
		want := float64(x.Capacity) / 256 * 1401 / 1400 // global: the capacity, one token more
		if x.Partition == "per-layer" {
			want = float64(x.Capacity) / 256 // per layer: exactly
		}
		if math.Abs(x.HitRate-want) > 1e-4 {
			t.Errorf("uniform, %s: bound %.5f, want %.5f", k, x.HitRate, want)
		}
	}
	m, b = check("zipf:s=1,reuse=0")
	for _, k := range []string{"per-layer 0.10", "per-layer 0.30"} {
		if x, o := b[k], m["oracle "+k]; math.Abs(x.HitRate-o.HitRate) > 0.02 {
			t.Errorf("no reuse, %s: bound %.4f, oracle (A0) %.4f", k, x.HitRate, o.HitRate)
		}
	}
	tr := synth(t, "zipf:s=1,reuse=0.5", 4, 64, 4, 50)
	r, err := RoutingOf(tr)
	if err != nil {
		t.Fatal(err)
	}
	// A capacity too small to split per layer is fine for a global one.
	if b, err := OnlineBound(tr, r, []float64{0.05}, []policy.Partition{policy.Global}, 0); err != nil || len(b) != 1 || b[0].Capacity != 13 {
		t.Errorf("global 5%%: %+v, %v", b, err)
	}
	wrong := *r
	wrong.TopK = 3
	for _, tc := range []struct {
		r     *policy.Routing
		fracs []float64
		parts []policy.Partition
		skip  int
		want  string
	}{
		{r, fracs, parts, 50, "skip 50 tokens of a trace of 50"},
		{r, fracs, parts, -1, "skip -1"},
		{&wrong, fracs, parts, 0, "routing of top-3 for a trace of top-4"},
		{r, []float64{0}, parts, 0, "capacity fraction 0"},
		{r, []float64{0.05}, []policy.Partition{policy.PerLayer}, 0, "13 experts (per-layer) cannot hold a layer's top-4 experts at once"},
		{r, fracs, []policy.Partition{7}, 0, "unknown partition"},
	} {
		if _, err := OnlineBound(tr, tc.r, tc.fracs, tc.parts, tc.skip); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
}

// A heat ledger from another run of the same model warms the tier: the first
// tokens after a start hit far more often than from cold.
func TestWarmStart(t *testing.T) {
	prev := synth(t, "zipf:s=1.1,reuse=0.5,stream=2", 8, 64, 4, 400)
	tr := synth(t, "zipf:s=1.1,reuse=0.5", 8, 64, 4, 5)
	d := policy.Dims{Layers: 8, Experts: 64}
	order, err := policy.WarmOrder(d, prev.Counts(), policy.Global, 128)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := Hits(tr, nil, HitConfig{Policy: "lru", Partition: policy.Global, Capacity: 128})
	if err != nil {
		t.Fatal(err)
	}
	warm, err := Hits(tr, nil, HitConfig{Policy: "lru", Partition: policy.Global, Capacity: 128, Warm: order})
	if err != nil {
		t.Fatal(err)
	}
	if warm.HitRate < cold.HitRate+0.2 {
		t.Errorf("first 5 tokens: warm %.3f, cold %.3f", warm.HitRate, cold.HitRate)
	}
	r, err := Run(tr, Config{Hardware: hw, ExpertBytes: gb, RAMSlots: 128, Policy: "lru", Partition: "global", Warm: prev.Counts()})
	if err != nil {
		t.Fatal(err)
	}
	if !near(r.HitRAM, warm.HitRate) {
		t.Errorf("Run with a warm start hit %.4f, Hits %.4f", r.HitRAM, warm.HitRate)
	}
	// The fill: 128 experts of 1 GB read at 2 GB/s (+ 128 latencies), hashed at 2 GB/s.
	if r.WarmFillBytes != 128*gb || !near(r.WarmFillSeconds, 64+128*100e-6) {
		t.Errorf("warm fill %d bytes, %v s", r.WarmFillBytes, r.WarmFillSeconds)
	}
}

func TestCalibrate(t *testing.T) {
	truth := Hardware{StorageGBps: 6.5, StorageLatencyUS: 80, QueueDepth: 4, H2DGBps: 22, HashGBpsPerCore: 2.2, HashCores: 6,
		GPUExpertUS: 41, CPUExpertUS: 350, DenseMSPerLayer: 0.42, TokenMS: 2.5}
	read := func(req int64, bytes int64) Sample {
		return Sample{Phase: PhaseRead, Count: req, Bytes: bytes,
			Seconds: truth.StorageLatencyUS*1e-6*math.Ceil(float64(req)/4) + float64(bytes)/(truth.StorageGBps*1e9)}
	}
	samples := []Sample{
		read(400, 400*18874368), read(4000, 4000*1<<20), read(40, 40*64<<20),
		{Phase: PhaseHash, Bytes: 10 * gb, Cores: 3, Seconds: 10 / (2.2 * 3)},
		{Phase: PhaseCopy, Bytes: 44 * gb, Seconds: 2},
		{Phase: PhaseGPUExpert, Count: 1000, Seconds: 0.041},
		{Phase: PhaseCPUExpert, Count: 100, Seconds: 0.035},
		{Phase: PhaseDense, Count: 4800, Seconds: 4800 * 0.42e-3},
		{Phase: PhaseToken, Count: 100, Seconds: 0.25},
	}
	start := Hardware{StorageGBps: 1, StorageLatencyUS: 500, QueueDepth: 4, H2DGBps: 1, HashGBpsPerCore: 1, HashCores: 6,
		GPUExpertUS: 1, CPUExpertUS: 1, DenseMSPerLayer: 1, TokenMS: 1}
	got, fits, err := Calibrate(start, samples)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"StorageGBps", got.StorageGBps, truth.StorageGBps}, {"StorageLatencyUS", got.StorageLatencyUS, truth.StorageLatencyUS},
		{"H2DGBps", got.H2DGBps, truth.H2DGBps}, {"HashGBpsPerCore", got.HashGBpsPerCore, truth.HashGBpsPerCore},
		{"GPUExpertUS", got.GPUExpertUS, truth.GPUExpertUS}, {"CPUExpertUS", got.CPUExpertUS, truth.CPUExpertUS},
		{"DenseMSPerLayer", got.DenseMSPerLayer, truth.DenseMSPerLayer}, {"TokenMS", got.TokenMS, truth.TokenMS}} {
		if math.Abs(c.got-c.want) > 1e-6*c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(fits) != 8 {
		t.Errorf("%d fits: %+v", len(fits), fits)
	}
	for _, f := range fits {
		if f.MaxError > 1e-6 {
			t.Errorf("%s %s: max error %v on exact samples", f.Phase, f.Param, f.MaxError)
		}
	}
	// Two samples of different request sizes separate the two.
	two, _, err := Calibrate(start, []Sample{read(400, 400*18874368), read(4000, 4000*1<<20)})
	if err != nil || math.Abs(two.StorageLatencyUS-truth.StorageLatencyUS) > 1e-6*truth.StorageLatencyUS || math.Abs(two.StorageGBps-truth.StorageGBps) > 1e-6*truth.StorageGBps {
		t.Errorf("two samples: %+v %v", two, err)
	}
	// More requests finishing sooner fit a negative latency: not physical,
	// so the latency given is kept and the bandwidth fitted alone.
	neg, _, err := Calibrate(truth, []Sample{{Phase: PhaseRead, Count: 4, Bytes: gb, Seconds: 0.1}, {Phase: PhaseRead, Count: 400, Bytes: gb, Seconds: 0.09}})
	if err != nil || neg.StorageLatencyUS != truth.StorageLatencyUS || !(neg.StorageGBps > 0) {
		t.Errorf("negative latency fit: %+v %v", neg, err)
	}
	// One read sample cannot separate latency from bandwidth: the latency
	// given is kept.
	one, _, err := Calibrate(truth, []Sample{read(400, 400*18874368)})
	if err != nil || !near(one.StorageLatencyUS, truth.StorageLatencyUS) || math.Abs(one.StorageGBps-truth.StorageGBps) > 1e-6 {
		t.Errorf("one sample: %+v %v", one, err)
	}
	for _, tc := range []struct {
		s    Sample
		want string
	}{
		{Sample{Phase: PhaseRead, Bytes: 1, Seconds: 1}, "sample 0 (storage-read): needs bytes and count"},
		{Sample{Phase: PhaseHash, Bytes: 1, Seconds: 1}, "needs bytes and cores"},
		{Sample{Phase: PhaseDense, Seconds: 1}, "needs count > 0"},
		{Sample{Phase: "gpu", Count: 1, Seconds: 1}, `unknown phase "gpu"`},
		{Sample{Phase: PhaseCopy, Bytes: 1, Seconds: -1}, "seconds -1"},
		{Sample{Phase: PhaseRead, Bytes: 1, Count: 8, Seconds: 1e-6}, "no positive bandwidth fits"},
	} {
		if _, _, err := Calibrate(truth, []Sample{tc.s}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.s, err, tc.want)
		}
	}
}

// A run "measured" on known hardware is predicted exactly by the simulator
// calibrated from that hardware's per-phase figures, and missed by one
// calibrated from figures twice as fast.
func TestValidate(t *testing.T) {
	g, _ := trace.ParseSynthetic("zipf:s=1,reuse=0.4")
	st, err := trace.Synthesize(g, 6, 32, 4, 120)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.New(trace.Header{Format: trace.Format, Version: trace.Version, ModelRoot: root, Layers: 6, Experts: 32, TopK: 4, Source: trace.Measured})
	if err != nil {
		t.Fatal(err)
	}
	for tok := range st.Tokens() {
		var sets [][]int
		for l := range 6 {
			var s []int
			for _, e := range st.Step(tok, l) {
				s = append(s, int(e))
			}
			sets = append(sets, s)
		}
		if err := tr.Append(sets); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Hardware: hw, ExpertBytes: 100 << 20, RAMSlots: 64, DeviceSlots: 24, Policy: "heat", Partition: "global"}
	run, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	measuredSPT := run.SecondsPerToken.Mean
	phases := []Sample{
		{Phase: PhaseRead, Count: 100, Bytes: 100 * 100 << 20, Seconds: 100*100e-6 + 100*float64(100<<20)/2e9},
		{Phase: PhaseHash, Bytes: gb, Cores: 1, Seconds: 1},
		{Phase: PhaseCopy, Bytes: 4 * gb, Seconds: 1},
		{Phase: PhaseGPUExpert, Count: 100, Seconds: 1},
		{Phase: PhaseCPUExpert, Count: 20, Seconds: 1},
		{Phase: PhaseDense, Count: 1000, Seconds: 1},
		{Phase: PhaseToken, Count: 200, Seconds: 1},
	}
	fitted, _, err := Calibrate(Hardware{StorageGBps: 1, StorageLatencyUS: 100, QueueDepth: 1, H2DGBps: 1, HashGBpsPerCore: 9, HashCores: 2,
		GPUExpertUS: 1, CPUExpertUS: 1, DenseMSPerLayer: 9, TokenMS: 9}, phases)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg
	c.Hardware = fitted
	v, err := Validate(tr, c, measuredSPT)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Within || math.Abs(v.Error) > 1e-6 {
		t.Errorf("calibrated: %+v", v)
	}
	for i := range phases {
		phases[i].Seconds /= 2
	}
	fast, _, err := Calibrate(fitted, phases)
	if err != nil {
		t.Fatal(err)
	}
	c.Hardware = fast
	if v, err = Validate(tr, c, measuredSPT); err != nil || v.Within || math.Abs(v.Error+0.5) > 0.01 {
		t.Errorf("figures twice as fast: %+v %v, want error ≈ −50%%", v, err)
	}
	if _, err := Validate(st, cfg, 1); err == nil || !strings.Contains(err.Error(), "measured run's own trace") {
		t.Errorf("validation against a synthetic trace: %v", err)
	}
}

func TestSlots(t *testing.T) {
	if n := Slots(16, 11.5, 18874368); n != 256 {
		t.Errorf("16 GiB less 11.5: %d slots, want 256", n)
	}
	if n := Slots(1, 2, 18874368); n != 0 {
		t.Errorf("reserved more than there is: %d", n)
	}
}

// TestPipeHashesInParts: an 18 MiB record is hashed in 1 MiB parts by
// every free hasher, as the tier's are: on 16 cores it is verified in 2/18
// of one core's time, and the next one right after it.
func TestPipeHashesInParts(t *testing.T) {
	h := Hardware{StorageGBps: 1, QueueDepth: 1, HashGBpsPerCore: 1, HashCores: 16}
	p := newPipe(&h, 18<<20)
	one := float64(18<<20) / 1e9
	if got, want := p.hash(0), one*2/18; math.Abs(got-want) > 1e-12 {
		t.Errorf("first record verified at %g s, want %g", got, want)
	}
	if got, want := p.hash(0), one*3/18; math.Abs(got-want) > 1e-12 {
		t.Errorf("second record verified at %g s, want %g", got, want)
	}
}

// TestLayerTimeBalance: with the host twice as slow as a copy, the
// balance placement gives the host a third of a layer's RAM-tier hits
// (continuously), both sides finish together, and the layer is shorter by
// the copies it took; without a device it changes nothing.
func TestLayerTimeBalance(t *testing.T) {
	h := Hardware{StorageGBps: 1, QueueDepth: 1, H2DGBps: 1, HashGBpsPerCore: 1, HashCores: 1, GPUExpertUS: 10, CPUExpertUS: 2000}
	const B = 1e6 // bytes: a copy of 1 ms at 1 GB/s
	off, _ := h.LayerTime(Work{RAM: 9}, B, true, 0, 0)
	on, _ := h.LayerTime(Work{RAM: 9, Balance: true}, B, true, 0, 0)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if !near(off.Copy, 9e-3) || off.Host != 0 || !near(on.Copy, 6e-3) || !near(on.Host, 6e-3) || !near(off.Total-on.Total, 3e-3) {
		t.Errorf("without balance %+v; with it %+v: want 9 ms of copies, then 6 ms of copies beside 6 ms on the host, 3 ms less", off, on)
	}
	for _, us := range []float64{2000, 0} {
		h.CPUExpertUS = us
		cpuOff, _ := h.LayerTime(Work{RAM: 9}, B, false, 0, 0)
		cpuOn, _ := h.LayerTime(Work{RAM: 9, Balance: true}, B, false, 0, 0)
		if cpuOff != cpuOn {
			t.Errorf("no device, %g µs an expert: %+v with balance, %+v without", us, cpuOn, cpuOff)
		}
	}
}

// TestRunBalance: Config.Balance reaches each layer's time model: the
// same trace with the host as fast as a copy runs shorter, with host time
// beside fewer copies.
func TestRunBalance(t *testing.T) {
	g, _ := trace.ParseSynthetic("zipf:s=1,reuse=0.4")
	tr, err := trace.Synthesize(g, 6, 32, 4, 40)
	if err != nil {
		t.Fatal(err)
	}
	hw := Hardware{StorageGBps: 2, StorageLatencyUS: 100, QueueDepth: 4, H2DGBps: 1, HashGBpsPerCore: 2, HashCores: 4,
		GPUExpertUS: 10, CPUExpertUS: 100, DenseMSPerLayer: 0.1, TokenMS: 1}
	cfg := Config{Hardware: hw, ExpertBytes: 100 << 10, RAMSlots: 6 * 32, DeviceSlots: 24, Policy: "lru", Partition: "global", Warmup: 10}
	off, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Balance = true
	on, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without balance %.4f s/token %+v; with it %.4f %+v", off.SecondsPerToken.Mean, off.StagesPerToken, on.SecondsPerToken.Mean, on.StagesPerToken)
	if off.StagesPerToken.Host != 0 || on.StagesPerToken.Host == 0 || !(on.StagesPerToken.Copy < off.StagesPerToken.Copy) ||
		!(on.SecondsPerToken.Mean < off.SecondsPerToken.Mean) {
		t.Error("balance: want host time, fewer copies and a shorter token")
	}
}
