package policy

// HintScore measures how often the engine's prefetch hints come true, layer
// by layer and rank by rank (its i-th hinted expert of a layer: the engine
// lists the next layer's router's choices first, then the experts the
// previous token used): the probability, in ReadAhead's rule, that a read
// ahead of that rank is used. Layers are scored apart because their hints
// differ in kind: the first MoE layer's, given after the last layer of the
// token before, are that token's experts only, which come true far less
// often than the next layer's router applied to this layer's input.
// Every hint is scored against what its layer then routed to, read ahead
// or not, so a rank that starts coming true is read ahead again without a
// read to find out. The precision that decides is of the hinted experts
// that were candidates for a read ahead (Candidate: not resident when the
// hint was acted on): with routing that keeps a stable half resident, the
// stable experts' ranks come true nearly always, but when one of them is
// not resident it is mostly because the hint named a wrong one. A rank's
// precision counts once hintMinScored of its candidates were scored.
type HintScore struct {
	prec    [][]float64 // by layer and rank: the moving share of hints that came true
	n       [][]int     // by layer and rank: hints scored, up to 1/hintDecay
	pending []int       // the hint of layer whose Stream has not come yet
	cand    []bool      // by rank of pending: a candidate for a read ahead
	layer   int
	// Scored and True count, by rank (all layers), the hints scored and
	// those that came true, candidates or not (for reports: the decisions
	// use prec).
	Scored, True []int64
}

// hintDecay is the weight of one layer's outcome in a rank's precision
// once 1/hintDecay of them were scored; before, precision is the plain
// share of those scored.
const hintDecay = 0.1

// hintMinScored is how many hints of a rank of a layer must have been
// scored before its precision counts: with fewer, a lucky start on random
// routing would read ahead experts that are then not used.
const hintMinScored = 5

// Given records the hint for layer (when a hierarchy acts on it), to be
// scored when that layer's experts are known.
func (s *HintScore) Given(layer int, hint []int) {
	s.pending, s.layer = append(s.pending[:0], hint...), layer
	s.cand = append(s.cand[:0], make([]bool, len(hint))...)
}

// Candidate marks rank i of the hint last given as a candidate for a read
// ahead (not resident), so that its precision is scored.
func (s *HintScore) Candidate(i int) {
	if i >= 0 && i < len(s.cand) {
		s.cand[i] = true
	}
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
		s.Scored[i]++
		if hit == 1 {
			s.True[i]++
		}
		if !s.cand[i] {
			continue
		}
		w := hintDecay
		if float64(n[i]) < 1/hintDecay {
			n[i]++
			w = 1 / float64(n[i])
		}
		prec[i] += w * (hit - prec[i])
	}
	s.pending = s.pending[:0]
}

// precision is the share of candidates of rank i of the hint last given's
// layer that came true, and how many were scored (up to 1/hintDecay); n is
// 0 until hintMinScored were.
func (s *HintScore) precision(i int) (p float64, n int) {
	l := s.layer
	if l < 0 || l >= len(s.prec) || i >= len(s.prec[l]) || s.n[l][i] < hintMinScored {
		return 0, 0
	}
	return s.prec[l][i], s.n[l][i]
}
