package policy

// HintScore measures how often the engine's prefetch hints come true, rank
// by rank (its i-th hinted expert of a layer: the engine lists the next
// layer's router's choices first, then the experts the previous token
// used), so that a hierarchy reads ahead only the ranks that pay: a read
// ahead that is not used costs a read and a hash the storage and the cores
// would have spent on a needed one, and one that is saves only waiting.
// Every hint is scored against what its layer then routed to, read ahead
// or not, so a rank that starts coming true is trusted again. The streaming
// hierarchy (package tier) and its simulator (package tier/sim) keep one
// each and make the same decisions. The zero value trusts no rank: a rank is read ahead once its hints have come true (about 13 layers in a row from the start).
type HintScore struct {
	prec    []float64 // by rank: the moving share of hints that came true
	pending []int     // the hint of layer whose Stream has not come yet
	layer   int
	all     bool // TrustAll
}

// TrustAll makes s trust every rank whatever its score: for hints known to
// come true (the simulator's oracle, pipelines checked by hand).
func (s *HintScore) TrustAll() { s.all = true }

// PrefetchPrecision is the share of a rank's hints that must come true for
// its experts to be read ahead.
const PrefetchPrecision = 0.75

// hintDecay is the weight of one layer's outcome in a rank's precision.
const hintDecay = 0.1

// Given records the hint for layer (when a hierarchy acts on it), to be
// scored when that layer's experts are known.
func (s *HintScore) Given(layer int, hint []int) {
	s.pending, s.layer = append(s.pending[:0], hint...), layer
}

// Score scores the pending hint, if it was for layer, against the experts
// the layer used.
func (s *HintScore) Score(layer int, used []int) {
	if len(s.pending) == 0 || s.layer != layer {
		return
	}
	for len(s.prec) < len(s.pending) {
		s.prec = append(s.prec, 0) // a new rank is read ahead once its hints have come true
	}
	for i, x := range s.pending {
		hit := 0.0
		for _, e := range used {
			if e == x {
				hit = 1
				break
			}
		}
		s.prec[i] += hintDecay * (hit - s.prec[i])
	}
	s.pending = s.pending[:0]
}

// Trust reports whether experts of hint rank i are worth reading ahead.
func (s *HintScore) Trust(i int) bool {
	return s.all || (i < len(s.prec) && s.prec[i] >= PrefetchPrecision)
}
