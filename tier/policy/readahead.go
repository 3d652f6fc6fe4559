package policy

import "math"

// ReadAhead decides which hinted experts a hierarchy reads ahead, and
// measures whether the reads it started paid. The streaming hierarchy
// (package tier) and its simulator (package tier/sim) keep one each and
// make the same calls in the same order, so they make the same decisions.
//
// # The rule
//
// A read ahead of a hinted expert is worth starting when what it is
// expected to save is more than what it is expected to cost, both in units
// of one expert's read:
//
//	p · h  >  (1 − p) · 1
//
// p is the probability that the step the hint was for uses the expert: the
// precision of the hint's rank in its layer over the hinted experts that
// were not resident (HintScore, which scores every such hint against what
// its layer then used, read ahead or not, so it measures p for free and
// comes back by itself when routing becomes predictable), less one
// standard error of that estimate (√(p(1−p)/n), n the hints scored, at
// most 10), so that a rank of random routing that came true 3 times in its
// first 5 is not read ahead on that luck; times kept (below).
//
// h is the share of its read that a read ahead the step used had done
// before the step started: what it saved, the wait the step would have
// spent on that read. It is 1 for a copy verified by then; for one still
// being read, the part of its read (a reader starting it to verified) done
// by then, 0 if no reader had started it. It is measured by the read's
// place among its hint's reads ahead (the first one, the second, …), layer
// by layer, as a moving mean: a hint's reads ahead queue behind the reads
// the current step needs and are served in order, so the first ones fill
// the time the storage would otherwise be idle before the next step, and
// the later ones, still queued when it starts, hide nothing. The rule then
// caps a hint's reads ahead at the places that pay.
//
// A read ahead the step did not use cost one whole read: the storage time
// and the hash that needed reads queued behind. That is the most it can
// cost, so the rule errs on the side of not reading: with reads ahead in
// time (h = 1) a rank is read ahead once more than half of its hints come
// true (by the estimate less its error), with h = ½ once more than two in
// three do, and never as h → 0 (storage too busy for reads ahead to be
// served before their step).
//
// # What the hints do not see, and probes
//
// The hints' precision is the probability that a hint comes true; a read
// ahead is used only if its copy is still there then. kept, the layer's
// moving share of its reads ahead whose hint came true that the step used,
// is what the hints do not see: copies evicted before their step (a RAM
// tier too small for the reads ahead, other sessions' reads). Both kept
// and h start at 1, as if two reads ahead had been measured in time and
// used, so that one loss does not hold a layer back.
//
// Each read ahead is measured at the first Stream of its layer after it was
// issued (Used, Unused). A hinted expert whose rank pays with kept = h = 1
// but not with the layer's measured kept and h at its place is held back
// (Decide says BackedOff). A layer that held something back in each of
// readAheadProbeEvery hints in a row probes: its next hint reads ahead
// every rank that pays with kept = h = 1, at every place, so that kept and
// h are measured again and the layer reads more ahead once the storage has
// room or its copies stay. Hints that come true again need no probe:
// they are scored read ahead or not.
//
// The zero value reads nothing ahead until hintMinScored hints of a rank
// were scored.
type ReadAhead struct {
	HintScore
	layers []readAheadLayer
	probe  bool // the hint last given is a probe
	next   int  // the place of the next read ahead of the hint last given
	all    bool // TrustAll
}

type readAheadLayer struct {
	hidden []float64 // by place: the moving mean of h over used reads ahead
	nh     []int
	kept   float64 // the moving share of reads ahead whose hint came true that were used
	nk     int
	since  int  // hints in a row that held something back
	held   bool // the hint last given held something back
}

// Decision is what ReadAhead.Decide says of one hinted expert.
type Decision int

const (
	// Skip: its rank does not pay (p·h ≤ 1 − p even with h = 1), or not
	// hintMinScored of its hints were scored yet.
	Skip Decision = iota
	// Read: read it ahead.
	Read
	// Probe: read it ahead, as a probe of a layer that held reads back.
	Probe
	// BackedOff: its rank pays with reads in time that are kept, but not
	// with the layer's measured kept and h at the place it would take.
	BackedOff
)

// readAheadPrior is how many reads ahead in time and used kept and h
// start as if measured.
const readAheadPrior = 2

// readAheadProbeEvery is how many hints of a layer in a row must have held
// something back before the next one probes.
const readAheadProbeEvery = 16

// readAheadDecay is the weight of one outcome in a layer's moving means
// once 1/readAheadDecay were measured; before, they are plain means.
const readAheadDecay = 0.1

// TrustAll makes r read every hinted expert ahead, whatever its rank's
// score and its layer's outcomes: for hints known to come true (the
// simulator's oracle, pipelines checked by hand).
func (r *ReadAhead) TrustAll() { r.all = true }

func (r *ReadAhead) layer(l int) *readAheadLayer {
	for len(r.layers) <= l {
		r.layers = append(r.layers, readAheadLayer{kept: 1, nk: readAheadPrior})
	}
	return &r.layers[l]
}

// hiddenAt is layer L's h at place j.
func (L *readAheadLayer) hiddenAt(j int) float64 {
	if j < len(L.nh) {
		return L.hidden[j]
	}
	return 1
}

// Given records the hint for layer when a hierarchy acts on it, before
// Decide for its experts.
func (r *ReadAhead) Given(layer int, hint []int) {
	r.HintScore.Given(layer, hint)
	r.probe, r.next = false, 0
	if layer < 0 || len(hint) == 0 {
		return
	}
	L := r.layer(layer)
	if !L.held {
		L.since = 0
	} else if L.since++; L.since >= readAheadProbeEvery {
		r.probe, L.since = true, 0
	}
	L.held = false
}

// pays is the rule: p·h > 1 − p.
func pays(p, h float64) bool { return p*h > 1-p }

// Decide says whether to read ahead the hinted expert of rank i of the hint
// last given (called in rank order for those not resident: it makes each a
// Candidate), and for a read its place among the hint's reads ahead, to
// give back to Outcome.
func (r *ReadAhead) Decide(i int) (d Decision, place int) {
	r.Candidate(i)
	if r.all {
		r.next++
		return Read, r.next - 1
	}
	p, n := r.precision(i)
	if n == 0 {
		return Skip, 0
	}
	p -= math.Sqrt(p * (1 - p) / float64(n)) // less one standard error of the estimate
	if !pays(p, 1) {
		return Skip, 0
	}
	L := r.layer(r.HintScore.layer)
	if r.probe {
		r.next++
		return Probe, r.next - 1
	}
	if !pays(p*L.kept, L.hiddenAt(r.next)) {
		L.held = true
		return BackedOff, 0
	}
	r.next++
	return Read, r.next - 1
}

// Used records a read ahead for layer at place (Decide's) that the first
// Stream of layer after it was issued used, with hidden the share of its
// read done before that Stream started (1 if it was verified by then).
func (r *ReadAhead) Used(layer, place int, hidden float64) {
	if layer < 0 || place < 0 {
		return
	}
	L := r.layer(layer)
	for len(L.hidden) <= place {
		L.hidden, L.nh = append(L.hidden, 1), append(L.nh, readAheadPrior)
	}
	L.hidden[place] = mean(L.hidden[place], min(max(hidden, 0), 1), &L.nh[place])
	L.kept = mean(L.kept, 1, &L.nk)
}

// Unused records a read ahead for layer that the first Stream of layer
// after it was issued did not use: its hint did not come true, or it did
// and the copy was gone (evicted first).
func (r *ReadAhead) Unused(layer int, hintTrue bool) {
	if layer < 0 || !hintTrue {
		return // a wrong hint: the rule's p has it
	}
	L := r.layer(layer)
	L.kept = mean(L.kept, 0, &L.nk)
}

// mean moves m toward x: the plain mean of the first 1/readAheadDecay
// values (n counts them), then a moving one.
func mean(m, x float64, n *int) float64 {
	w := readAheadDecay
	if float64(*n) < 1/readAheadDecay {
		*n++
		w = 1 / float64(*n)
	}
	return m + w*(x-m)
}

// Held reports whether layer's hint last given held something back.
func (r *ReadAhead) Held(layer int) bool {
	return layer >= 0 && layer < len(r.layers) && r.layers[layer].held
}
