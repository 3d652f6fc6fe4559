package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// step gives r the hint for layer, decides every rank, and scores it
// against used; every rank read ahead is measured used (hidden) if used
// names it, else not. It returns the decisions.
func step(r *ReadAhead, layer int, hint, used []int, hidden float64) []Decision {
	r.Given(layer, hint)
	ds := make([]Decision, len(hint))
	places := make([]int, len(hint))
	for i := range hint {
		ds[i], places[i] = r.Decide(i)
	}
	r.Score(layer, used)
	for i, x := range hint {
		if ds[i] != Read && ds[i] != Probe {
			continue
		}
		if slices.Contains(used, x) {
			r.Used(layer, places[i], hidden)
		} else {
			r.Unused(layer, false)
		}
	}
	return ds
}

// A rank is read ahead once its hints come true, one whose hints do not is
// never read ahead (and stops being when they stop), and a rank that
// starts coming true is read ahead again: every hint is scored, read ahead
// or not, so no read is needed to find out.
func TestReadAheadRanks(t *testing.T) {
	var r ReadAhead
	first := -1
	for n := range 30 {
		ds := step(&r, 1, []int{5, 9}, []int{9, 3}, 1) // rank 0 never used, rank 1 always
		if ds[0] != Skip {
			t.Fatalf("hint %d: a rank whose hints never came true: %v", n, ds[0])
		}
		if ds[1] == Read && first < 0 {
			first = n
		}
	}
	if first != hintMinScored {
		t.Fatalf("a rank whose hints all came true was first read ahead at hint %d, want %d", first, hintMinScored)
	}
	lost := -1
	for n := range 10 {
		if ds := step(&r, 1, []int{5, 9}, []int{3}, 1); ds[1] != Read {
			lost = n
			break
		}
	}
	if lost < 0 || lost > 5 {
		t.Fatalf("a rank whose hints stopped coming true was still read ahead after %d misses", lost)
	}
	back := -1
	for n := range 40 {
		if ds := step(&r, 1, []int{5}, []int{5}, 1); ds[0] == Read {
			back = n
			break
		}
	}
	if back < 0 || back > 15 {
		t.Fatalf("a rank whose hints come true again is read ahead again after %d hints, want at most 15", back)
	}
}

// Layers are apart: the first layer's hints (the previous token's experts)
// may seldom come true while the next layer's router's do, and the good
// ones must not be dragged under by the others, nor outcomes of one layer
// back another off.
func TestReadAheadByLayer(t *testing.T) {
	var r ReadAhead
	for range 20 {
		step(&r, 1, []int{5, 9}, []int{5, 9}, 1)
		if ds := step(&r, 0, []int{5, 9}, []int{7, 8}, 1); ds[0] == Read || ds[1] == Read {
			t.Fatal("layer 0's ranks, never true, are read ahead")
		}
	}
	if ds := step(&r, 1, []int{5, 9}, []int{5, 9}, 1); ds[0] != Read || ds[1] != Read {
		t.Fatalf("layer 1's ranks, always true, next to layer 0's, never true: %v", ds)
	}
}

// A rank of random routing that came true 3 times in its first 5 hints is
// not read ahead on that luck (its precision less one standard error is
// below ½), one that came true 5 times in 5 is.
func TestReadAheadLuck(t *testing.T) {
	var r ReadAhead
	for n := range hintMinScored {
		used := []int{4, 6}
		if n%2 == 1 {
			used = []int{6}
		}
		step(&r, 2, []int{4, 6}, used, 1)
	}
	if ds := step(&r, 2, []int{4, 6}, nil, 1); ds[0] != Skip || ds[1] != Read {
		t.Fatalf("after 3 of 5 and 5 of 5 hints came true: %v, want [Skip Read]", ds)
	}
}

// The rule weighs what a read ahead hides at its place: a rank whose hints
// come true 4 times in 5 is read ahead while its reads are in time, held
// back when they hide a fifth of the read — a wasted read then costs more
// than a used one saves — probed once every readAheadProbeEvery hints,
// and read ahead again once the probes find the reads in time. A rank that
// always comes true is read ahead however late: a read ahead that is used
// costs nothing.
func TestReadAheadLate(t *testing.T) {
	for _, always := range []bool{true, false} {
		var r ReadAhead
		hint := []int{1, 2}
		rng := rand.New(rand.NewPCG(1, 2))
		used := func(int) []int {
			switch {
			case rng.IntN(5) != 0:
				return []int{1, 2}
			case always:
				return []int{1}
			}
			return nil
		}
		n := 0
		for ; n < 20; n++ {
			step(&r, 0, hint, used(n), 1)
		}
		if ds := step(&r, 0, hint, used(n), 1); ds[0] != Read || ds[1] != Read {
			t.Fatalf("rank 0 always true %v: in time: %v", always, ds)
		}
		n++
		var probes, held int
		for ; n < 100; n++ {
			ds := step(&r, 0, hint, used(n), 0.2)
			if always && ds[0] != Read && ds[0] != Probe {
				t.Fatalf("hint %d: a rank that always comes true, late: %v", n, ds[0])
			}
			switch ds[1] {
			case Probe:
				probes++
			case BackedOff:
				held++
			}
		}
		t.Logf("rank 0 always true %v: reads a fifth in time: the 4-in-5 rank held back %d times, probed %d, of 80 hints", always, held, probes)
		if held < 30 || probes > 80/readAheadProbeEvery || (!always && probes == 0) {
			t.Fatalf("rank 0 always true %v: reads a fifth in time: the 4-in-5 rank held back %d times, probed %d, of 80 hints",
				always, held, probes)
		}
		back := -1
		for i := range 10 * readAheadProbeEvery {
			if ds := step(&r, 0, hint, used(n), 1); ds[1] == Read {
				back = i
				break
			}
			n++
		}
		if back < 0 || back > 8*readAheadProbeEvery {
			t.Fatalf("rank 0 always true %v: reads in time again, the 4-in-5 rank is read ahead again after %d hints", always, back)
		}
	}
}

// A layer whose reads ahead are lost though their hints come true (copies
// evicted before their step) holds its reads back once they no longer pay
// (after 2 of 2 prior ones), probes after readAheadProbeEvery hints, and
// reads ahead again when the probes are kept.
func TestReadAheadKept(t *testing.T) {
	var r ReadAhead
	hint, used := []int{1, 2, 3, 4}, []int{1, 2, 3, 4}
	for range hintMinScored {
		step(&r, 3, hint, used, 1)
	}
	reads := 0
	for range 4 {
		r.Given(3, hint)
		n := 0
		for i := range hint {
			if d, _ := r.Decide(i); d == Read {
				n++
			}
		}
		r.Score(3, used)
		for range n {
			r.Unused(3, true) // evicted before its step
		}
		reads += n
	}
	if reads != len(hint) || !r.Held(3) {
		t.Fatalf("%d reads ahead lost, hints all true; held %v; want %d reads, then held", reads, r.Held(3), len(hint))
	}
	probe := -1
	for n := range 2 * readAheadProbeEvery {
		ds := step(&r, 3, hint, used, 1)
		if ds[0] == Probe {
			probe = n
			break
		}
		if ds[0] != BackedOff {
			t.Fatalf("hint %d of a layer that holds back: %v", n, ds[0])
		}
	}
	if probe < 0 || probe >= readAheadProbeEvery {
		t.Fatalf("a layer that holds back probed at hint %d, want within %d", probe, readAheadProbeEvery)
	}
	if ds := step(&r, 3, hint, used, 1); ds[0] != Read || r.Held(3) {
		t.Fatalf("probes kept: the next hint %v, held %v", ds, r.Held(3))
	}
}

// TrustAll reads every hinted expert ahead from the first hint.
func TestReadAheadTrustAll(t *testing.T) {
	var r ReadAhead
	r.TrustAll()
	if ds := step(&r, 0, []int{1, 2}, nil, 0); ds[0] != Read || ds[1] != Read {
		t.Fatalf("TrustAll: %v", ds)
	}
}
