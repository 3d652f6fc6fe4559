package policy

// HintScore measures how often the engine's prefetch hints come true, layer
// by layer and rank by rank (its i-th hinted expert of a layer: the engine
// lists the next layer's router's choices first, then the experts the
// previous token used), so that a hierarchy reads ahead only the hints
// that pay: a read ahead that is not used costs a read and a hash the
// storage and the cores would have spent on a needed one, and one that is
// saves only waiting. Layers are scored apart because their hints differ
// in kind: the first MoE layer's, given after the last layer of the token
// before, are that token's experts only, which come true far less often
// than the next layer's router applied to this layer's input.
// Every hint is scored against what its layer then routed to, read ahead
// or not, so a rank that starts coming true is trusted again. The streaming
// hierarchy (package tier) and its simulator (package tier/sim) keep one
// each and make the same decisions. The zero value trusts no rank: a rank
// of a layer is read ahead once hintMinScored of its hints were scored and
// at least PrefetchPrecision of them came true.
type HintScore struct {
	prec    [][]float64 // by layer and rank: the moving share of hints that came true
	n       [][]int     // by layer and rank: hints scored, up to 1/hintDecay
	pending []int       // the hint of layer whose Stream has not come yet
	layer   int
	all     bool // TrustAll
	// Scored and True count, by rank (all layers), the hints scored and
	// those that came true (for reports: the decisions use prec).
	Scored, True []int64
}

// TrustAll makes s trust every rank whatever its score: for hints known to
// come true (the simulator's oracle, pipelines checked by hand).
func (s *HintScore) TrustAll() { s.all = true }

// PrefetchPrecision is the share of a rank's hints that must come true for
// its experts to be read ahead.
const PrefetchPrecision = 0.75

// hintDecay is the weight of one layer's outcome in a rank's precision
// once 1/hintDecay of them were scored; before, precision is the plain
// share of those scored.
const hintDecay = 0.1

// hintMinScored is how many hints of a rank of a layer must have been
// scored before it is trusted: with fewer, a lucky start on random routing
// would read ahead experts that are then not used.
const hintMinScored = 5

// Given records the hint for layer (when a hierarchy acts on it), to be
// scored when that layer's experts are known.
func (s *HintScore) Given(layer int, hint []int) {
	s.pending, s.layer = append(s.pending[:0], hint...), layer
}

// Score scores the pending hint, if it was for layer, against the experts
// the layer used.
func (s *HintScore) Score(layer int, used []int) {
	if len(s.pending) == 0 || s.layer != layer || layer < 0 {
		return
	}
	for len(s.prec) <= layer {
		s.prec, s.n = append(s.prec, nil), append(s.n, nil)
	}
	for len(s.prec[layer]) < len(s.pending) {
		s.prec[layer], s.n[layer] = append(s.prec[layer], 0), append(s.n[layer], 0)
	}
	for len(s.Scored) < len(s.pending) {
		s.Scored, s.True = append(s.Scored, 0), append(s.True, 0)
	}
	prec, n := s.prec[layer], s.n[layer]
	for i, x := range s.pending {
		hit := 0.0
		for _, e := range used {
			if e == x {
				hit = 1
				break
			}
		}
		w := hintDecay
		if float64(n[i]) < 1/hintDecay {
			n[i]++
			w = 1 / float64(n[i])
		}
		prec[i] += w * (hit - prec[i])
		s.Scored[i]++
		if hit == 1 {
			s.True[i]++
		}
	}
	s.pending = s.pending[:0]
}

// Trust reports whether experts of rank i of the hint last given are worth
// reading ahead.
func (s *HintScore) Trust(i int) bool {
	if s.all {
		return true
	}
	l := s.layer
	return l >= 0 && l < len(s.prec) && i < len(s.prec[l]) && s.n[l][i] >= hintMinScored && s.prec[l][i] >= PrefetchPrecision
}
