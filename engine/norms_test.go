package engine

import (
	"context"
	"math"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/canon"
)

// Batch.Norms: on a backend.Normaliser, after a step whose sessions asked
// (Session.SetSoftmaxNorm), each returned row's canon.Max and
// canon.ExpSum, next to logits that asking did not change; nil when no
// session asked, and on a backend without one (the CPU reference).
func TestBatchNorms(t *testing.T) {
	c := conformance[0]
	prompt := readReference(t, c.fixture).Prompts[1]
	ref := loadResident(t, c.ckpt, Options{})
	dev := loadResident(t, c.ckpt, Options{Backend: backendtest.NewDevice(1, 0)})
	step := func(m *Model, ask []bool) ([][]float32, []float32) {
		t.Helper()
		lg, b := askedStep(t, m, prompt, ask, (*Session).SetSoftmaxNorm)
		return lg, b.Norms()
	}
	want, _ := step(ref, []bool{false, false})
	if _, n := step(ref, []bool{true, true}); n != nil {
		t.Errorf("the CPU reference gave norms %v, want none", n)
	}
	if _, n := step(dev, []bool{false, false}); n != nil {
		t.Errorf("no session asked, and the device gave norms %v", n)
	}
	got, n := step(dev, []bool{false, true})
	if len(n) != 2*len(got) {
		t.Fatalf("device: %d norms for %d rows", len(n), len(got))
	}
	for i, row := range got {
		if err := backendtest.Same(row, want[i]); err != nil {
			t.Errorf("row %d: logits %v", i, err)
		}
		m := canon.Max(row)
		if s := canon.ExpSum(row, m); math.Float32bits(n[2*i]) != math.Float32bits(m) || math.Float32bits(n[2*i+1]) != math.Float32bits(s) {
			t.Errorf("row %d: norms %v %v, want %v %v", i, n[2*i], n[2*i+1], m, s)
		}
	}
}

// askedStep runs one Batch step of len(ask) new sessions, session i fed
// prompt[:2+i] and asked by set(ask[i]) first (SetSoftmaxNorm,
// SetArgmax), and returns its logits and the Batch (closed at the test's
// end) for what it found beside them.
func askedStep(t *testing.T, m *Model, prompt []int, ask []bool, set func(*Session, bool)) ([][]float32, *Batch) {
	t.Helper()
	b, err := m.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ss := make([]*Session, len(ask))
	toks := make([][]int, len(ask))
	for i, a := range ask {
		ss[i] = m.NewSession()
		t.Cleanup(func() { ss[i].Close() })
		set(ss[i], a)
		toks[i] = prompt[:2+i]
	}
	lg, err := b.Step(context.Background(), ss, toks)
	if err != nil {
		t.Fatal(err)
	}
	return lg, b
}
