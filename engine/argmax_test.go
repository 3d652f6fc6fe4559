package engine

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/canon"
)

// Batch.Argmaxes: on a backend.Argmaxer, after a step whose sessions asked
// (Session.SetArgmax), each returned row's canon.Argmax, next to logits
// that asking did not change; nil when no session asked, and on a backend
// without one (the CPU reference).
func TestBatchArgmaxes(t *testing.T) {
	c := conformance[0]
	prompt := readReference(t, c.fixture).Prompts[1]
	ref := loadResident(t, c.ckpt, Options{})
	dev := loadResident(t, c.ckpt, Options{Backend: backendtest.NewDevice(1, 0)})
	step := func(m *Model, ask []bool) ([][]float32, []int32) {
		t.Helper()
		lg, b := askedStep(t, m, prompt, ask, (*Session).SetArgmax)
		return lg, b.Argmaxes()
	}
	want, _ := step(ref, []bool{false, false, false})
	if _, a := step(ref, []bool{true, true, true}); a != nil {
		t.Errorf("the CPU reference gave argmaxes %v, want none", a)
	}
	if _, a := step(dev, []bool{false, false, false}); a != nil {
		t.Errorf("no session asked, and the device gave argmaxes %v", a)
	}
	got, a := step(dev, []bool{false, true, false})
	if len(a) != len(got) {
		t.Fatalf("device: %d argmaxes for %d rows", len(a), len(got))
	}
	for i, row := range got {
		if err := backendtest.Same(row, want[i]); err != nil {
			t.Errorf("row %d: logits %v", i, err)
		}
		if w := canon.Argmax(row); int(a[i]) != w {
			t.Errorf("row %d: argmax %d, want %d", i, a[i], w)
		}
	}
}

// A greedy Decoder asks its session for the argmax, and EmitRow takes the
// backend's: it emits the id given (here one that is not the logits'
// argmax, which only a pick that made no pass of its own can return),
// refuses one outside the vocabulary, and takes −1 as the NaN it stands
// for; a sampled Decoder asks for none and ignores it.
func TestEmitRowTakesTheBackendsArgmax(t *testing.T) {
	m := load(t, "qwen35moe-dev-c/checkpoint", 1, false)
	V := m.Config().Vocab
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(i%97) / 8
	}
	host := canon.Argmax(logits)
	other := (host + 1) % V
	newDec := func(g GenOptions) *Decoder {
		t.Helper()
		s := m.NewSession()
		t.Cleanup(func() { s.Close() })
		d, err := NewDecoder(s, []int{1, 2}, g)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newDec(GenOptions{MaxTokens: 8})
	if !d.Session().argmax {
		t.Error("a greedy decoder did not ask its session for the argmax")
	}
	if tok, _, err := d.EmitRow(logits, nil, 0); err != nil || tok != host {
		t.Errorf("no argmaxes: token %d, %v; want the host's %d", tok, err, host)
	}
	if tok, _, err := d.EmitRow(logits, []int32{int32(host), int32(other)}, 1); err != nil || tok != other {
		t.Errorf("the backend's argmax %d: token %d, %v", other, tok, err)
	}
	for _, a := range []int32{int32(V), -2, math.MaxInt32} {
		if _, _, err := d.EmitRow(logits, []int32{a}, 0); err == nil || !strings.Contains(err.Error(), "argmax") {
			t.Errorf("the backend's argmax %d of %d logits: %v, want an error naming it", a, V, err)
		}
	}
	if _, _, err := d.EmitRow(logits, []int32{-1}, 0); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("argmax −1: %v, want the NaN error", err)
	}

	g := GenOptions{MaxTokens: 8, Temperature: 0.7, Seed: 3}
	sd := newDec(g)
	if sd.Session().argmax {
		t.Error("a sampled decoder asked its session for the argmax")
	}
	wantTok, err := newSampler(g).Pick(slices.Clone(logits))
	if err != nil {
		t.Fatal(err)
	}
	if tok, _, err := sd.EmitRow(logits, []int32{int32(other)}, 0); err != nil || tok != wantTok {
		t.Errorf("sampled: token %d, %v; want %d, the argmax given being no part of it", tok, err, wantTok)
	}
}
