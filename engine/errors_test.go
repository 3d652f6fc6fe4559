package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
)

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestLoadErrorsNameTheTensor(t *testing.T) {
	mutate := func(name string, f func(v *jnf.TensorView)) *memWeights {
		_, w := synth(t, 1)
		v := w.tensors[name]
		f(&v)
		w.tensors[name] = v
		return w
	}
	cfg, _ := synth(t, 1)
	q := "model.layers.0.self_attn.q_proj.weight"

	w := mutate(q, func(v *jnf.TensorView) { v.Shape = []int64{v.Shape[0] / 2, v.Shape[1] * 2} })
	_, err := Load(cfg, w, Options{})
	wantErr(t, err, q, "shape [80 144]", "want [160 72]")

	k := "model.layers.0.self_attn.k_proj.weight" // stored as BF16: same size as F16
	w = mutate(k, func(v *jnf.TensorView) { v.DType = jnf.F16 })
	_, err = Load(cfg, w, Options{})
	wantErr(t, err, k, "dtype F16", "BF16 or F32")

	n := "model.layers.1.linear_attn.conv1d.weight"
	w = mutate(n, func(v *jnf.TensorView) { v.Shape = []int64{v.Shape[0], v.Shape[2]} })
	_, err = Load(cfg, w, Options{})
	wantErr(t, err, n, "want [", "1 3]")

	_, w = synth(t, 1)
	delete(w.tensors, "model.layers.2.mlp.shared_expert_gate.weight")
	_, err = Load(cfg, w, Options{})
	wantErr(t, err, "model.layers.2.mlp.shared_expert_gate.weight")

	bad := *cfg
	bad.TopK = bad.Experts + 1
	_, err = Load(&bad, w, Options{})
	wantErr(t, err, "num_experts_per_tok")
}

// badExperts serves one expert with a wrong shape.
type badExperts struct {
	*memWeights
	layer, expert int
}

func (b *badExperts) Expert(l, e int) (*attest.VerifiedExpert, error) {
	if l != b.layer || e != b.expert {
		return b.memWeights.Expert(l, e)
	}
	p := b.experts[[2]int{l, e}]
	g, u, d := p[0], p[1], p[2]
	g.Shape, u.Shape = []int64{g.Shape[1], g.Shape[0]}, []int64{u.Shape[1], u.Shape[0]}
	rec := append(append(append([]byte(nil), g.Data...), u.Data...), d.Data...)
	return attest.VerifyExpert(attest.ExpertID{Layer: l, Expert: e}, rec, g, u, d, jnf.SHA256Bytes(rec))
}

func TestExpertErrors(t *testing.T) {
	cfg, w := synth(t, 1)
	_, err := Load(cfg, &badExperts{w, 2, 5}, Options{CheckExperts: true})
	wantErr(t, err, "layer 2 expert 5 gate", "shape [72 20]", "want [20 72]")

	// Without CheckExperts a bad expert is found when a token is routed to
	// it: make each expert of layer 2 bad in turn until one is used.
	routed := []int{1, 2, 3}
	for e := 0; e < cfg.Experts; e++ {
		be := &badExperts{w, 2, e}
		m3, _ := Load(cfg, be, Options{})
		s3 := m3.NewSession()
		_, err := s3.Forward(routed, false)
		if err == nil {
			continue
		}
		wantErr(t, err, fmt.Sprintf("layer 2 expert %d gate", e), "shape [72 20], want [20 72]")
		_, err = s3.Forward(routed, false)
		wantErr(t, err, "Reset")
		s3.Reset()
		if s3.Len() != 0 {
			t.Errorf("Len after Reset = %d", s3.Len())
		}
		return
	}
	t.Fatalf("no expert of layer 2 was used for token %v", routed)
}

func TestForwardErrors(t *testing.T) {
	cfg, w := synth(t, 1)
	m, err := Load(cfg, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := m.NewSession()
	_, err = s.Forward([]int{1, cfg.Vocab}, false)
	wantErr(t, err, fmt.Sprint(cfg.Vocab), "index 1", "vocabulary")
	_, err = s.Forward([]int{-1}, false)
	wantErr(t, err, "-1")
	_, err = s.Forward(nil, true)
	wantErr(t, err, "no tokens")
	if s.Len() != 0 {
		t.Errorf("rejected input changed the session: Len %d", s.Len())
	}
	long := make([]int, cfg.MaxPositions+1)
	_, err = s.Forward(long, false)
	wantErr(t, err, fmt.Sprint(cfg.MaxPositions), "positions")
}
