package engine

import (
	"context"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/weights"
)

// TestLedgerRoutingIsChunkInvariant: the routing digest of a sequence does
// not depend on how it is fed (one prefill, token by token, random chunks),
// every position of every MoE layer is committed with the configured k,
// and the experts' token counts add up.
func TestLedgerRoutingIsChunkInvariant(t *testing.T) {
	for i := range synthCases {
		cfg, w := synth(t, i)
		ck := w.open(t)
		m, err := Load(ck, Options{Experts: ramTier(t, ck, 1<<20)})
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int, 40)
		for j := range toks {
			toks[j] = (j*37 + 11) % cfg.Vocab
		}
		moe := 0
		for _, sp := range cfg.Sparse {
			if sp {
				moe++
			}
		}
		var digests []string
		for _, chunks := range [][]int{{len(toks)}, ones(len(toks)), randomChunks(len(toks), 3)} {
			s := m.NewSession()
			l := ledger.New(ck.Root(), cfg.Layers, cfg.TopK, ledger.ModeExact)
			s.SetLedger(l)
			off := 0
			for _, n := range chunks {
				if _, err := s.Forward(toks[off:off+n], false); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			sum := l.Summary()
			digests = append(digests, sum.RoutingDigest)
			if sum.RoutingEntries != int64(len(toks)*moe) || !sum.KExact() || sum.TopK != cfg.TopK {
				t.Errorf("%s: %d entries for %d positions × %d MoE layers, k exact %v", synthCases[i].name, sum.RoutingEntries, len(toks), moe, sum.KExact())
			}
			var slots int64
			for _, e := range sum.Experts {
				slots += e.Tokens
			}
			if want := int64(len(toks) * moe * cfg.TopK); slots != want {
				t.Errorf("%s: experts saw %d token slots, want %d", synthCases[i].name, slots, want)
			}
		}
		if digests[0] != digests[1] || digests[0] != digests[2] {
			t.Errorf("%s: routing digests by chunking %v", synthCases[i].name, digests)
		}
	}
}

// TestLedgerPerSession: concurrent sessions keep their own ledgers, equal
// to the same runs alone, and Generate's logits chain is golden's.
func TestLedgerPerSession(t *testing.T) {
	_, w := synth(t, 1)
	ck := w.open(t)
	m, err := Load(ck, Options{Experts: ramTier(t, ck, tier.Auto)})
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{1, 2, 3}, {9, 8}, {4, 4, 4, 4}}
	run := func(p []int) (ledger.Summary, [][]float32) {
		s := m.NewSession()
		l := ledger.New(ck.Root(), m.cfg.Layers, m.cfg.TopK, ledger.ModeExact)
		s.SetLedger(l)
		var rows [][]float32
		_, err := Generate(context.Background(), s, p, GenOptions{MaxTokens: 5, Temperature: 0.9, Seed: 3}, func(_ int, lg []float32) error {
			rows = append(rows, append([]float32(nil), lg...))
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		return l.Summary(), rows
	}
	solo := make([]ledger.Summary, len(prompts))
	for i, p := range prompts {
		var rows [][]float32
		solo[i], rows = run(p)
		chain := golden.Chain(ck.Root().Sum, &golden.Run{PromptTokens: p, Logits: rows})
		if solo[i].LogitsChain != chain[len(chain)-1] {
			t.Errorf("prompt %d: ledger chain %s, golden %s", i, solo[i].LogitsChain, chain[len(chain)-1])
		}
	}
	var wg sync.WaitGroup
	got := make([]ledger.Summary, len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = run(p) }()
	}
	wg.Wait()
	for i := range prompts {
		if got[i].RoutingDigest != solo[i].RoutingDigest || got[i].LogitsChain != solo[i].LogitsChain || len(got[i].Experts) != len(solo[i].Experts) {
			t.Errorf("prompt %d among others: routing %s chain %s, alone %s %s", i, got[i].RoutingDigest, got[i].LogitsChain, solo[i].RoutingDigest, solo[i].LogitsChain)
		}
	}
	if solo[0].RoutingDigest == solo[1].RoutingDigest {
		t.Error("two different prompts with the same routing digest")
	}
}

// shuffled delivers experts in a seeded random order (as a parallel
// hierarchy does, by completion), optionally one of them twice.
type shuffled struct {
	ck   *weights.Checkpoint
	rng  *rand.Rand
	dup  bool
	used int
}

func (s *shuffled) Stream(ctx context.Context, layer int, experts []int, c ExpertConsumer) error {
	order := append([]int(nil), experts...)
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if s.dup && len(order) > 1 {
		order = append(order, order[0])
	}
	for _, e := range order {
		ve, err := s.ck.Expert(layer, e)
		if err != nil {
			return err
		}
		s.used++
		if err := c.Consume(e, expertstream.OnHost(ve), ledger.TierStorage); err != nil {
			return err
		}
	}
	return nil
}

// TestExpertArrivalOrderDoesNotMatter: logits are bit-identical whatever
// order the source delivers a step's experts in; a source that delivers one
// twice is caught.
func TestExpertArrivalOrderDoesNotMatter(t *testing.T) {
	for i := range synthCases {
		cfg, w := synth(t, i)
		ck := w.open(t)
		ref, err := Load(ck, Options{})
		if err != nil {
			t.Fatal(err)
		}
		toks := make([]int, 30)
		for j := range toks {
			toks[j] = (j*13 + 5) % cfg.Vocab
		}
		want := allLogits(t, ref, toks, randomChunks(len(toks), 9))
		src := &shuffled{ck: ck, rng: rand.New(rand.NewPCG(uint64(i), 1))}
		m, err := Load(ck, Options{Experts: src})
		if err != nil {
			t.Fatal(err)
		}
		compareAll(t, synthCases[i].name+": shuffled expert order", allLogits(t, m, toks, randomChunks(len(toks), 4)), want)
		if src.used == 0 {
			t.Fatal("the source was not used")
		}
		m2, _ := Load(ck, Options{Experts: &shuffled{ck: ck, rng: rand.New(rand.NewPCG(1, 1)), dup: true}})
		_, err = m2.NewSession().Forward(toks[:4], false)
		wantErr(t, err, "experts evaluated, want top-k")
	}
}

// TestLedgerInBatch: sessions batched with others (one of them without a
// ledger) record the same routing and the same expert token counts as
// when run alone.
func TestLedgerInBatch(t *testing.T) {
	_, w := synth(t, 1)
	ck := w.open(t)
	m, err := Load(ck, Options{Experts: ramTier(t, ck, tier.Auto)})
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{1, 2, 3}, {9, 8}, {4, 4, 4, 4}}
	newLedger := func() *ledger.Ledger { return ledger.New(ck.Root(), m.cfg.Layers, m.cfg.TopK, ledger.ModeExact) }
	tokens := func(s ledger.Summary) map[ledger.ExpertKey]int64 {
		n := map[ledger.ExpertKey]int64{}
		for _, u := range s.Experts {
			n[ledger.ExpertKey{Layer: u.Layer, Expert: u.Expert}] = u.Tokens
		}
		return n
	}
	b, err := m.NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sess := make([]*Session, len(prompts))
	for i := range sess {
		sess[i] = m.NewSession()
		if i != 1 {
			sess[i].SetLedger(newLedger())
		}
	}
	if _, err := b.Step(context.Background(), sess, prompts); err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		if i == 1 {
			continue
		}
		s := m.NewSession()
		s.SetLedger(newLedger())
		if _, err := s.Forward(p, false); err != nil {
			t.Fatal(err)
		}
		got, want := sess[i].Ledger().Summary(), s.Ledger().Summary()
		if got.RoutingDigest != want.RoutingDigest || got.RoutingEntries != want.RoutingEntries {
			t.Errorf("prompt %d in a batch: routing %s (%d entries), alone %s (%d)", i, got.RoutingDigest, got.RoutingEntries, want.RoutingDigest, want.RoutingEntries)
		}
		if g, w := tokens(got), tokens(want); !maps.Equal(g, w) {
			t.Errorf("prompt %d in a batch: expert tokens %v, alone %v", i, g, w)
		}
	}
}
