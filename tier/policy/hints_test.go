package policy

import "testing"

// A rank is trusted once its hints come true, one whose hints do not is
// never trusted (and stops being trusted when they stop), and a rank that
// starts coming true is trusted again: every hint is scored, read ahead
// or not.
func TestHintScore(t *testing.T) {
	var s HintScore
	if s.Trust(0) || s.Trust(7) {
		t.Fatal("the zero HintScore trusts a rank it never measured")
	}
	trusted := -1
	for step := range 30 {
		s.Given(1, []int{5, 9}) // rank 0 never used, rank 1 always
		s.Score(1, []int{9, 3})
		if s.Trust(0) {
			t.Fatalf("step %d: a rank whose hints never came true is trusted", step)
		}
		if s.Trust(1) && trusted < 0 {
			trusted = step
		}
	}
	if trusted < 0 || trusted > 14 {
		t.Fatalf("a rank whose hints all came true was trusted at step %d, want within 15", trusted)
	}
	lost := -1
	for step := range 10 {
		s.Given(1, []int{5, 9})
		s.Score(1, []int{3})
		if !s.Trust(1) {
			lost = step
			break
		}
	}
	if lost < 0 || lost > 4 {
		t.Fatalf("a rank whose hints stopped coming true was still trusted after %d misses", lost)
	}
	// A hint is scored only by its own layer's experts.
	var o HintScore
	for range 30 {
		o.Given(2, []int{5})
		o.Score(3, []int{5})
	}
	if o.Trust(0) {
		t.Fatal("a hint for layer 2 was scored by layer 3's experts")
	}
	back := -1
	for step := range 40 {
		s.Given(1, []int{5})
		s.Score(1, []int{5})
		if s.Trust(0) {
			back = step
			break
		}
	}
	if back < 0 {
		t.Fatal("a rank whose hints come true again is never trusted again")
	}
}

// Layers are scored apart: the first layer's hints (the previous token's
// experts) may seldom come true while the next layer's router's do, and
// the good ones must not be dragged under the threshold by the others.
func TestHintScoreByLayer(t *testing.T) {
	var s HintScore
	for step := range 20 {
		s.Given(1, []int{5, 9})
		s.Score(1, []int{5, 9})
		s.Given(0, []int{5, 9})
		if step >= hintMinScored && s.Trust(0) {
			t.Fatalf("step %d: layer 0's rank 0, never true, is trusted", step)
		}
		s.Score(0, []int{7, 8})
	}
	s.Given(1, []int{5, 9})
	if !s.Trust(0) || !s.Trust(1) {
		t.Fatal("layer 1's ranks, always true, are not trusted next to layer 0's, never true")
	}
	if s.Scored[0] != 40 || s.True[0] != 20 {
		t.Errorf("rank 0: %d scored, %d true; want 40, 20", s.Scored[0], s.True[0])
	}
}

// A rank is trusted only once hintMinScored of its hints were scored: a
// lucky first hint on random routing reads nothing ahead.
func TestHintScoreMinimum(t *testing.T) {
	var s HintScore
	for step := range hintMinScored {
		s.Given(2, []int{4})
		if s.Trust(0) {
			t.Fatalf("trusted after %d hints", step)
		}
		s.Score(2, []int{4})
	}
	s.Given(2, []int{4})
	if !s.Trust(0) {
		t.Fatalf("not trusted after %d hints, all true", hintMinScored)
	}
}
