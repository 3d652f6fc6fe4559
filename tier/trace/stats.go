package trace

import (
	"math"
	"sort"
)

// Stats are a trace's locality figures, to compare a synthetic trace with
// published routing studies and a measured one with the generator's
// parameters.
type Stats struct {
	Tokens int `json:"tokens"`
	// Reuse: of the experts a layer uses at a token (after the first), the
	// fraction it also used at the previous token. Uniform routing gives
	// top_k/experts.
	Reuse float64 `json:"reuse"`
	// TopShare: the hottest expert's share of a layer's selections, mean
	// over layers.
	TopShare float64 `json:"top_share"`
	// Coverage90: the smallest fraction of a layer's experts that holds 90%
	// of its selections, mean over layers.
	Coverage90 float64 `json:"coverage90"`
	// ZipfS: the Zipf exponent fitted to a layer's selection counts by rank
	// (FitZipf), mean over layers.
	ZipfS float64 `json:"zipf_s"`
}

// Counts is the number of times each expert was selected, by dense index
// (layer·experts + expert): the heat a ledger would hold after this run.
func (t *Trace) Counts() []float64 {
	h := t.Header
	c := make([]float64, h.Layers*h.Experts)
	for tok := range t.tokens {
		for l := range h.Layers {
			for _, e := range t.Step(tok, l) {
				c[l*h.Experts+int(e)]++
			}
		}
	}
	return c
}

// Stats computes t's locality figures.
func (t *Trace) Stats() Stats {
	h := t.Header
	s := Stats{Tokens: t.tokens}
	if t.tokens == 0 {
		return s
	}
	if t.tokens > 1 {
		mark := make([]int, h.Experts) // token+1 of the last use, per expert of the current layer
		var same, all int
		for l := range h.Layers {
			clear(mark)
			for tok := range t.tokens {
				for _, e := range t.Step(tok, l) {
					if tok > 0 {
						all++
						if mark[e] == tok {
							same++
						}
					}
				}
				for _, e := range t.Step(tok, l) {
					mark[e] = tok + 1
				}
			}
		}
		s.Reuse = float64(same) / float64(all)
	}
	counts := t.Counts()
	for l := range h.Layers {
		c := append([]float64(nil), counts[l*h.Experts:(l+1)*h.Experts]...)
		sort.Sort(sort.Reverse(sort.Float64Slice(c)))
		var total float64
		for _, x := range c {
			total += x
		}
		s.TopShare += c[0] / total
		var acc float64
		for i, x := range c {
			acc += x
			if acc >= 0.9*total {
				s.Coverage90 += float64(i+1) / float64(h.Experts)
				break
			}
		}
		s.ZipfS += FitZipf(c)
	}
	n := float64(h.Layers)
	s.TopShare /= n
	s.Coverage90 /= n
	s.ZipfS /= n
	return s
}

// FitZipf fits counts ≈ C·rank^−s by least squares of log count against log
// rank, over the more popular half of the ranks (the tail of a finite sample
// is noise) and only counts above zero; counts need not be sorted. It
// returns 0 when fewer than two ranks qualify.
func FitZipf(counts []float64) float64 {
	c := append([]float64(nil), counts...)
	sort.Sort(sort.Reverse(sort.Float64Slice(c)))
	var sx, sy, sxx, sxy float64
	n := 0
	for i := range (len(c) + 1) / 2 {
		if c[i] <= 0 {
			break
		}
		x, y := math.Log(float64(i+1)), math.Log(c[i])
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		n++
	}
	if n < 2 {
		return 0
	}
	fn := float64(n)
	return -(fn*sxy - sx*sy) / (fn*sxx - sx*sx)
}
