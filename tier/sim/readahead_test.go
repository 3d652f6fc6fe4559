package sim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/tier/trace"
)

// routing is a phase of the read-ahead tests' routing: tokens of it, the
// stable experts every token of a layer uses (the first of its set: the
// router's strongest), and how often the engine's hint for a layer names
// each of the others right (the next layer's router applied to this
// layer's input).
type routing struct {
	tokens, stable int
	right          float64
}

// uniformRouting has nothing to predict: no expert is used by every token,
// and the next layer's router names one of its experts right 3 times in 10.
// localRouting is synth --routing local's: a stable half, the rest named
// right 19 times in 20.
func uniformRouting(tokens int) routing { return routing{tokens, 0, 0.3} }
func localRouting(tokens int) routing   { return routing{tokens, 4, 0.95} }

// engineTrace builds a measured trace of 4 layers, 64 experts, top-8, of
// the phases one after the other, and the hints the engine gives before
// each step, for the next one: for a layer after the first, the router's
// prediction of its experts, then the experts the previous token used
// there; for the first layer (given after the last one), the experts this
// token used there.
func engineTrace(t *testing.T, seed uint64, phases ...routing) (*trace.Trace, []Hint) {
	t.Helper()
	const layers, experts, k = 4, 64, 8
	rng := rand.New(rand.NewPCG(seed, 1))
	other := func(set []int, not []int) int {
		for {
			e := rng.IntN(experts)
			if !slices.Contains(set, e) && !slices.Contains(not, e) {
				return e
			}
		}
	}
	var sets [][][]int
	var right []float64 // by token
	for _, ph := range phases {
		for range ph.tokens {
			tok := make([][]int, layers)
			for l := range tok {
				for j := range ph.stable {
					tok[l] = append(tok[l], (l*7+j)%experts)
				}
				for len(tok[l]) < k {
					tok[l] = append(tok[l], other(tok[l], nil))
				}
			}
			sets = append(sets, tok)
			right = append(right, ph.right)
		}
	}
	tr := measured(t, experts, k, sets)
	hints := make([]Hint, len(sets)*layers)
	for i := range len(hints) - 1 {
		tok, l := (i+1)/layers, (i+1)%layers
		var xs []int
		add := func(e int) {
			if !slices.Contains(xs, e) {
				xs = append(xs, e)
			}
		}
		if l > 0 {
			for _, e := range sets[tok][l] {
				if rng.Float64() < right[tok] {
					add(e)
				} else {
					add(other(xs, sets[tok][l]))
				}
			}
			if tok > 0 {
				for _, e := range sets[tok-1][l] {
					add(e)
				}
			}
		} else {
			for _, e := range sets[tok-1][0] {
				add(e)
			}
		}
		h := Hint{Layer: l}
		for _, e := range xs {
			h.Experts = append(h.Experts, int32(e))
		}
		hints[i] = h
	}
	return tr, hints
}

// vmLike is hardware like the development VM's with the CPU backend: 18.9 MB
// experts read at 0.6 GB/s, 8 in flight, hashed at 2 GB/s on each of 2
// cores, 4 ms an expert, 15 ms of dense work a layer.
var vmLike = Hardware{StorageGBps: 0.6, StorageLatencyUS: 300, QueueDepth: 8, H2DGBps: 1, HashGBpsPerCore: 2, HashCores: 2,
	CPUExpertUS: 4000, DenseMSPerLayer: 15, TokenMS: 30}

// readAheadRun replays tr with hints (nil: prefetch off) on h with a RAM
// tier of a quarter of the experts, counting the tokens from warmup, and
// returns the counters and the mean seconds per token.
func readAheadRun(t *testing.T, tr *trace.Trace, hints []Hint, trust bool, warmup int, h Hardware) (Counters, float64) {
	t.Helper()
	cfg := Config{Hardware: h, ExpertBytes: 18_900_000, RAMSlots: 64, Policy: "lru", Partition: "global",
		Hints: hints, TrustHints: trust, Warmup: warmup}
	r, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return *r.Counters, r.SecondsPerToken.Mean
}

// prefix is the first n tokens of tr and their hints: the simulator is
// causal, so a run of it counts what the whole run did up to token n.
func prefix(t *testing.T, tr *trace.Trace, hints []Hint, n int) (*trace.Trace, []Hint) {
	t.Helper()
	var sets [][][]int
	for tok := range n {
		var s [][]int
		for l := range tr.Header.Layers {
			var xs []int
			for _, e := range tr.Step(tok, l) {
				xs = append(xs, int(e))
			}
			s = append(s, xs)
		}
		sets = append(sets, s)
	}
	h := slices.Clone(hints[:n*tr.Header.Layers])
	h[len(h)-1] = Hint{}
	return measured(t, tr.Header.Experts, tr.Header.TopK, sets), h
}

// hinted are the hinted experts the read-ahead rule decided on (not
// resident, with room in the queue).
func hinted(c Counters) int64 { return c.PrefetchIssued + c.PrefetchSkipped + c.PrefetchBackedOff }

// (a) On uniform routing with a weak predictor the reads ahead fall to
// nearly none after the warm-up, and prefetch costs nothing: without the
// rule (every hint read ahead) they go on, most unused, and cost a third.
func TestReadAheadUniform(t *testing.T) {
	tr, hints := engineTrace(t, 1, uniformRouting(120))
	off, toff := readAheadRun(t, tr, nil, false, 20, vmLike)
	on, ton := readAheadRun(t, tr, hints, false, 20, vmLike)
	all, tall := readAheadRun(t, tr, hints, true, 20, vmLike)
	t.Logf("prefetch off %.4f s/token; on %.4f (%.3f×): %+v; every hint %.4f (%.3f×), %d issued, %d used", toff, ton, ton/toff, on,
		tall, tall/toff, all.PrefetchIssued, all.PrefetchUseful)
	if on.PrefetchIssued*100 > hinted(on) || ton > 1.01*toff {
		t.Errorf("uniform: %d read ahead of %d hinted after the warm-up, %.3f× the time without prefetch", on.PrefetchIssued, hinted(on), ton/toff)
	}
	if off.PrefetchIssued != 0 || all.PrefetchIssued < 10*on.PrefetchIssued+100 || tall < 1.1*toff {
		t.Errorf("the case does not show the cost of reading every hint ahead: %d issued, %.3f×", all.PrefetchIssued, tall/toff)
	}
}

// (b) On local routing the reads ahead go on after the warm-up and are
// used, and make it faster; reading every hint ahead is slower (by more
// than 3%) than the rule, which keeps to the places that are in time.
func TestReadAheadLocal(t *testing.T) {
	tr, hints := engineTrace(t, 1, localRouting(120))
	_, toff := readAheadRun(t, tr, nil, false, 20, vmLike)
	on, ton := readAheadRun(t, tr, hints, false, 20, vmLike)
	_, tall := readAheadRun(t, tr, hints, true, 20, vmLike)
	t.Logf("prefetch off %.4f s/token; on %.4f (%.3f×): %+v; every hint %.4f (%.3f×)", toff, ton, ton/toff, on, tall, tall/toff)
	if on.PrefetchIssued < 2*100 || on.PrefetchUseful*10 < 9*on.PrefetchIssued || ton > 0.95*toff || ton > 0.97*tall {
		t.Errorf("local: %d read ahead in 100 tokens, %d used; %.3f× the time without prefetch, %.3f× reading every hint", on.PrefetchIssued, on.PrefetchUseful,
			ton/toff, tall/toff)
	}
}

// (c) After a switch from uniform to local routing the reads ahead come
// back: none in the uniform phase's last 20 tokens, used ones in the local
// phase's (the simulator is causal: a run of the first 60 tokens counts
// what the whole run did up to then).
func TestReadAheadSwitch(t *testing.T) {
	tr, hints := engineTrace(t, 1, uniformRouting(60), localRouting(60))
	ptr, phints := prefix(t, tr, hints, 60)
	before, _ := readAheadRun(t, ptr, phints, false, 40, vmLike)
	after, _ := readAheadRun(t, tr, hints, false, 100, vmLike)
	t.Logf("tokens 40–60 (uniform): %+v", before)
	t.Logf("tokens 100–120 (local): %+v", after)
	if before.PrefetchIssued*100 > hinted(before) {
		t.Errorf("uniform phase: %d read ahead of %d hinted", before.PrefetchIssued, hinted(before))
	}
	if after.PrefetchIssued < 2*20 || after.PrefetchUseful*10 < 9*after.PrefetchIssued {
		t.Errorf("local phase: %d read ahead in 20 tokens, %d used", after.PrefetchIssued, after.PrefetchUseful)
	}
}

// (d) With a predictor right 3 times in 4 and no locality, on storage that
// is the bottleneck (the VM's, and slower), reads ahead still being read
// when their step comes hide little of it while a wasted one costs a whole
// read: the rule holds most of them back (and probes), and prefetch costs
// at most 1% (on the VM's storage it saves 6%); reading every hint ahead
// costs 11–17%.
func TestReadAheadBusyStorage(t *testing.T) {
	slow := vmLike
	slow.StorageGBps = 0.15
	for _, h := range []Hardware{vmLike, slow} {
		tr, hints := engineTrace(t, 1, routing{120, 0, 0.75})
		_, toff := readAheadRun(t, tr, nil, false, 20, h)
		on, ton := readAheadRun(t, tr, hints, false, 20, h)
		_, tall := readAheadRun(t, tr, hints, true, 20, h)
		t.Logf("%v GB/s: prefetch off %.4f s/token; on %.4f (%.3f×): %+v; every hint %.4f (%.3f×)", h.StorageGBps, toff, ton, ton/toff, on, tall, tall/toff)
		if ton > 1.01*toff || on.PrefetchBackedOff < on.PrefetchIssued || on.PrefetchProbes == 0 || on.PrefetchLate == 0 {
			t.Errorf("%v GB/s: %.3f× the time without prefetch; %d read ahead (%d late, %d probes), %d held back", h.StorageGBps, ton/toff,
				on.PrefetchIssued, on.PrefetchLate, on.PrefetchProbes, on.PrefetchBackedOff)
		}
		if tall < 1.1*toff {
			t.Errorf("%v GB/s: the case does not show the cost of reading every hint ahead: %.3f×", h.StorageGBps, tall/toff)
		}
	}
}
