package policy

import "testing"

// A hint is scored only by its own layer's experts, layers and ranks apart,
// every hint given is scored (read ahead or not), and the precision that
// decides is the candidates' (not resident when the hint was acted on).
func TestHintScore(t *testing.T) {
	var s HintScore
	for range 30 {
		s.Given(2, []int{5})
		s.Candidate(0)
		s.Score(3, []int{5})
	}
	s.Given(2, []int{5})
	if _, n := s.precision(0); n != 0 {
		t.Fatal("a hint for layer 2 was scored by layer 3's experts")
	}
	for n := range 20 {
		s.Given(1, []int{5, 9})
		s.Candidate(0)
		s.Candidate(1)
		s.Score(1, []int{5, 9})
		s.Given(0, []int{5, 9})
		s.Candidate(0)
		s.Candidate(1)
		if n%2 == 0 {
			s.Given(0, []int{5, 9}) // resident: scored for the reports only
		}
		s.Score(0, []int{7, 9})
	}
	s.Given(1, nil)
	if p, n := s.precision(0); p != 1 || n != 1/hintDecay {
		t.Errorf("layer 1 rank 0, always true: precision %v over %d", p, n)
	}
	s.Given(0, nil)
	if p, _ := s.precision(0); p != 0 {
		t.Errorf("layer 0 rank 0, never true: precision %v", p)
	}
	if p, n := s.precision(1); p != 1 || n != 10 {
		t.Errorf("layer 0 rank 1, always true, a candidate every other hint: precision %v over %d, want 1 over 10", p, n)
	}
	if s.Scored[0] != 40 || s.True[0] != 20 || s.Scored[1] != 40 || s.True[1] != 40 {
		t.Errorf("by rank: %v scored, %v true; want [40 40], [20 40]", s.Scored, s.True)
	}
}

// A rank's precision counts only once hintMinScored of its hints were
// scored.
func TestHintScoreMinimum(t *testing.T) {
	var s HintScore
	for step := range hintMinScored {
		s.Given(2, []int{4})
		s.Candidate(0)
		if _, n := s.precision(0); n != 0 {
			t.Fatalf("precision counts after %d hints", step)
		}
		s.Score(2, []int{4})
	}
	s.Given(2, []int{4})
	if p, n := s.precision(0); p != 1 || n != hintMinScored {
		t.Fatalf("after %d hints, all true: precision %v over %d", hintMinScored, p, n)
	}
}
