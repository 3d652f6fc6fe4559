package tier

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/validation/synth"
	"github.com/tarfa-ai/tarfa/weights"
)

// testModel converts a synthetic Qwen3.5-MoE with 16 experts, top-4, into
// a JNF directory (the tiny preset with more experts, so budgets below a
// step's working set are easy to reach).
func testModel(t testing.TB) string { return testModelSeed(t, 7) }

func testModelSeed(t testing.TB, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	o := synth.Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: seed, Set: map[string]any{"num_experts": 16, "num_experts_per_tok": 4}}
	if err := synth.Write(filepath.Join(dir, "hf"), o); err != nil {
		t.Fatal(err)
	}
	if _, err := convert.Convert(context.Background(), filepath.Join(dir, "hf"), filepath.Join(dir, "jnf"), convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "jnf")
}

func openCk(t testing.TB, dir string) *weights.Checkpoint {
	t.Helper()
	ck, err := weights.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// run generates greedily and returns every step's logits.
func run(t testing.TB, m *engine.Model, prompt []int, n int) ([][]float32, error) {
	t.Helper()
	var rows [][]float32
	_, err := engine.Generate(context.Background(), m.NewSession(), prompt, engine.GenOptions{MaxTokens: n}, func(_ int, lg []float32) error {
		rows = append(rows, append([]float32(nil), lg...))
		return nil
	})
	return rows, err
}

func same(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

var prompts = [][]int{{5, 9, 200, 17, 3, 44, 101}, {1}, {300, 301, 302, 303}}

// TestBudgetsDoNotChangeABit: logits with any RAM and device budget
// (including budgets below one step's working set, which force constant
// eviction and streaming), any reader count and policy are bit-identical to
// the engine's default path, and the budgets are never exceeded.
func TestBudgetsDoNotChangeABit(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want [][][]float32
	for _, p := range prompts {
		rows, err := run(t, ref, p, 12)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rows)
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	for _, c := range []struct {
		ram, dev int64 // in experts
		readers  int
		policy   string
		part     policy.Partition
	}{
		{0, 1, 1, "", policy.Global},    // no RAM tier, one slot: every use read, one at a time
		{0, 3, 8, "", policy.Global},    // fewer slots than top-k
		{2, 1, 2, "lru", policy.Global}, // a RAM tier smaller than one step
		{5, 2, 4, "heat", policy.Global},
		{8, 4, 3, "leaststale", policy.PerLayer},
		{64, 4, 8, "lfu", policy.Global}, // everything fits
		{10, 5, 8, "", policy.Global},    // about 128 KiB / 64 KiB on the default model's shapes
	} {
		name := fmt.Sprintf("ram%d-dev%d-readers%d-%s-%v", c.ram, c.dev, c.readers, c.policy, c.part)
		t.Run(name, func(t *testing.T) {
			h, err := New(ck, Options{RAMBudget: c.ram * size, DeviceBudget: c.dev * size, Readers: c.readers, Policy: c.policy, Partition: c.part})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, err := engine.Load(ck, engine.Options{Experts: h})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				got, err := run(t, m, p, 12)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, want[i]) {
					t.Fatalf("prompt %d: logits differ from the default path", i)
				}
			}
			st := h.Stats()
			if st.MaxMapped > (c.ram+c.dev)*size || st.MaxDeviceInUse > st.DeviceCap || st.RAMResident > st.RAMCap {
				t.Errorf("budget exceeded: %+v (budgets %d + %d experts of %d bytes)", st, c.ram, c.dev, size)
			}
			if c.ram == 0 && (st.Hits != 0 || st.Streamed == 0) || c.ram == 64 && st.Hits == 0 {
				t.Errorf("stats %+v", st)
			}
			if st.BytesHashed == 0 || st.Failures != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestConcurrentSessionsShareTheHierarchy: sessions running at once on one
// small hierarchy get the logits they get alone.
func TestConcurrentSessionsShareTheHierarchy(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 6 * size, DeviceBudget: 3 * size, Readers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, err := engine.Load(ck, engine.Options{Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := engine.Load(ck, engine.Options{})
	var wg sync.WaitGroup
	for i := range 6 {
		p := prompts[i%len(prompts)]
		want, _ := run(t, ref, p, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := run(t, m, p, 10)
			if err != nil || !same(got, want) {
				t.Errorf("session %d: %v, identical %v", i, err, same(got, want))
			}
		}()
	}
	wg.Wait()
}

// TestScrubFindsAFlippedResidentBit: a bit flipped in a resident RAM-tier
// copy (its page unsealed behind the hierarchy's back, as a memory fault
// would) is found by Scrub, and the next use reads the expert again: the
// logits stay those of the checkpoint.
func TestScrubFindsAFlippedResidentBit(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 64 * size, DeviceBudget: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	want, err := run(t, m, prompts[0], 8)
	if err != nil {
		t.Fatal(err)
	}
	if n, errs := h.Scrub(1 << 40); n == 0 || len(errs) != 0 {
		t.Fatalf("clean scrub: %d bytes, %v", n, errs)
	}
	h.mu.Lock()
	var victim *entry
	for _, e := range h.resident {
		victim = e
		break
	}
	mem := victim.buf.Bytes()
	unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE)
	mem[77] ^= 0x10
	unix.Mprotect(mem, unix.PROT_READ)
	h.mu.Unlock()
	_, errs := h.Scrub(1 << 40)
	if len(errs) != 1 || !errors.Is(errs[0], jnf.ErrVerification) || !strings.Contains(errs[0].Error(), fmt.Sprintf("experts.%d", victim.id.Expert)) {
		t.Fatalf("scrub after a flipped bit: %v", errs)
	}
	if st := h.Stats(); st.ScrubFailures != 1 {
		t.Errorf("stats %+v", st)
	}
	got, err := run(t, m, prompts[0], 8)
	if err != nil || !same(got, want) {
		t.Fatalf("after the scrub: %v, identical %v", err, same(got, want))
	}
}

// TestFileChangedBetweenReads: a bit flipped in the file after a first read
// is found on the next read; no token is produced from bad bytes.
func TestFileChangedBetweenReads(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{DeviceBudget: 2 * size}) // no RAM tier: every use reads
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	if _, err := run(t, m, prompts[0], 4); err != nil {
		t.Fatal(err)
	}
	for l := range ck.Config().Layers {
		for e := range ck.Config().Experts {
			ref, _ := ck.ExpertRef(l, e)
			b, _ := os.ReadFile(ref.Path())
			b[ref.Offset()+ref.Length()/3] ^= 1
			os.WriteFile(ref.Path(), b, 0o644)
		}
	}
	var tokens int
	_, err = engine.Generate(context.Background(), m.NewSession(), prompts[0], engine.GenOptions{MaxTokens: 4}, func(int, []float32) error {
		tokens++
		return nil
	})
	var mm *jnf.MismatchError
	if !errors.As(err, &mm) || tokens != 0 {
		t.Fatalf("after the file changed: %d tokens, %v", tokens, err)
	}
	if st := h.Stats(); st.Failures == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestBudgetsBelowOneExpert(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	if _, err := New(ck, Options{DeviceBudget: size - 1}); !errors.Is(err, weights.ErrBudget) || !strings.Contains(err.Error(), "device budget") {
		t.Errorf("device budget below one expert: %v", err)
	}
	if _, err := New(ck, Options{DeviceBudget: size, RAMBudget: 100}); !errors.Is(err, weights.ErrBudget) || !strings.Contains(err.Error(), "RAM budget") {
		t.Errorf("RAM budget below one expert: %v", err)
	}
}

// TestPrefetchChangesNothing: with prefetching the logits are the same,
// and the counters show it worked: issued reads, some of them useful.
func TestPrefetchChangesNothing(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	ref, _ := engine.Load(ck, engine.Options{})
	for _, ram := range []int64{8, 24, 64} {
		h, err := New(ck, Options{RAMBudget: ram * size, DeviceBudget: 4 * size, Prefetch: true})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := engine.Load(ck, engine.Options{Experts: h})
		for _, p := range prompts {
			want, _ := run(t, ref, p, 16)
			got, err := run(t, m, p, 16)
			if err != nil || !same(got, want) {
				t.Fatalf("RAM %d experts, prefetch on: %v, identical %v", ram, err, same(got, want))
			}
		}
		st := h.Stats()
		h.Close()
		t.Logf("RAM %d experts: prefetch issued %d, useful %d, wasted %d; hits %d misses %d", ram, st.PrefetchIssued, st.PrefetchUseful, st.PrefetchWasted, st.Hits, st.Misses)
		if st.PrefetchIssued == 0 || st.PrefetchUseful == 0 || st.PrefetchUseful+st.PrefetchWasted > st.PrefetchIssued {
			t.Errorf("RAM %d experts: prefetch counters %+v", ram, st)
		}
	}
}

// TestHeatLedgerAndWarmStart: the heat a run leaves, saved and loaded
// again, warms a new hierarchy so its first tokens hit; the logits are the
// same; a heat ledger of another model is refused.
func TestHeatLedgerAndWarmStart(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	cache := t.TempDir()
	heat, err := LoadHeat(cache, ck)
	if err != nil || heat.Runs != 0 {
		t.Fatalf("empty ledger: %v %+v", err, heat)
	}
	m, _ := engine.Load(ck, engine.Options{})
	s := m.NewSession()
	l := ledger.New(ck.Root(), ck.Config().Layers, ck.Config().TopK, ledger.ModeExact)
	s.SetLedger(l)
	want, err := engine.Generate(context.Background(), s, prompts[0], engine.GenOptions{MaxTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	heat.Add(l.Summary())
	if err := heat.Save(cache); err != nil {
		t.Fatal(err)
	}
	heat2, err := LoadHeat(cache, ck)
	if err != nil || heat2.Runs != 1 || !slices.Equal(heat2.Counts, heat.Counts) {
		t.Fatalf("reloaded: %v", err)
	}
	for _, warm := range []bool{false, true} {
		h, err := New(ck, Options{RAMBudget: 64 * size, DeviceBudget: 4 * size, PolicyOptions: policy.Options{Heat: heat2.Counts}})
		if err != nil {
			t.Fatal(err)
		}
		if warm {
			if n, err := h.Warm(heat2.Counts); err != nil || n == 0 {
				t.Fatalf("warm: %d, %v", n, err)
			}
		}
		mh, _ := engine.Load(ck, engine.Options{Experts: h})
		got, err := engine.Generate(context.Background(), mh.NewSession(), prompts[0], engine.GenOptions{MaxTokens: 12}, nil)
		if err != nil || !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("warm %v: %v %v", warm, err, got.Tokens)
		}
		st := h.Stats()
		h.Close()
		if warm != (st.Misses == 0) {
			t.Errorf("warm %v: %d misses, %d hits", warm, st.Misses, st.Hits)
		}
	}
	other := openCk(t, testModelSeed(t, 8))
	p := HeatPath(cache, ck.Root())
	os.MkdirAll(filepath.Dir(HeatPath(cache, other.Root())), 0o755)
	b, _ := os.ReadFile(p)
	os.WriteFile(HeatPath(cache, other.Root()), b, 0o644)
	if _, err := LoadHeat(cache, other); err == nil || !strings.Contains(err.Error(), "not the heat ledger of this model") {
		t.Errorf("another model's heat: %v", err)
	}
}
