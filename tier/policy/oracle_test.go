package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/tier/trace"
)

// routingOf is the oracle's model of a synthetic trace.
func routingOf(t *testing.T, tr *trace.Trace) *Routing {
	t.Helper()
	h := tr.Header
	p, err := trace.PopularityOf(*h.Generator, h.Layers, h.Experts, h.TopK, tr.Tokens())
	if err != nil {
		t.Fatal(err)
	}
	return &Routing{TopK: h.TopK, Reuse: h.Generator.Reuse, Weights: p.Weights, Shift: h.Generator.Shift, Ranks: p.Ranks}
}

func synthTrace(t *testing.T, spec string, layers, experts, k, tokens int) *trace.Trace {
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

// The oracle's probabilities are those of the generator: the prediction in
// force when a layer runs sums to top-k and, binned by probability, matches
// how often the generator then picks the experts, before and after shifts.
func TestOracleProbabilities(t *testing.T) {
	const L, E, k, T = 4, 64, 4, 1500
	for _, spec := range []string{"zipf:s=1.1,reuse=0.5", "zipf:s=0.5,reuse=0.8", "zipf:s=2,reuse=0.3,shift=100", "zipf:s=0,reuse=0"} {
		tr := synthTrace(t, spec, L, E, k, T)
		d := Dims{Layers: L, Experts: E}
		p, err := newOracle(d, Options{StepsPerToken: L, Routing: routingOf(t, tr)}, knowRanks)
		if err != nil {
			t.Fatal(err)
		}
		const bins = 20
		var n [bins]int
		var want, got, vr [bins]float64
		worst := 0.0
		for tok := range T {
			for l := range L {
				set := tr.Step(tok, l)
				pred := p.p[l*E : (l+1)*E]
				sum := 0.0
				for x, q := range pred {
					sum += q
					b := min(int(q*bins), bins-1)
					n[b]++
					want[b] += q
					vr[b] += q * (1 - q)
					for _, e := range set {
						if int(e) == x {
							got[b]++
						}
					}
				}
				worst = max(worst, math.Abs(sum-k))
				now := d.Step(tok, l)
				for _, e := range set {
					p.Announce(ExpertID{Layer: l, Expert: int(e)}, now)
				}
				if _, ok := p.Victim(ExpertID{Layer: l, Expert: int(set[0])}, now); ok {
					t.Fatal("a victim with nothing resident")
				}
			}
		}
		if worst > 1e-3 {
			t.Errorf("%s: a layer's probabilities sum to top-k %d ± %.2g", spec, k, worst)
		}
		for b := range bins {
			if n[b] == 0 {
				continue
			}
			if tol := 4*math.Sqrt(vr[b]) + 2; math.Abs(got[b]-want[b]) > tol {
				t.Errorf("%s: P in [%.2f, %.2f): %d predictions expect %.1f uses, the generator made %.0f (±%.1f)", spec, float64(b)/bins, float64(b+1)/bins, n[b], want[b], got[b], tol)
			}
		}
	}
}

// Of experts equally likely to be used next, the oracle evicts the one
// whose next use is furthest away: of the layer that ran last.
func TestOracleTieGoesToTheFurthestUse(t *testing.T) {
	d := Dims{Layers: 2, Experts: 4}
	c := newCache(t, d, 3, Global, "oracle", Options{Routing: testRouting(d, 1, 0, 0)})
	use(t, c, 0, 0, d.Step(0, 0))
	use(t, c, 1, 0, d.Step(0, 1))
	use(t, c, 0, 1, d.Step(1, 0))
	if out := use(t, c, 1, 1, d.Step(1, 1)); !out.Evict || out.Evicted != (ExpertID{Layer: 1, Expert: 0}) {
		t.Errorf("got %+v, want layer 1 expert 0 evicted (its layer runs last)", out)
	}
}

func TestOracleRoutingErrors(t *testing.T) {
	d := Dims{Layers: 2, Experts: 4}
	good := func() *Routing { return testRouting(d, 2, 0.5, 1) }
	for _, tc := range []struct {
		edit func(r *Routing) *Routing
		want string
	}{
		{func(*Routing) *Routing { return nil }, "needs Options.Routing, the generator of a synthetic trace"},
		{func(r *Routing) *Routing { r.TopK = 5; return r }, "top-k 5: want 1 to 4"},
		{func(r *Routing) *Routing { r.Reuse = math.NaN(); return r }, "reuse NaN"},
		{func(r *Routing) *Routing { r.Weights = r.Weights[:3]; return r }, "3 weights, want one per rank (4 experts a layer)"},
		{func(r *Routing) *Routing { r.Weights[2] = 0; return r }, "weight of rank 2 is 0"},
		{func(r *Routing) *Routing { r.Weights[1] = math.Inf(1); return r }, "weight of rank 1 is +Inf"},
		{func(r *Routing) *Routing { r.Shift = -1; return r }, "shift -1 is negative"},
		{func(r *Routing) *Routing { r.Ranks = nil; return r }, "0 epochs of ranks"},
		{func(r *Routing) *Routing { r.Ranks = append(r.Ranks, r.Ranks[0]); return r }, "2 epochs of ranks without a shift"},
		{func(r *Routing) *Routing { r.Ranks[0] = r.Ranks[0][:7]; return r }, "epoch 0 has 7 ranks, want one per expert (8)"},
		{func(r *Routing) *Routing { r.Ranks[0][5] = 0; return r }, "epoch 0: rank 0 of layer 1 expert 1: the ranks of a layer must be a permutation of 0 to 3"},
		{func(r *Routing) *Routing { r.Ranks[0][3] = 4; return r }, "rank 4 of layer 0 expert 3"},
	} {
		for _, part := range []Partition{Global, PerLayer} {
			if _, err := NewCache(d, 4, part, "oracle", Options{Routing: tc.edit(good())}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %q", part, err, tc.want)
			}
		}
	}
	r := good()
	r.Shift, r.Ranks = 3, append(r.Ranks, []int32{3, 2, 1, 0, 0, 1, 2, 3})
	for _, part := range []Partition{Global, PerLayer} {
		if _, err := NewCache(d, 4, part, "oracle", Options{Routing: r}); err != nil {
			t.Errorf("%v, two epochs: %v", part, err)
		}
	}
}

// Without reuse the oracle keeps the most probable experts (A0): in every
// layer of its own, exactly what static does with the true popularity as
// its ledger.
func TestOracleWithoutReuseIsA0(t *testing.T) {
	tr := synthTrace(t, "zipf:s=1,reuse=0", 4, 32, 4, 600)
	d := Dims{Layers: 4, Experts: 32}
	r := routingOf(t, tr)
	heat := make([]float64, d.N())
	for x, rk := range r.Ranks[0] {
		heat[x] = r.Weights[rk]
	}
	s := stepsOf(tr, d.Layers)
	for _, capacity := range []int{16, 40, 64} {
		a := replay(t, newCache(t, d, capacity, PerLayer, "oracle", Options{Routing: r}), s)
		b := replay(t, newCache(t, d, capacity, PerLayer, "static", Options{Heat: heat}), s)
		if a != b {
			t.Errorf("capacity %d: oracle %d hits, static with the true popularity %d", capacity, a, b)
		}
		if a == 0 {
			t.Errorf("capacity %d: no hit", capacity)
		}
	}
}

// feed announces layer l's set of token tok to p and asks for a victim,
// as a Cache's RequestSet does, so that p's predictions are up to date.
func feed(t *testing.T, p *oracle, d Dims, tok, l int, set []int32) {
	t.Helper()
	now := d.Step(tok, l)
	for _, e := range set {
		p.Announce(ExpertID{Layer: l, Expert: int(e)}, now)
	}
	if _, ok := p.Victim(ExpertID{Layer: l, Expert: int(set[0])}, now); ok {
		t.Fatal("a victim with nothing resident")
	}
}

// Given the true order, oracle-learn's machinery (the kernels from its
// grid, its order by weight) computes exactly the oracle's probabilities,
// bit for bit, before and after shifts: what it adds is the estimate and
// nothing else.
func TestOracleLearnGivenTheOrderIsTheOracle(t *testing.T) {
	const L, E, k, T = 3, 64, 4, 500
	for _, spec := range []string{"zipf:s=1.1,reuse=0.5,shift=100", "zipf:s=0.5,reuse=0"} {
		tr := synthTrace(t, spec, L, E, k, T)
		d := Dims{Layers: L, Experts: E}
		o := Options{StepsPerToken: L, Routing: routingOf(t, tr)}
		want, err := newOracle(d, o, knowRanks)
		if err != nil {
			t.Fatal(err)
		}
		got, err := newOracle(d, o, learnTruth)
		if err != nil {
			t.Fatal(err)
		}
		diff := 0
		for tok := range T {
			for l := range L {
				set := tr.Step(tok, l)
				feed(t, want, d, tok, l, set)
				feed(t, got, d, tok, l, set)
				for x := range want.p {
					if want.p[x] != got.p[x] {
						diff++
						if diff < 4 {
							t.Errorf("%s: token %d layer %d: P(%v) = %v, the oracle's %v", spec, tok, l, d.ID(x), got.p[x], want.p[x])
						}
					}
				}
			}
		}
		if diff > 0 {
			t.Errorf("%s: %d probabilities differ from the oracle's", spec, diff)
		}
	}
}

// oracle-learn learns the order from the routing since the last shift
// only: two routings that differ before a shift (but for the set just
// before it, which the generator's reuse carries over) give it the same
// probabilities from then on; and within an epoch what it learns ranks the
// truly popular experts above the rest.
func TestOracleLearnForgetsAtAShift(t *testing.T) {
	const L, E, k, T, shift = 2, 64, 4, 300, 100
	spec := fmt.Sprintf("zipf:s=1.1,reuse=0.5,shift=%d", shift)
	a := synthTrace(t, spec, L, E, k, T)
	b := synthTrace(t, spec+",stream=2", L, E, k, T) // another run: its own orders and draws
	d := Dims{Layers: L, Experts: E}
	r := routingOf(t, a)
	pa, err := newOracle(d, Options{StepsPerToken: L, Routing: r}, learnRanks)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := newOracle(d, Options{StepsPerToken: L, Routing: r}, learnRanks)
	if err != nil {
		t.Fatal(err)
	}
	differed := false
	var hot, cold, n float64
	for tok := range T {
		for l := range L {
			sa, sb := a.Step(tok, l), b.Step(tok, l)
			if tok >= shift-1 {
				sb = sa // from the set before the shift on, the same routing
			}
			feed(t, pa, d, tok, l, sa)
			feed(t, pb, d, tok, l, sb)
			same := slices.Equal(pa.p[l*E:(l+1)*E], pb.p[l*E:(l+1)*E])
			switch {
			case tok >= shift-1 && !same:
				t.Fatalf("token %d layer %d: the probabilities depend on the routing before the shift at %d", tok, l, shift)
			case tok < shift-1 && !same:
				differed = true
			}
			if tok%shift >= 50 {
				// The true order of the epoch: the 8 most and the 8 least
				// popular experts not in the set just used.
				ranks := r.Ranks[tok/shift][l*E : (l+1)*E]
				for x, rk := range ranks {
					if slices.Contains(sa, int32(x)) {
						continue
					}
					switch {
					case rk < 8:
						hot += pa.p[l*E+x]
					case int(rk) >= E-8:
						cold += pa.p[l*E+x]
						n++
					}
				}
			}
		}
	}
	if !differed {
		t.Error("different routing before the shift never changed the probabilities: the test shows nothing")
	}
	if !(hot > 5*cold) || n == 0 {
		t.Errorf("within an epoch: the truly hottest experts got %.1f of probability in all, the coldest %.1f: not learnt", hot, cold)
	}
}

// oracle-learn is not told the order: the Routing's Ranks, scrambled or
// left out, change nothing (the oracle needs them); and it needs the
// generator, which a measured trace does not have.
func TestOracleLearnIgnoresTheOrder(t *testing.T) {
	const L, E, k, T = 3, 32, 4, 300
	tr := synthTrace(t, "zipf:s=1,reuse=0.4,shift=120", L, E, k, T)
	d := Dims{Layers: L, Experts: E}
	s := stepsOf(tr, L)
	truth := routingOf(t, tr)
	scrambled := routingOf(t, tr)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ranks := range scrambled.Ranks {
		for l := range L {
			rs := ranks[l*E : (l+1)*E]
			rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		}
	}
	none := routingOf(t, tr)
	none.Ranks = nil
	for _, part := range []Partition{Global, PerLayer} {
		const capacity = 30
		want := replay(t, newCache(t, d, capacity, part, "oracle-learn", Options{Routing: truth}), s)
		for name, r := range map[string]*Routing{"scrambled": scrambled, "none": none} {
			if got := replay(t, newCache(t, d, capacity, part, "oracle-learn", Options{Routing: r}), s); got != want {
				t.Errorf("%v, ranks %s: %d hits, with the true ranks %d", part, name, got, want)
			}
		}
		if o := replay(t, newCache(t, d, capacity, part, "oracle", Options{Routing: scrambled}), s); o == want {
			t.Errorf("%v: the oracle with scrambled ranks has oracle-learn's %d hits: the test shows nothing", part, o)
		}
		if _, err := NewCache(d, capacity, part, "oracle", Options{Routing: none}); err == nil || !strings.Contains(err.Error(), "0 epochs of ranks") {
			t.Errorf("%v: oracle without ranks: %v", part, err)
		}
		for _, err := range []error{
			func() error { _, err := NewCache(d, capacity, part, "oracle-learn", Options{}); return err }(),
			func() error { _, err := New("oracle-learn", d, Options{}); return err }(),
		} {
			if err == nil || !strings.Contains(err.Error(), "policy oracle-learn: needs Options.Routing, the generator of a synthetic trace (a measured trace has none)") {
				t.Errorf("%v: oracle-learn without a generator: %v", part, err)
			}
		}
	}
}
