package ledger

import (
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
)

func testRoot() jnf.Digest {
	d := jnf.Digest{Alg: jnf.SHA256}
	for i := range d.Sum {
		d.Sum[i] = 0x11
	}
	return d
}

// TestRoutingVector pins the routing chain's encoding to a vector computed
// from the package comment with Python's hashlib (see the test's comment
// for the inputs): two positions, MoE layers 1 and 3, k = 2, the layers
// reported out of order within the chunk.
func TestRoutingVector(t *testing.T) {
	l := New(testRoot(), 4, 2, ModeExact)
	if got := hex.EncodeToString(func() []byte { r := RoutingStart(testRoot().Sum); return r[:] }()); got != "54ce57662cb30984efafe451cd4bb571feb1eb15d236bcde6357a9d8d945c523" {
		t.Fatalf("r0 = %s", got)
	}
	l.BeginChunk(0, 2)
	l.Route(3, []int32{0, 2, 4, 6}, []float32{0.6, 0.4, 0.9, 0.1}, 2)
	l.Route(1, []int32{3, 5, 7, 1}, []float32{0.75, 0.25, 0.5, 0.5}, 2)
	l.EndChunk()
	s := l.Summary()
	if s.RoutingDigest != "f00de9ee13537260acfe590407b19af0ae0c0777aaaca286e049b161a4b59fa7" || s.RoutingEntries != 4 {
		t.Errorf("routing %s (%d entries)", s.RoutingDigest, s.RoutingEntries)
	}
	if !s.KExact() || len(s.KPerLayer) != 2 || s.KPerLayer[0].K[2] != 2 {
		t.Errorf("k per layer %+v", s.KPerLayer)
	}
}

// TestRoutingChunkInvariant: the same routing reported as one chunk or
// token by token gives the same digest; a different weight bit does not.
func TestRoutingChunkInvariant(t *testing.T) {
	idx := map[int][]int32{0: {1, 2, 3, 4, 5, 6}, 2: {7, 0, 6, 1, 5, 2}}
	w := map[int][]float32{0: {0.5, 0.5, 0.25, 0.75, 1, 0}, 2: {0.1, 0.9, 0.2, 0.8, 0.3, 0.7}}
	whole := New(testRoot(), 3, 2, ModeExact)
	whole.BeginChunk(5, 3)
	for _, layer := range []int{0, 2} {
		whole.Route(layer, idx[layer], w[layer], 2)
	}
	whole.EndChunk()
	step := New(testRoot(), 3, 2, ModeExact)
	for t := range 3 {
		step.BeginChunk(5+t, 1)
		for _, layer := range []int{2, 0} {
			step.Route(layer, idx[layer][2*t:2*t+2], w[layer][2*t:2*t+2], 2)
		}
		step.EndChunk()
	}
	a, b := whole.Summary(), step.Summary()
	if a.RoutingDigest != b.RoutingDigest || a.RoutingEntries != 6 {
		t.Errorf("one chunk %s, token by token %s", a.RoutingDigest, b.RoutingDigest)
	}
	w[2][3] = 0.80000007
	other := New(testRoot(), 3, 2, ModeExact)
	other.BeginChunk(5, 3)
	for _, layer := range []int{0, 2} {
		other.Route(layer, idx[layer], w[layer], 2)
	}
	other.EndChunk()
	if other.Summary().RoutingDigest == a.RoutingDigest {
		t.Error("one weight's last bit changed and the digest did not")
	}
	// An aborted chunk commits nothing.
	ab := New(testRoot(), 3, 2, ModeExact)
	ab.BeginChunk(0, 3)
	ab.Route(0, idx[0], w[0], 2)
	ab.AbortChunk()
	ab.EndChunk()
	if s := ab.Summary(); s.RoutingEntries != 0 || s.RoutingDigest != hex.EncodeToString(func() []byte { r := RoutingStart(testRoot().Sum); return r[:] }()) {
		t.Errorf("aborted chunk: %+v", s)
	}
}

func TestKExactFindsAReducedTopK(t *testing.T) {
	l := New(testRoot(), 2, 2, ModeExact)
	l.BeginChunk(0, 1)
	l.Route(0, []int32{1, 2}, []float32{0.5, 0.5}, 2)
	l.Route(1, []int32{1}, []float32{1}, 1)
	l.EndChunk()
	if s := l.Summary(); s.KExact() {
		t.Errorf("k = 1 in layer 1 of a top-2 model reported as exact: %+v", s.KPerLayer)
	}
}

// TestLogitsChainIsGolden: the ledger's chain is golden's.
func TestLogitsChainIsGolden(t *testing.T) {
	l := New(testRoot(), 1, 1, ModeExact)
	prompt := []int{3, 1, 4}
	rows := [][]float32{{1, 2, 3}, {-1, 0.5, 9}}
	l.Prompt(prompt)
	for i, r := range rows {
		l.Step(r, i)
	}
	want := golden.Chain(testRoot().Sum, &golden.Run{PromptTokens: prompt, Logits: rows})
	if s := l.Summary(); s.LogitsChain != want[len(want)-1] || s.Steps != 2 || len(s.Generated) != 2 {
		t.Errorf("chain %s, golden %s", s.LogitsChain, want[len(want)-1])
	}
}

func TestExpertUse(t *testing.T) {
	l := New(testRoot(), 2, 2, ModeExact)
	d := jnf.BLAKE3Bytes([]byte("e"))
	l.UseExpert(1, 7, d, TierStorage, 3, 1000)
	l.UseExpert(1, 7, d, TierRAM, 2, 0)
	l.UseExpert(0, 9, d, TierStorage, 1, 500)
	s := l.Summary()
	if len(s.Experts) != 2 || s.Experts[0].Layer != 0 || s.Experts[1].Tokens != 5 || s.Experts[1].Uses[TierRAM] != 1 || s.BytesHashed[jnf.BLAKE3] != 1500 {
		t.Errorf("%+v", s)
	}
	var nl *Ledger
	nl.UseExpert(0, 0, d, TierRAM, 1, 0) // a nil ledger records nothing, and does not crash
	nl.BeginChunk(0, 1)
	nl.EndChunk()
	nl.Prompt([]int{1})
	nl.Step([]float32{1}, 0)
}

func TestRouteObserverSeesTheChainOrder(t *testing.T) {
	l := New(testRoot(), 4, 2, ModeExact)
	var got [][3]int
	l.SetRouteObserver(func(pos, layer int, experts []int32) {
		got = append(got, [3]int{pos, layer, int(experts[0])})
	})
	l.BeginChunk(3, 2)
	l.Route(2, []int32{7, 1, 6, 2}, []float32{0.5, 0.5, 0.5, 0.5}, 2)
	l.Route(0, []int32{5, 3, 4, 0}, []float32{0.5, 0.5, 0.5, 0.5}, 2)
	l.EndChunk()
	want := [][3]int{{3, 0, 5}, {3, 2, 7}, {4, 0, 4}, {4, 2, 6}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// chainHeads is golden's synchronous chain over rows after prompt, as hex
// heads: heads[j] after j steps (heads[0] the start).
func chainHeads(prompt []int, rows [][]float32) []string {
	c := golden.ChainStart(testRoot().Sum, prompt)
	heads := []string{hex.EncodeToString(c[:])}
	for _, r := range rows {
		c = golden.ChainNext(c, r)
		heads = append(heads, hex.EncodeToString(c[:]))
	}
	return heads
}

// testRows is n rows of m distinct logits.
func testRows(n, m int) [][]float32 {
	rows := make([][]float32, n)
	for j := range rows {
		rows[j] = make([]float32, m)
		for i := range rows[j] {
			rows[j][i] = float32(j*m+i) * 0.001
		}
	}
	return rows
}

// TestStepCopiesLogits: a caller reuses its logits slice as soon as Step
// returns (the engine's next forward pass writes into it); the chain is
// still golden's over the logits each Step was given, whatever Step
// still has to hash when it returns.
func TestStepCopiesLogits(t *testing.T) {
	const steps, vocab = 20, 1 << 16
	prompt := []int{2, 7, 1, 8}
	rows := testRows(steps, vocab)
	want := chainHeads(prompt, rows)
	l := New(testRoot(), 1, 1, ModeExact)
	l.Prompt(prompt)
	buf := make([]float32, vocab)
	for j, r := range rows {
		copy(buf, r)
		l.Step(buf, j)
		// Overwrite at once, the end first: a hash still reading buf
		// from the start sees the new values.
		for i := len(buf) - 1; i >= 0; i-- {
			buf[i] = -1
		}
	}
	if s := l.Summary(); s.LogitsChain != want[steps] || s.Steps != steps {
		t.Errorf("after %d steps: chain %s (%d steps), golden %s", steps, s.LogitsChain, s.Steps, want[steps])
	}
	// Prompt restarts the chain after the pending step's hash.
	l.Step(rows[0], 0)
	l.Prompt(prompt)
	if s := l.Summary(); s.LogitsChain != want[0] {
		t.Errorf("after Prompt: chain %s, want the start %s", s.LogitsChain, want[0])
	}
}

// TestSummaryDuringSteps: Summary called from another goroutine while
// Steps run sees a consistent transcript: the chain head of exactly the
// steps it reports (never a step counted whose hash is still pending).
// Run it with -race.
func TestSummaryDuringSteps(t *testing.T) {
	const steps, vocab = 200, 1 << 12
	prompt := []int{5}
	rows := testRows(steps, vocab)
	want := chainHeads(prompt, rows)
	l := New(testRoot(), 2, 1, ModeExact)
	l.Prompt(prompt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for j, r := range rows {
			l.BeginChunk(len(prompt)+j, 1)
			l.Route(j%2, []int32{int32(j)}, []float32{1}, 1)
			l.EndChunk()
			l.Step(r, j)
		}
	}()
	seen := 0
	for s := l.Summary(); ; s = l.Summary() {
		if s.Steps > steps || s.LogitsChain != want[s.Steps] || len(s.Generated) != s.Steps {
			t.Fatalf("Summary after %d steps (%d generated): chain %s, golden %s", s.Steps, len(s.Generated), s.LogitsChain, want[min(s.Steps, steps)])
		}
		if s.Steps > 0 && s.Steps < steps {
			seen++
		}
		select {
		case <-done:
			if s := l.Summary(); s.Steps != steps || s.LogitsChain != want[steps] || s.RoutingEntries != steps {
				t.Fatalf("at the end: %d steps, chain %s (golden %s), %d routing entries", s.Steps, s.LogitsChain, want[steps], s.RoutingEntries)
			}
			t.Logf("%d summaries taken between steps", seen)
			return
		default:
		}
	}
}

// TestStepLeavesNoGoroutine: a ledger dropped with a hash pending leaves
// no goroutine behind once the hash is done.
func TestStepLeavesNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	row := testRows(1, 1<<16)[0]
	for range 50 {
		l := New(testRoot(), 1, 1, ModeExact)
		l.Prompt([]int{1})
		l.Step(row, 0)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after 50 dropped ledgers, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(time.Millisecond)
	}
}
