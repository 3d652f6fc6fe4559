package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/weights"
	"golang.org/x/sys/unix"
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
	q := "model.layers.0.self_attn.q_proj.weight"

	w := mutate(q, func(v *jnf.TensorView) { v.Shape = []int64{v.Shape[0] / 2, v.Shape[1] * 2} })
	_, err := loadMem(t, w, Options{})
	wantErr(t, err, q, "shape [80 144]", "want [160 72]")

	k := "model.layers.0.self_attn.k_proj.weight" // stored as BF16: same size as F16
	w = mutate(k, func(v *jnf.TensorView) { v.DType = jnf.F16 })
	_, err = loadMem(t, w, Options{})
	wantErr(t, err, k, "dtype F16", "BF16 or F32")

	n := "model.layers.1.linear_attn.conv1d.weight"
	w = mutate(n, func(v *jnf.TensorView) { v.Shape = []int64{v.Shape[0], v.Shape[2]} })
	_, err = loadMem(t, w, Options{})
	wantErr(t, err, n, "want [", "1 3]")

	cfg, w := synth(t, 1)
	delete(w.tensors, "model.layers.2.mlp.shared_expert_gate.weight")
	_, err = loadMem(t, w, Options{})
	wantErr(t, err, "model.layers.2.mlp.shared_expert_gate.weight")

	bad := *cfg
	bad.TopK = bad.Experts + 1
	wantErr(t, checkConfig(&bad), "num_experts_per_tok")
}

// badExpert makes expert e of layer l store gate and up transposed.
func badExpert(w *memWeights, l, e int) *memWeights {
	out := &memWeights{config: w.config, tensors: w.tensors, experts: map[[2]int][3]jnf.TensorView{}}
	for id, p := range w.experts {
		out.experts[id] = p
	}
	p := out.experts[[2]int{l, e}]
	g, u := p[0], p[1]
	g.Shape, u.Shape = []int64{g.Shape[1], g.Shape[0]}, []int64{u.Shape[1], u.Shape[0]}
	out.experts[[2]int{l, e}] = [3]jnf.TensorView{g, u, p[2]}
	return out
}

func TestExpertErrors(t *testing.T) {
	cfg, w := synth(t, 1)
	_, err := loadMem(t, badExpert(w, 2, 5), Options{CheckExperts: true})
	wantErr(t, err, "layer 2 expert 5 gate", "shape [72 20]", "want [20 72]")

	// Without CheckExperts a bad expert is found when a token is routed to
	// it: make each expert of layer 2 bad in turn until one is used.
	routed := []int{1, 2, 3}
	for e := 0; e < cfg.Experts; e++ {
		m3, err := loadMem(t, badExpert(w, 2, e), Options{})
		if err != nil {
			t.Fatal(err)
		}
		s3 := m3.NewSession()
		_, err = s3.Forward(routed, false)
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

// lying serves genuine verified values of a checkpoint, but not always the
// ones asked for.
type lying struct {
	ck     *weights.Checkpoint
	other  *weights.Checkpoint // serves these when set
	rename map[string]string   // tensor asked for → tensor served
	shift  int                 // expert asked for → expert+shift
}

func (l *lying) Tensor(name string) (weights.VerifiedTensor, error) {
	src := l.ck
	if l.other != nil {
		src = l.other
	}
	if n, ok := l.rename[name]; ok {
		name = n
	}
	return src.Tensor(name)
}

func (l *lying) Expert(layer, e int) (weights.VerifiedExpert, error) {
	return l.ck.Expert(layer, (e+l.shift)%l.ck.Config().Experts)
}

// TestEngineRefusesValuesItDidNotAskFor: even a source that can only hand
// out genuine verified values (minted by a checkpoint) cannot make the
// engine compute with the wrong tensor, the wrong expert or another model.
func TestEngineRefusesValuesItDidNotAskFor(t *testing.T) {
	cfg, w := synth(t, 1)
	ck := w.open(t)
	_, w2 := synthModel(t, synthCases[1].json, 77, nil)
	other := w2.open(t)
	if ck.Root().Equal(other.Root()) {
		t.Fatal("two different models with the same root")
	}

	_, err := loadFrom(cfg, ck.Root(), &lying{ck: ck, rename: map[string]string{"model.norm.weight": "model.layers.0.input_layernorm.weight"}}, Options{})
	wantErr(t, err, "asked for tensor model.norm.weight, got model.layers.0.input_layernorm.weight")

	_, err = loadFrom(cfg, ck.Root(), &lying{ck: ck, other: other}, Options{})
	wantErr(t, err, "comes from the checkpoint with root "+other.Root().Hex(), "the model is "+ck.Root().Hex())

	_, err = loadFrom(cfg, ck.Root(), &lying{ck: ck, shift: 1}, Options{CheckExperts: true})
	wantErr(t, err, "asked for layer 0 expert 0, got layer 0 expert 1")

	// At decode time too (no CheckExperts).
	m, err := loadFrom(cfg, ck.Root(), &lying{ck: ck, shift: 3}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.NewSession().Forward([]int{1, 2, 3}, false)
	wantErr(t, err, "asked for layer", "got layer")
}

// TestScrubFindsAFlippedResidentBit flips one bit in the memory behind a
// resident tensor, which Model.Scrub names, and behind a routed expert kept
// resident: the engine keeps none, so that copy is the RAM tier's (the
// source the runner gives it), whose scrub names it.
func TestScrubFindsAFlippedResidentBit(t *testing.T) {
	_, w := synth(t, 1)
	ck := w.open(t)
	h := ramTier(t, ck, tier.Auto)
	m, err := Load(ck, Options{Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSession().Forward([]int{1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
	n, err := m.Scrub()
	if err != nil || n == 0 {
		t.Fatalf("clean model: scrubbed %d bytes, %v", n, err)
	}
	flip := func(s string) { unsafe.Slice(unsafe.StringData(s), len(s))[len(s)/2] ^= 1 }
	var target weights.VerifiedTensor
	for _, r := range m.resident {
		if r.Name() == "model.layers.1.linear_attn.in_proj_qkv.weight" {
			target = r
		}
	}
	flip(target.View().Data())
	_, err = m.Scrub()
	wantErr(t, err, "model.layers.1.linear_attn.in_proj_qkv.weight", "resident copy", "digest mismatch")
	flip(target.View().Data())
	if _, err := m.Scrub(); err != nil {
		t.Fatalf("restored: %v", err)
	}

	// An expert the forward used, resident in the RAM tier: its copy is
	// sealed read-only, so the flip unseals its pages first (as a memory
	// fault would not need to).
	if n, err := h.ScrubAll(); err != nil || n == 0 {
		t.Fatalf("clean tier: scrubbed %d bytes, %v", n, err)
	}
	var ve weights.VerifiedExpert
	if err := h.Stream(context.Background(), m.firstMoE, []int{0}, consumeFunc(func(_ int, p expertstream.Placed, _ ledger.Tier) error {
		ve = p.Host
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	up := ve.Up().Values().Data()
	page := unix.Getpagesize()
	mid := unsafe.Add(unsafe.Pointer(unsafe.StringData(up)), len(up)/2)
	mem := unsafe.Slice((*byte)(unsafe.Add(mid, -int(uintptr(mid)%uintptr(page)))), page)
	if err := unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	flip(up)
	unix.Mprotect(mem, unix.PROT_READ)
	_, err = h.ScrubAll()
	wantErr(t, err, fmt.Sprintf("model.layers.%d.mlp.experts.%d", ve.ID().Layer, ve.ID().Expert))
	if !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("tier scrub: %v, want a verification error", err)
	}
}

// consumeFunc is an ExpertConsumer of a function.
type consumeFunc func(e int, p expertstream.Placed, origin ledger.Tier) error

func (f consumeFunc) Consume(e int, p expertstream.Placed, origin ledger.Tier) error {
	return f(e, p, origin)
}

func TestForwardErrors(t *testing.T) {
	cfg, w := synth(t, 1)
	m, err := loadMem(t, w, Options{})
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

// TestForwardStopsWhenCancelled: a cancelled context stops Forward between
// layers with the context's error, and the session must then be Reset.
func TestForwardStopsWhenCancelled(t *testing.T) {
	_, w := synth(t, 1)
	m, err := loadMem(t, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := m.NewSession()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.ForwardContext(ctx, []int{1, 2, 3}, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Forward: %v", err)
	}
	if st := m.Stats(); st.Tokens != 0 {
		t.Errorf("a cancelled Forward ran %d tokens", st.Tokens)
	}
	_, err = s.Forward([]int{1}, false)
	wantErr(t, err, "Reset")
	s.Reset()
	if _, err := s.Forward([]int{1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
}

func TestLoadStopsWhenCancelled(t *testing.T) {
	_, w := synth(t, 1)
	ck := w.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LoadContext(ctx, ck, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v", err)
	}
	if nt, _ := ck.Served(); nt != 0 {
		t.Errorf("a cancelled load read %d tensors", nt)
	}
}

// stray delivers, before the experts it was asked for, one that no token
// was routed to.
type stray struct{ ck *weights.Checkpoint }

func (s *stray) Stream(ctx context.Context, layer int, experts []int, c ExpertConsumer) error {
	e := 0
	for slices.Contains(experts, e) {
		e++
	}
	for _, e := range append([]int{e}, experts...) {
		ve, err := s.ck.Expert(layer, e)
		if err != nil {
			return err
		}
		if err := c.Consume(e, expertstream.OnHost(ve), ledger.TierStorage); err != nil {
			return err
		}
	}
	return nil
}

// TestEngineRefusesAnExpertNoTokenWasRoutedTo: an expert source cannot slip
// in an expert the step did not route to.
func TestEngineRefusesAnExpertNoTokenWasRoutedTo(t *testing.T) {
	_, w := synth(t, 1)
	ck := w.open(t)
	m, err := Load(ck, Options{Experts: &stray{ck: ck}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.NewSession().Forward([]int{1}, false)
	wantErr(t, err, "the expert source delivered expert", "which no token was routed to")
}

// TestBatchStepErrors: a batch step names what is wrong with its sessions.
func TestBatchStepErrors(t *testing.T) {
	_, w := synth(t, 1)
	m, err := loadMem(t, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := loadMem(t, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s0, s1 := m.NewSession(), m.NewSession()
	ctx := context.Background()
	_, err = b.Step(ctx, nil, nil)
	wantErr(t, err, "batch step of 0 sessions with 0 token lists")
	_, err = b.Step(ctx, []*Session{s0, s1}, [][]int{{1}})
	wantErr(t, err, "batch step of 2 sessions with 1 token lists")
	_, err = b.Step(ctx, []*Session{s0, other.NewSession()}, [][]int{{1}, {2}})
	wantErr(t, err, "session 1 belongs to another model")
	_, err = b.Step(ctx, []*Session{s0, s1, s0}, [][]int{{1}, {2}, {3}})
	wantErr(t, err, "session 2 is also session 0")
	_, err = b.Step(ctx, []*Session{s0, s1}, [][]int{{1}, nil})
	wantErr(t, err, "batch step, session 1")
	// The sessions are untouched by the refused steps.
	if _, err := b.Step(ctx, []*Session{s0, s1}, [][]int{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
}

// badRouter is a backend whose Route names an expert out of range.
type badRouter struct{ backend.Backend }

type badRouterQueue struct{ backend.Queue }

func (b badRouter) NewQueue() (backend.Queue, error) {
	q, err := b.Backend.NewQueue()
	return badRouterQueue{q}, err
}

func (q badRouterQueue) Route(idx []int32, w, logits backend.Buf, T, E, k int, renorm bool) {
	q.Queue.Route(idx, w, logits, T, E, k, renorm)
	idx[len(idx)-1] = int32(E)
}

// TestEngineRefusesARouteOutOfRange: a backend's router cannot make the
// engine evaluate an expert the layer does not have.
func TestEngineRefusesARouteOutOfRange(t *testing.T) {
	cfg, w := synth(t, 1)
	m, err := loadMem(t, w, Options{Backend: badRouter{cpu.New(1)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.NewSession().Forward([]int{1, 2}, false)
	wantErr(t, err, fmt.Sprintf("router chose expert %d of %d", cfg.Experts, cfg.Experts))
}
