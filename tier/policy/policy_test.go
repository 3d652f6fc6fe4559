package policy

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// steps is a routing trace for tests: steps[t][l] are the experts layer l
// uses at token t.
type steps [][][]int

// randomSteps draws T tokens of L layers, k distinct experts of E each, from a
// skewed distribution with some reuse, so that policies differ.
func randomSteps(r *rand.Rand, T, L, E, k int) steps {
	s := make(steps, T)
	for t := range s {
		s[t] = make([][]int, L)
		for l := range s[t] {
			var set []int
			if t > 0 {
				for _, e := range s[t-1][l] {
					if r.Float64() < 0.3 {
						set = append(set, e)
					}
				}
			}
			for len(set) < k {
				e := int(float64(E) * math.Pow(r.Float64(), 2)) // skewed towards low indices
				if !slices.Contains(set, e) {
					set = append(set, e)
				}
			}
			s[t][l] = set
		}
	}
	return s
}

// nextUses returns, for every access in trace order, the step of the next
// access of the same expert.
func nextUses(d Dims, s steps) []int64 {
	n := 0
	for _, tok := range s {
		for _, set := range tok {
			n += len(set)
		}
	}
	next := make([]int64, n)
	seen := make([]int64, d.N())
	for i := range seen {
		seen[i] = NoNext
	}
	i := n
	for t := len(s) - 1; t >= 0; t-- {
		for l := len(s[t]) - 1; l >= 0; l-- {
			for j := len(s[t][l]) - 1; j >= 0; j-- {
				i--
				x := d.Index(ExpertID{Layer: l, Expert: s[t][l][j]})
				next[i] = seen[x]
				seen[x] = d.Step(t, l)
			}
		}
	}
	return next
}

// replay runs s through c (pinning each layer's experts together) and returns
// the hits. It checks the cache's invariants after every step.
func replay(t *testing.T, c *Cache, s steps) int {
	t.Helper()
	d := c.Dims()
	next := nextUses(d, s)
	hits, i := 0, 0
	for tok := range s {
		for l, set := range s[tok] {
			now := d.Step(tok, l)
			ids := make([]ExpertID, len(set))
			for j, e := range set {
				ids[j] = ExpertID{Layer: l, Expert: e}
			}
			outs := make([]Outcome, len(set))
			if err := c.RequestSet(ids, now, next[i:i+len(set)], outs); err != nil {
				t.Fatalf("token %d layer %d: %v", tok, l, err)
			}
			i += len(set)
			for _, out := range outs {
				if out.Hit {
					hits++
				}
				if out.Evict && c.Pinned(out.Evicted) > 0 {
					t.Fatalf("%s evicted pinned %v", c.Policy(), out.Evicted)
				}
			}
			if c.Len() > c.Capacity() {
				t.Fatalf("%s holds %d > capacity %d", c.Policy(), c.Len(), c.Capacity())
			}
			for _, e := range set {
				id := ExpertID{Layer: l, Expert: e}
				if !c.Contains(id) {
					t.Fatalf("%s: leased %v not resident", c.Policy(), id)
				}
				if err := c.Release(id); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return hits
}

func newCache(t *testing.T, d Dims, capacity int, part Partition, name string, o Options) *Cache {
	t.Helper()
	if UsesHeat(name) && o.Heat == nil {
		o.Heat = make([]float64, d.N())
		for i := range o.Heat {
			o.Heat[i] = float64(d.N() - i) // hotter at low indices, like randomSteps
		}
	}
	if NeedsRouting(name) && o.Routing == nil {
		o.Routing = testRouting(d, min(4, d.Experts), 0.3, 1) // skewed like randomSteps, but not its model
	}
	c, err := NewCache(d, capacity, part, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testRouting is a routing model for the oracle: weights (r+1)^−s, rank =
// expert index in every layer, one epoch.
func testRouting(d Dims, k int, reuse, s float64) *Routing {
	r := &Routing{TopK: k, Reuse: reuse, Weights: make([]float64, d.Experts), Ranks: [][]int32{make([]int32, d.N())}}
	for i := range r.Weights {
		r.Weights[i] = math.Pow(float64(i+1), -s)
	}
	for i := range r.Ranks[0] {
		r.Ranks[0][i] = int32(d.ID(i).Expert)
	}
	return r
}

// use requests and releases one expert at once and reports a hit.
func use(t *testing.T, c *Cache, l, e int, now int64) Outcome {
	t.Helper()
	id := ExpertID{Layer: l, Expert: e}
	out, err := c.Request(id, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(id); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLRUOrder(t *testing.T) {
	d := Dims{Layers: 1, Experts: 10}
	c := newCache(t, d, 3, Global, "lru", Options{})
	for i, e := range []int{0, 1, 2, 0} {
		use(t, c, 0, e, int64(i))
	}
	// LRU order is now 1, 2, 0: 3 evicts 1, then 4 evicts 2.
	if out := use(t, c, 0, 3, 4); out.Hit || !out.Evict || out.Evicted.Expert != 1 {
		t.Fatalf("got %+v, want eviction of expert 1", out)
	}
	if out := use(t, c, 0, 4, 5); !out.Evict || out.Evicted.Expert != 2 {
		t.Fatalf("got %+v, want eviction of expert 2", out)
	}
	if out := use(t, c, 0, 0, 6); !out.Hit {
		t.Fatalf("expert 0 should still be resident: %+v", out)
	}
}

// FIFO evicts in admission order whatever the uses since (where LRU would
// keep the expert just used), and passes over a pinned one.
func TestFIFOOrder(t *testing.T) {
	d := Dims{Layers: 1, Experts: 10}
	c := newCache(t, d, 3, Global, "fifo", Options{})
	for i, e := range []int{0, 1, 2, 0} {
		use(t, c, 0, e, int64(i))
	}
	// Admitted 0, 1, 2; the hit on 0 changes nothing: 3 evicts 0.
	if out := use(t, c, 0, 3, 4); out.Hit || !out.Evict || out.Evicted.Expert != 0 {
		t.Fatalf("got %+v, want eviction of expert 0", out)
	}
	// 1 is the oldest now; leased, it is passed over: 4 evicts 2.
	if _, err := c.Request(ExpertID{Expert: 1}, 5); err != nil {
		t.Fatal(err)
	}
	if out := use(t, c, 0, 4, 6); !out.Evict || out.Evicted.Expert != 2 {
		t.Fatalf("got %+v, want eviction of expert 2 (1 is leased)", out)
	}
	if err := c.Release(ExpertID{Expert: 1}); err != nil {
		t.Fatal(err)
	}
	if out := use(t, c, 0, 5, 7); !out.Evict || out.Evicted.Expert != 1 {
		t.Fatalf("got %+v, want eviction of expert 1, the oldest", out)
	}
}

func TestLFUCountsSurviveEviction(t *testing.T) {
	d := Dims{Layers: 1, Experts: 10}
	c := newCache(t, d, 2, Global, "lfu", Options{})
	now := int64(0)
	u := func(e int) Outcome { now++; return use(t, c, 0, e, now) }
	for range 3 {
		u(5) // count 3
	}
	u(1)
	u(2) // evicts 1 (count 1, older than 2) — 5 has count 3
	if !c.Contains(ExpertID{Expert: 5}) || c.Contains(ExpertID{Expert: 1}) {
		t.Fatal("lfu should keep the frequent expert 5 and evict 1")
	}
	for range 4 {
		u(2) // count 5
	}
	u(3) // evicts 5 (3 < 5)
	if c.Contains(ExpertID{Expert: 5}) {
		t.Fatal("lfu should evict 5 (count 3) before 2 (count 5)")
	}
	u(5) // count 4: evicts 3 (count 1)
	u(3) // count 2: must evict... 5 (4) vs 2 (5): evicts 5
	if c.Contains(ExpertID{Expert: 5}) || !c.Contains(ExpertID{Expert: 2}) {
		t.Fatal("lfu lost the history of expert 5 or 2 across evictions")
	}
	if out := u(5); out.Evicted.Expert != 3 {
		t.Fatalf("5 (count 5) should evict 3 (count 2), not %v", out.Evicted)
	}
}

func TestLFUDecayForgets(t *testing.T) {
	d := Dims{Layers: 1, Experts: 4}
	for _, tc := range []struct {
		name  string
		evict int
	}{{"lfu", 1}, {"lfu-decay", 0}} {
		c := newCache(t, d, 2, Global, tc.name, Options{HalfLifeTokens: 1})
		for i := range 10 {
			use(t, c, 0, 0, int64(i)) // expert 0: 10 uses long ago
		}
		use(t, c, 0, 1, 100)
		use(t, c, 0, 1, 101) // expert 1: 2 recent uses
		if out := use(t, c, 0, 2, 102); out.Evicted.Expert != tc.evict {
			t.Errorf("%s evicted %v, want expert %d", tc.name, out.Evicted, tc.evict)
		}
	}
}

func TestHeatPriorAndStatic(t *testing.T) {
	d := Dims{Layers: 1, Experts: 4}
	heat := []float64{100, 0, 0, 1} // expert 0 is hot in the ledger
	for _, name := range []string{"heat", "static"} {
		c := newCache(t, d, 2, Global, name, Options{Heat: heat, HalfLifeTokens: 1})
		use(t, c, 0, 0, 0)
		use(t, c, 0, 1, 1)
		if out := use(t, c, 0, 2, 2); out.Evicted.Expert != 1 {
			t.Errorf("%s: got %+v, want the cold expert 1 evicted", name, out)
		}
	}
	// Much later, recent use outweighs the decayed prior for heat, never for static.
	for _, tc := range []struct {
		name  string
		evict int
	}{{"heat", 0}, {"static", 1}} {
		c := newCache(t, d, 2, Global, tc.name, Options{Heat: heat, HalfLifeTokens: 1})
		use(t, c, 0, 0, 1000)
		use(t, c, 0, 1, 1001)
		use(t, c, 0, 1, 1002)
		if out := use(t, c, 0, 2, 1003); out.Evicted.Expert != tc.evict {
			t.Errorf("%s: evicted %v, want expert %d", tc.name, out.Evicted, tc.evict)
		}
	}
}

func TestLRU2(t *testing.T) {
	d := Dims{Layers: 1, Experts: 10}
	c := newCache(t, d, 3, Global, "lru2", Options{})
	for i, e := range []int{0, 0, 1, 1, 2} {
		use(t, c, 0, e, int64(i))
	}
	// 2 was used once (no second access): it goes first although newest.
	if out := use(t, c, 0, 3, 5); out.Evicted.Expert != 2 {
		t.Fatalf("got %+v, want eviction of expert 2", out)
	}
	use(t, c, 0, 3, 6) // 3: accesses 5, 6; 0: 0, 1; 1: 2, 3
	if out := use(t, c, 0, 4, 7); out.Evicted.Expert != 0 {
		t.Fatalf("got %+v, want eviction of expert 0 (oldest second access)", out)
	}
}

// In a global cache LRU evicts the expert of the layer about to run (it was
// used longest ago); leaststale evicts, among experts equally stale (none has
// missed a run of its layer), the one whose layer runs last.
func TestLeastStaleLayerAware(t *testing.T) {
	d := Dims{Layers: 4, Experts: 2}
	for _, tc := range []struct {
		name    string
		evicted ExpertID
		hit     bool
	}{
		{"lru", ExpertID{Layer: 0, Expert: 0}, false},
		{"leaststale", ExpertID{Layer: 2, Expert: 0}, true},
		// The others measure age in runs of the expert's own layer too.
		{"lfu", ExpertID{Layer: 2, Expert: 0}, true},
		{"lfu-decay", ExpertID{Layer: 2, Expert: 0}, true},
		{"heat", ExpertID{Layer: 2, Expert: 0}, true},
		{"lru2", ExpertID{Layer: 2, Expert: 0}, true},
	} {
		c := newCache(t, d, 3, Global, tc.name, Options{})
		for l := range 3 {
			use(t, c, l, 0, d.Step(0, l))
		}
		out := use(t, c, 3, 0, d.Step(0, 3)) // token 0, layer 3: the tier is full
		if !out.Evict || out.Evicted != tc.evicted {
			t.Errorf("%s: evicted %+v, want %v", tc.name, out, tc.evicted)
		}
		if out := use(t, c, 0, 0, d.Step(1, 0)); out.Hit != tc.hit { // token 1 needs layer 0's expert first
			t.Errorf("%s: token 1 layer 0: hit %v, want %v", tc.name, out.Hit, tc.hit)
		}
	}
}

// Within one layer leaststale is LRU: per-layer partitions give identical
// hits on any trace.
func TestLeastStaleIsLRUWithinALayer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := Dims{Layers: 4, Experts: 32}
	s := randomSteps(r, 300, d.Layers, d.Experts, 4)
	for _, capacity := range []int{16, 40, 64} {
		a := replay(t, newCache(t, d, capacity, PerLayer, "lru", Options{}), s)
		b := replay(t, newCache(t, d, capacity, PerLayer, "leaststale", Options{}), s)
		if a != b {
			t.Errorf("capacity %d: lru %d hits, leaststale %d", capacity, a, b)
		}
	}
}

// optimal is the fewest misses any demand-fetching tier of the given
// capacity can have on s (all experts of a step resident together), by
// exhaustive search over the resident sets. Experts are bits of a mask.
func optimal(d Dims, s steps, capacity int) int {
	cost := map[uint32]int{0: 0}
	for tok := range s {
		for l, set := range s[tok] {
			var req uint32
			for _, e := range set {
				req |= 1 << d.Index(ExpertID{Layer: l, Expert: e})
			}
			next := map[uint32]int{}
			for x, cx := range cost {
				miss := bits.OnesCount32(req &^ x)
				keep := x &^ req // may stay besides req
				room := capacity - bits.OnesCount32(req)
				for z := keep; ; z = (z - 1) & keep { // every subset of keep
					if bits.OnesCount32(z) <= room {
						y := req | z
						if c, ok := next[y]; !ok || cx+miss < c {
							next[y] = cx + miss
						}
					}
					if z == 0 {
						break
					}
				}
			}
			cost = next
		}
	}
	best := math.MaxInt
	for _, c := range cost {
		best = min(best, c)
	}
	return best
}

func accesses(s steps) int {
	n := 0
	for _, tok := range s {
		for _, set := range tok {
			n += len(set)
		}
	}
	return n
}

func TestBeladyIsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := 0
	for _, d := range []Dims{{Layers: 1, Experts: 7}, {Layers: 2, Experts: 4}, {Layers: 3, Experts: 3}} {
		for _, k := range []int{1, 2} {
			for capacity := k; capacity <= min(d.N(), k+4); capacity++ {
				for range 15 {
					s := randomSteps(r, 6+r.IntN(6), d.Layers, d.Experts, k)
					want := accesses(s) - optimal(d, s, capacity)
					got := replay(t, newCache(t, d, capacity, Global, "belady", Options{}), s)
					if got != want {
						t.Fatalf("dims %+v k %d capacity %d: belady %d hits, optimum %d\ntrace %v", d, k, capacity, got, want, s)
					}
					cases++
				}
			}
		}
	}
	t.Logf("%d traces", cases)
}

// Belady bounds every policy, per partition kind, on every trace; and the
// online policies are not all the same (a broken policy shows).
func TestBeladyBoundsEveryPolicy(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	d := Dims{Layers: 4, Experts: 24}
	for trial := range 4 {
		s := randomSteps(r, 200, d.Layers, d.Experts, 3)
		for _, part := range []Partition{Global, PerLayer} {
			for _, capacity := range []int{16, 24, 48} { // more than one layer's experts per partition: policies have a choice
				opt := replay(t, newCache(t, d, capacity, part, "belady", Options{}), s)
				seen := map[int]bool{}
				for _, name := range Names() {
					if name == "belady" {
						continue
					}
					h := replay(t, newCache(t, d, capacity, part, name, Options{}), s)
					if h > opt {
						t.Errorf("trial %d %v capacity %d: %s has %d hits > belady %d", trial, part, capacity, name, h, opt)
					}
					if h == 0 {
						t.Errorf("%s had no hit at all", name)
					}
					seen[h] = true
				}
				if len(seen) < 3 {
					t.Errorf("trial %d %v capacity %d: only %d distinct hit counts over the online policies", trial, part, capacity, len(seen))
				}
			}
		}
	}
}

// Random leases of random lengths: a pinned expert is never evicted, the
// capacity (of each partition) is never exceeded, and a tier whose every
// slot is leased refuses to admit.
func TestPinSafety(t *testing.T) {
	d := Dims{Layers: 3, Experts: 16}
	for _, name := range Names() {
		for _, part := range []Partition{Global, PerLayer} {
			r := rand.New(rand.NewPCG(7, 8))
			c := newCache(t, d, 12, part, name, Options{})
			type lease struct {
				id  ExpertID
				end int64
			}
			var leases []lease
			evictions := 0
			for now := int64(0); now < 3000; now++ {
				// end the leases that are due
				leases = slices.DeleteFunc(leases, func(l lease) bool {
					if l.end > now {
						return false
					}
					if err := c.Release(l.id); err != nil {
						t.Fatal(err)
					}
					return true
				})
				id := ExpertID{Layer: r.IntN(d.Layers), Expert: r.IntN(d.Experts)}
				out, err := c.RequestNext(id, now, now+int64(r.IntN(50)))
				if errors.Is(err, ErrAllPinned) {
					// legitimate only if every slot of its partition is leased
					full := 0
					for _, l := range leases {
						if part == Global || l.id.Layer == id.Layer {
							if c.Pinned(l.id) > 0 {
								full++
							}
						}
					}
					if full < c.PartitionCapacity(id.Layer) {
						t.Fatalf("%s %v: refused %v with only %d leases: %v", name, part, id, full, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if out.Evict {
					evictions++
					if c.Pinned(out.Evicted) > 0 {
						t.Fatalf("%s %v evicted pinned %v", name, part, out.Evicted)
					}
				}
				leases = append(leases, lease{id, now + int64(r.IntN(8))})
				if c.Len() > c.Capacity() {
					t.Fatalf("%s %v: %d resident > capacity %d", name, part, c.Len(), c.Capacity())
				}
				for l := range d.Layers {
					n := 0
					for e := range d.Experts {
						if c.Contains(ExpertID{Layer: l, Expert: e}) {
							n++
						}
					}
					if part == PerLayer && n > c.PartitionCapacity(l) {
						t.Fatalf("%s: layer %d holds %d > %d", name, l, n, c.PartitionCapacity(l))
					}
				}
				for _, l := range leases {
					if !c.Contains(l.id) {
						t.Fatalf("%s %v: leased %v not resident", name, part, l.id)
					}
				}
			}
			if evictions < 100 {
				t.Errorf("%s %v: only %d evictions: the test did not exercise eviction", name, part, evictions)
			}
		}
	}
}

func TestCacheErrors(t *testing.T) {
	d := Dims{Layers: 2, Experts: 4}
	for _, tc := range []struct {
		capacity int
		part     Partition
		name     string
		o        Options
		want     string
	}{
		{0, Global, "lru", Options{}, "capacity 0"},
		{9, Global, "lru", Options{}, "capacity 9"},
		{1, PerLayer, "lru", Options{}, "leaves layers with no slot"},
		{2, Global, "mru", Options{}, `unknown policy "mru"`},
		{2, Global, "static", Options{}, "heat ledger has 0 entries"},
		{2, Global, "heat", Options{Heat: []float64{1, 1, 1, math.NaN(), 1, 1, 1, 1}}, "heat of layer 0 expert 3 is NaN"},
		{2, Global, "heat", Options{Heat: []float64{1}}, "heat ledger has 1 entries"},
		{2, Global, "lfu-decay", Options{HalfLifeTokens: -1}, "HalfLifeTokens -1"},
		{2, Global, "lru", Options{StepsPerToken: -1}, "StepsPerToken -1 is negative"},
		{2, Global, "lru", Options{PriorWeight: -1}, "PriorWeight -1: want a positive finite number"},
		{2, Global, "heat", Options{Heat: []float64{1, 1, 1, 1, 1, -1, 1, 1}}, "heat of layer 1 expert 1 is -1"},
		{2, Partition(7), "lru", Options{}, "unknown partition"},
	} {
		if _, err := NewCache(d, tc.capacity, tc.part, tc.name, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCache(%d, %v, %s): %v, want %q", tc.capacity, tc.part, tc.name, err, tc.want)
		}
	}
	c := newCache(t, d, 2, Global, "lru", Options{})
	if _, err := c.Request(ExpertID{Layer: 2, Expert: 0}, 0); err == nil || !strings.Contains(err.Error(), "layer 2 expert 0 is not an expert") {
		t.Errorf("out-of-range request: %v", err)
	}
	if err := c.Release(ExpertID{Layer: 0, Expert: 1}); err == nil || !strings.Contains(err.Error(), "holds no lease") {
		t.Errorf("release without lease: %v", err)
	}
	b := newCache(t, d, 2, Global, "belady", Options{})
	if _, err := b.Request(ExpertID{}, 0); err == nil || !strings.Contains(err.Error(), "RequestNext") {
		t.Errorf("belady without next use: %v", err)
	}
	for i := range 2 {
		if _, err := c.Request(ExpertID{Expert: i}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Request(ExpertID{Expert: 3}, 1); !errors.Is(err, ErrAllPinned) {
		t.Errorf("third lease on a 2-slot tier: %v", err)
	}
}

func TestWarmOrder(t *testing.T) {
	d := Dims{Layers: 2, Experts: 3}
	heat := []float64{5, 0, 9, 8, 7, 1} // (0,0)=5 (0,2)=9 (1,0)=8 (1,1)=7 (1,2)=1
	ids := func(v []ExpertID) [][2]int {
		var o [][2]int
		for _, id := range v {
			o = append(o, [2]int{id.Layer, id.Expert})
		}
		return o
	}
	g, err := WarmOrder(d, heat, Global, 3)
	if err != nil || !slices.Equal(ids(g), [][2]int{{0, 2}, {1, 0}, {1, 1}}) {
		t.Errorf("global: %v %v", ids(g), err)
	}
	p, err := WarmOrder(d, heat, PerLayer, 3) // layer 0 gets 2 slots, layer 1 one
	if err != nil || !slices.Equal(ids(p), [][2]int{{0, 2}, {1, 0}, {0, 0}}) {
		t.Errorf("per-layer: %v %v", ids(p), err)
	}
	all, _ := WarmOrder(d, heat, Global, 10)
	if len(all) != 5 {
		t.Errorf("zero-heat expert included: %v", ids(all))
	}
	c := newCache(t, d, 4, PerLayer, "lru", Options{})
	if n, err := c.Warm(all, 0); n != 4 || err != nil {
		t.Errorf("Warm admitted %d (%v), want 4 (2 per layer)", n, err)
	}
	if _, err := WarmOrder(d, heat[:5], Global, 3); err == nil {
		t.Error("short heat accepted")
	}
	if _, err := WarmOrder(d, []float64{1, -1, 0, 0, 0, 0}, Global, 3); err == nil || !strings.Contains(err.Error(), "layer 0 expert 1") {
		t.Errorf("negative heat: %v", err)
	}
}

// Steady state allocates nothing, for every policy.
func TestNoAllocs(t *testing.T) {
	d := Dims{Layers: 8, Experts: 64}
	s := randomSteps(rand.New(rand.NewPCG(9, 9)), 64, d.Layers, d.Experts, 4)
	for _, name := range Names() {
		c := newCache(t, d, 128, Global, name, Options{})
		replay(t, c, s) // warm
		tok := 0
		allocs := testing.AllocsPerRun(50, func() {
			for l, set := range s[tok%len(s)] {
				now := d.Step(64+tok, l)
				for _, e := range set {
					c.RequestNext(ExpertID{Layer: l, Expert: e}, now, now+100)
				}
				for _, e := range set {
					c.Release(ExpertID{Layer: l, Expert: e})
				}
			}
			tok++
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per token", name, allocs)
		}
	}
}

func BenchmarkPolicies(b *testing.B) {
	d := Dims{Layers: 48, Experts: 256}
	s := randomSteps(rand.New(rand.NewPCG(1, 1)), 256, d.Layers, d.Experts, 8)
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			o := Options{}
			if NeedsRouting(name) {
				o.Routing = testRouting(d, 8, 0.5, 1)
			}
			if UsesHeat(name) {
				o.Heat = make([]float64, d.N())
				for i := range o.Heat {
					o.Heat[i] = 1
				}
			}
			c, err := NewCache(d, d.N()/4, Global, name, o)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			n := 0
			for tok := 0; b.Loop(); tok++ {
				for l, set := range s[tok%len(s)] {
					now := d.Step(tok, l)
					for _, e := range set {
						c.RequestNext(ExpertID{Layer: l, Expert: e}, now, now+int64(e)*7)
						n++
					}
					for _, e := range set {
						c.Release(ExpertID{Layer: l, Expert: e})
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/access")
		})
	}
}

// heat without a ledger is lfu-decay with recency protected: the expert the
// previous run of its layer used survives a global tier's churn that evicts
// it under lfu-decay.
func TestHeatProtectsFresh(t *testing.T) {
	d := Dims{Layers: 2, Experts: 8}
	for _, tc := range []struct {
		name string
		hit  bool
	}{{"lfu-decay", false}, {"heat", true}} {
		c, err := NewCache(d, 3, Global, tc.name, Options{HalfLifeTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for tok := range 3 { // (0,0) and (1,0) become frequent
			use(t, c, 0, 0, d.Step(tok, 0))
			use(t, c, 1, 0, d.Step(tok, 1))
		}
		use(t, c, 0, 1, d.Step(3, 0)) // (0,1) is new: count 1, fresh
		use(t, c, 1, 1, d.Step(3, 1)) // evicts (0,1) under lfu-decay (lowest count); heat keeps it (fresh) and evicts (0,0)
		if out := use(t, c, 0, 1, d.Step(4, 0)); out.Hit != tc.hit {
			t.Errorf("%s: reuse of layer 0 expert 1: hit %v, want %v", tc.name, out.Hit, tc.hit)
		}
	}
}

// The fresh class is protected across layers too: a layer whose only
// resident expert is fresh keeps it against a frequent stale one of another
// layer.
func TestHeatProtectsFreshAcrossLayers(t *testing.T) {
	d := Dims{Layers: 2, Experts: 4}
	for _, tc := range []struct {
		name string
		hit  bool
	}{{"lfu-decay", false}, {"heat", true}} {
		c, err := NewCache(d, 2, Global, tc.name, Options{HalfLifeTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for tok := range 3 {
			use(t, c, 0, 0, d.Step(tok, 0))
			use(t, c, 1, 0, d.Step(tok, 1))
		}
		use(t, c, 0, 1, d.Step(3, 0)) // evicts (0,0): stale
		use(t, c, 1, 1, d.Step(3, 1)) // heat: (1,0), stale; lfu-decay: (0,1), the lowest count
		if out := use(t, c, 0, 1, d.Step(4, 0)); out.Hit != tc.hit {
			t.Errorf("%s: reuse of layer 0 expert 1: hit %v, want %v", tc.name, out.Hit, tc.hit)
		}
	}
}

// Within a layer too, heat evicts a stale expert before a fresh one, however
// frequent the stale one.
func TestHeatFreshWithinLayer(t *testing.T) {
	d := Dims{Layers: 2, Experts: 4}
	c, err := NewCache(d, 3, Global, "heat", Options{HalfLifeTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for tok := range 3 {
		use(t, c, 0, 0, d.Step(tok, 0))
		use(t, c, 1, 0, d.Step(tok, 1)) // (1,0): three uses
	}
	use(t, c, 0, 0, d.Step(3, 0))
	use(t, c, 1, 1, d.Step(3, 1)) // (1,1): one use, at layer 1's last run
	use(t, c, 0, 0, d.Step(4, 0))
	if out := use(t, c, 0, 2, d.Step(4, 0)); out.Evicted != (ExpertID{Layer: 1, Expert: 0}) {
		t.Errorf("evicted %v, want the stale layer 1 expert 0 (not the fresh 1,1 nor 0,0)", out.Evicted)
	}
}

// lru2 orders second-to-last uses by layer phase: of two experts equally
// stale, the one whose layer ran last (next needed last) goes.
func TestLRU2LayerPhase(t *testing.T) {
	d := Dims{Layers: 4, Experts: 2}
	p := newLRU2(d)
	a, b := ExpertID{Layer: 0}, ExpertID{Layer: 2}
	p.Insert(a, 0)
	p.Touch(a, 0)
	p.Insert(b, 2)
	p.Touch(b, 2)
	p.Touch(a, d.Step(1, 0))
	p.Touch(b, d.Step(1, 2))
	if v, _ := p.Victim(ExpertID{Layer: 3, Expert: 1}, d.Step(1, 3)); v != b {
		t.Errorf("victim %v, want %v (layer 0's expert is needed first)", v, b)
	}
}
