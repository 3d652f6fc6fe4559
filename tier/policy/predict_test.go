package policy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tarfa-ai/tarfa/tier/trace"
)

// synthSteps is a synthetic trace as steps.
func synthSteps(t *testing.T, spec string, layers, experts, k, tokens int) steps {
	t.Helper()
	tr := synthTrace(t, spec, layers, experts, k, tokens)
	return stepsOf(tr, layers)
}

// stepsOf is the routing of tr's first layers, token by token.
func stepsOf(tr *trace.Trace, layers int) steps {
	s := make(steps, tr.Tokens())
	for tok := range s {
		for l := range layers {
			var set []int
			for _, e := range tr.Step(tok, l) {
				set = append(set, int(e))
			}
			s[tok] = append(s[tok], set)
		}
	}
	return s
}

// predict's reuse estimate is the generator's reuse beyond chance, per
// layer, whatever the partitioning.
func TestPredictEstimatesReuse(t *testing.T) {
	const L, E, k, T = 2, 64, 4, 1500
	for _, tc := range []struct {
		spec string
		want float64
	}{{"zipf:s=0.5,reuse=0.6", 0.6}, {"zipf:s=1,reuse=0.2", 0.2}, {"zipf:s=1,reuse=0", 0}} {
		s := synthSteps(t, tc.spec, L, E, k, T)
		d := Dims{Layers: L, Experts: E}
		for _, part := range []Partition{Global, PerLayer} {
			c := newCache(t, d, 32, part, "predict", Options{})
			replay(t, c, s)
			for l := range L {
				var rho float64
				if part == Global {
					rho = c.pols[0].(*predict).rho[l]
				} else {
					rho = c.pols[l].(*predict).rho[0]
				}
				if rho < tc.want-0.08 || rho > tc.want+0.08 {
					t.Errorf("%s, %v, layer %d: reuse estimate %.3f, want %.2f ± 0.08", tc.spec, part, l, rho, tc.want)
				}
			}
		}
	}
}

func hitsOf(t *testing.T, s steps, d Dims, capacity int, part Partition, name string, o Options) int {
	t.Helper()
	return replay(t, newCache(t, d, capacity, part, name, o), s)
}

// With reuse predict keeps the layer's previous set, as leaststale does,
// against the frequency order that evicts it with a global capacity
// (lfu-decay).
func TestPredictKeepsThePreviousSet(t *testing.T) {
	d := Dims{Layers: 4, Experts: 32}
	s := synthSteps(t, "zipf:s=0.5,reuse=0.8", 4, 32, 4, 600)
	for _, capacity := range []int{24, 48} {
		p := hitsOf(t, s, d, capacity, Global, "predict", Options{})
		ls := hitsOf(t, s, d, capacity, Global, "leaststale", Options{})
		if p < ls {
			t.Errorf("capacity %d: predict %d hits, leaststale %d", capacity, p, ls)
		}
	}
}

// Without reuse predict converges to the popular experts: as many hits as
// perfect LFU (the best estimate of stationary popularity) within 1%, and
// more than heat, which protects the previous set for nothing.
func TestPredictConvergesToThePopular(t *testing.T) {
	d := Dims{Layers: 4, Experts: 32}
	for _, spec := range []string{"zipf:s=1,reuse=0", "zipf:s=0.5,reuse=0"} {
		s := synthSteps(t, spec, 4, 32, 4, 600)
		for _, capacity := range []int{24, 48} {
			p := hitsOf(t, s, d, capacity, Global, "predict", Options{})
			lfu := hitsOf(t, s, d, capacity, Global, "lfu", Options{})
			heat := hitsOf(t, s, d, capacity, Global, "heat", Options{})
			if float64(p) < 0.99*float64(lfu) || p <= heat {
				t.Errorf("%s, capacity %d: predict %d hits, lfu %d, heat %d", spec, capacity, p, lfu, heat)
			}
		}
	}
}

// When popularity shifts predict follows it: more hits than perfect LFU,
// which remembers the old order, and than heat.
func TestPredictFollowsShifts(t *testing.T) {
	d := Dims{Layers: 4, Experts: 32}
	s := synthSteps(t, "zipf:s=1,reuse=0,shift=150", 4, 32, 4, 900)
	for _, capacity := range []int{24, 48} {
		p := hitsOf(t, s, d, capacity, Global, "predict", Options{})
		lfu := hitsOf(t, s, d, capacity, Global, "lfu", Options{})
		heat := hitsOf(t, s, d, capacity, Global, "heat", Options{})
		if p <= lfu || p <= heat {
			t.Errorf("capacity %d: predict %d hits, lfu %d, heat %d", capacity, p, lfu, heat)
		}
	}
}

// predict's growing estimate (no aging, restarted when popularity shifts)
// keeps its estimate of stationary popularity as good as perfect LFU's,
// however short the half-life (here 8 tokens), where lfu-decay with that
// half-life is noisy; and after a shift the restart follows the new order
// at least as fast as lfu-decay does.
func TestPredictGrowingEstimate(t *testing.T) {
	d := Dims{Layers: 4, Experts: 32}
	short := Options{HalfLifeTokens: 8}
	s := synthSteps(t, "zipf:s=1,reuse=0", 4, 32, 4, 1200)
	for _, capacity := range []int{24, 48} {
		p := hitsOf(t, s, d, capacity, Global, "predict", short)
		lfu := hitsOf(t, s, d, capacity, Global, "lfu", Options{})
		if float64(p) < 0.98*float64(lfu) {
			t.Errorf("stationary, capacity %d: predict %d hits, lfu %d", capacity, p, lfu)
		}
	}
	s = synthSteps(t, "zipf:s=1,reuse=0,shift=300", 4, 32, 4, 1200)
	for _, capacity := range []int{24, 48} {
		p := hitsOf(t, s, d, capacity, Global, "predict", short)
		ld := hitsOf(t, s, d, capacity, Global, "lfu-decay", short)
		if p < ld {
			t.Errorf("shifts, capacity %d: predict %d hits, lfu-decay %d", capacity, p, ld)
		}
	}
}

// A trace whose every token uses experts its layer did not use the token
// before: predict learns there is no reuse and does not thrash as LRU does
// with a global capacity (no hit below a token's experts); per layer it is
// within 1% of LRU.
func TestPredictAllNew(t *testing.T) {
	d := Dims{Layers: 4, Experts: 32}
	s := allNew(rand.New(rand.NewPCG(1, 2)), 600, 4, 32, 4)
	for _, tc := range []struct {
		capacity int
		part     Partition
		slack    float64
	}{{12, Global, 1}, {24, Global, 1}, {48, Global, 1}, {64, PerLayer, 0.99}} {
		p := hitsOf(t, s, d, tc.capacity, tc.part, "predict", Options{})
		lru := hitsOf(t, s, d, tc.capacity, tc.part, "lru", Options{})
		if float64(p) < tc.slack*float64(lru) || p == 0 {
			t.Errorf("capacity %d %v: predict %d hits, lru %d", tc.capacity, tc.part, p, lru)
		}
	}
}

// allNew draws T tokens of L layers, k experts of E each, uniformly among
// those the layer did not use at the previous token.
func allNew(r *rand.Rand, T, L, E, k int) steps {
	s := make(steps, T)
	for t := range s {
		s[t] = make([][]int, L)
		for l := range s[t] {
			var set []int
			for len(set) < k {
				e := r.IntN(E)
				if !slices.Contains(set, e) && (t == 0 || !slices.Contains(s[t-1][l], e)) {
					set = append(set, e)
				}
			}
			s[t][l] = set
		}
	}
	return s
}

// The reuse estimate is a probability even where the routing is further
// from chance than reuse can say: sets that alternate between two halves
// (reuse below chance: the estimate would go negative) and one set used
// every time (full reuse: it is held under 0.99, so that the last set never
// rules out every other expert).
func TestPredictReuseEstimateBounded(t *testing.T) {
	const E, k, T = 16, 4, 400
	for _, tc := range []struct {
		name   string
		set    func(tok int) []int
		lo, hi float64
	}{
		{"alternating", func(tok int) []int { b := 8 * (tok % 2); return []int{b, b + 1, b + 2, b + 3} }, 0, 0},
		{"always the same", func(int) []int { return []int{0, 1, 2, 3} }, 0.99, 0.99},
	} {
		s := make(steps, T)
		for tok := range s {
			s[tok] = [][]int{tc.set(tok)}
		}
		c := newCache(t, Dims{Layers: 1, Experts: E}, 2*k, Global, "predict", Options{})
		replay(t, c, s)
		if rho := c.pols[0].(*predict).rho[0]; rho < tc.lo || rho > tc.hi {
			t.Errorf("%s: reuse estimate %v, want %v to %v", tc.name, rho, tc.lo, tc.hi)
		}
	}
}
