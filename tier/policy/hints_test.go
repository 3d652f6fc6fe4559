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
