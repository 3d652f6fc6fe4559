package sim

import (
	"fmt"
	"math"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// dims is the expert shape of tr's model.
func dims(tr *trace.Trace) policy.Dims {
	return policy.Dims{Layers: tr.Header.Layers, Experts: tr.Header.Experts}
}

// NextUses returns, for every access of tr in order (token, layer, slot),
// the layer-clock step of the next access of the same expert, or
// policy.NoNext.
func NextUses(tr *trace.Trace) []int64 {
	d := dims(tr)
	k := tr.Header.TopK
	next := make([]int64, tr.Tokens()*d.Layers*k)
	seen := make([]int64, d.N())
	for i := range seen {
		seen[i] = policy.NoNext
	}
	i := len(next)
	for tok := tr.Tokens() - 1; tok >= 0; tok-- {
		for l := d.Layers - 1; l >= 0; l-- {
			set := tr.Step(tok, l)
			for j := len(set) - 1; j >= 0; j-- {
				i--
				x := l*d.Experts + int(set[j])
				next[i] = seen[x]
				seen[x] = d.Step(tok, l)
			}
		}
	}
	return next
}

// HitConfig is one cache to replay a trace through.
type HitConfig struct {
	Policy    string
	Partition policy.Partition
	Capacity  int // experts
	Options   policy.Options
	// Warm, if set, fills the empty cache before the first token (e.g.
	// policy.WarmOrder of a heat ledger).
	Warm []policy.ExpertID
	// Skip excludes the first Skip tokens from the counts (they still run).
	Skip int
}

// HitResult is the outcome of one replay.
type HitResult struct {
	Policy    string  `json:"policy"`
	Partition string  `json:"partition"`
	Capacity  int     `json:"capacity"`
	Fraction  float64 `json:"fraction"` // capacity ÷ all experts
	Accesses  int64   `json:"accesses"`
	Hits      int64   `json:"hits"`
	HitRate   float64 `json:"hit_rate"`
}

// Hits replays tr through one cache. next is NextUses(tr) (needed by
// belady; nil computes it).
func Hits(tr *trace.Trace, next []int64, c HitConfig) (HitResult, error) {
	d := dims(tr)
	k := tr.Header.TopK
	if next == nil {
		next = NextUses(tr)
	}
	if len(next) != tr.Tokens()*d.Layers*k {
		return HitResult{}, fmt.Errorf("sim: %d next uses for a trace of %d accesses", len(next), tr.Tokens()*d.Layers*k)
	}
	cache, err := policy.NewCache(d, c.Capacity, c.Partition, c.Policy, c.Options)
	if err != nil {
		return HitResult{}, err
	}
	if err := checkLeases(cache, k); err != nil {
		return HitResult{}, fmt.Errorf("sim: %w", err)
	}
	if _, err := cache.Warm(c.Warm, -1); err != nil {
		return HitResult{}, err
	}
	r := HitResult{Policy: c.Policy, Partition: c.Partition.String(), Capacity: c.Capacity, Fraction: float64(c.Capacity) / float64(d.N())}
	ids := make([]policy.ExpertID, k)
	outs := make([]policy.Outcome, k)
	i := 0
	for tok := range tr.Tokens() {
		for l := range d.Layers {
			for j, e := range tr.Step(tok, l) {
				ids[j] = policy.ExpertID{Layer: l, Expert: int(e)}
			}
			if err := cache.RequestSet(ids, d.Step(tok, l), next[i:i+k], outs); err != nil {
				return HitResult{}, fmt.Errorf("sim: token %d layer %d: %w", tok, l, err)
			}
			i += k
			if tok >= c.Skip {
				r.Accesses += int64(k)
				for _, o := range outs {
					if o.Hit {
						r.Hits++
					}
				}
			}
			for _, id := range ids {
				if err := cache.Release(id); err != nil {
					return HitResult{}, err
				}
			}
		}
	}
	if r.Accesses > 0 {
		r.HitRate = float64(r.Hits) / float64(r.Accesses)
	}
	return r, nil
}

// checkLeases refuses a cache whose partitions cannot hold one layer's
// experts at once.
func checkLeases(c *policy.Cache, k int) error {
	for l := range c.Dims().Layers {
		if n := c.PartitionCapacity(l); n < k {
			return fmt.Errorf("%d slots for layer %d (%s, %d experts in all) cannot hold the layer's top-%d experts at once", n, l, c.Partition(), c.Capacity(), k)
		}
	}
	return nil
}

// Variant is a policy with its options, under a label for tables (e.g.
// "heat+ledger" for heat given a heat ledger).
type Variant struct {
	Label   string
	Policy  string
	Options policy.Options
}

// CompareRow is one variant at one capacity, with Belady's hit rate on the
// same trace, capacity and partitioning.
type CompareRow struct {
	Label string `json:"label"`
	HitResult
	Belady       float64 `json:"belady_hit_rate"`
	OfBelady     float64 `json:"of_belady"`     // HitRate ÷ Belady
	BeladyGlobal float64 `json:"belady_global"` // Belady with one global capacity (the bound for any partitioning)
}

// Compare replays tr through every variant at every capacity (a fraction
// of all experts) and partitioning, against Belady, counting the tokens
// after the first skip.
func Compare(tr *trace.Trace, fractions []float64, parts []policy.Partition, variants []Variant, skip int) ([]CompareRow, error) {
	d := dims(tr)
	if skip < 0 || skip >= tr.Tokens() {
		return nil, fmt.Errorf("sim: skip %d tokens of a trace of %d", skip, tr.Tokens())
	}
	next := NextUses(tr)
	var rows []CompareRow
	for _, part := range parts {
		for _, f := range fractions {
			if !(f > 0 && f <= 1) {
				return nil, fmt.Errorf("sim: capacity fraction %v: want (0, 1]", f)
			}
			capacity := max(1, int(math.Round(f*float64(d.N()))))
			opt, err := Hits(tr, next, HitConfig{Policy: "belady", Partition: part, Capacity: capacity, Skip: skip})
			if err != nil {
				return nil, err
			}
			glob := opt
			if part != policy.Global {
				if glob, err = Hits(tr, next, HitConfig{Policy: "belady", Partition: policy.Global, Capacity: capacity, Skip: skip}); err != nil {
					return nil, err
				}
			}
			for _, v := range variants {
				r := opt
				if v.Policy != "belady" {
					if r, err = Hits(tr, next, HitConfig{Policy: v.Policy, Partition: part, Capacity: capacity, Options: v.Options, Skip: skip}); err != nil {
						return nil, fmt.Errorf("%s: %w", v.Label, err)
					}
				}
				row := CompareRow{Label: v.Label, HitResult: r, Belady: opt.HitRate, BeladyGlobal: glob.HitRate}
				row.Fraction = f
				if opt.HitRate > 0 {
					row.OfBelady = r.HitRate / opt.HitRate
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}
