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
	"time"

	"golang.org/x/sys/unix"

	_ "github.com/tarfa-ai/tarfa/backend/cpu" // the engine opens its reference backend by name
	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
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
			h, err := New(ck, Options{RAMBudget: c.ram * size, StagingBudget: c.dev * size, Readers: c.readers, Policy: c.policy, Partition: c.part})
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
			if st.MaxMapped > (c.ram+c.dev)*size || st.MaxStagingInUse > st.StagingCap || st.RAMResident > st.RAMCap {
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
	h, err := New(ck, Options{RAMBudget: 6 * size, StagingBudget: 3 * size, Readers: 4})
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
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size})
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
	// The hierarchy faulted: tokens computed from the copy since it was
	// verified may be wrong, so nothing more is computed until the fault is
	// acknowledged.
	var f *ScrubFault
	if _, err := run(t, m, prompts[0], 8); !errors.As(err, &f) || f.Expert != victim.id || !errors.Is(err, jnf.ErrVerification) {
		t.Fatalf("generation after a scrub fault: %v", err)
	}
	h.ClearFault()
	got, err := run(t, m, prompts[0], 8)
	if err != nil || !same(got, want) {
		t.Fatalf("after the scrub: %v, identical %v", err, same(got, want))
	}
}

// flipResident flips one bit of a resident RAM-tier copy behind the
// hierarchy's back (as a memory fault would) and returns its expert.
func flipResident(t *testing.T, h *Hierarchy) weights.ExpertID {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]int, 0, len(h.resident))
	for k, e := range h.resident {
		if e.state == ready {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		t.Fatal("nothing resident to flip")
	}
	slices.Sort(keys)
	e := h.resident[keys[0]]
	mem := e.buf.Bytes()
	unix.Mprotect(mem, unix.PROT_READ|unix.PROT_WRITE)
	mem[101] ^= 0x04
	unix.Mprotect(mem, unix.PROT_READ)
	return e.id
}

// TestScrubSchedule: the background pass finds a flipped bit on its own,
// counts its passes, faults the hierarchy naming the expert, and the model's
// other resident copies (ScrubExtra) are checked on the same pass.
func TestScrubSchedule(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	var extra sync.Mutex
	extraCalls := 0
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size, Scrub: Scrub{Every: MinScrubEvery},
		ScrubExtra: func() (int64, error) { extra.Lock(); extraCalls++; extra.Unlock(); return 10, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if d := h.Describe(); !strings.Contains(d, "scrub 1s") {
		t.Errorf("banner %q does not state the scrub schedule", d)
	}
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	if _, err := run(t, m, prompts[0], 4); err != nil {
		t.Fatal(err)
	}
	id := flipResident(t, h)
	var f *ScrubFault
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if f = h.Fault(); f != nil {
			break
		}
	}
	if f == nil || f.Expert != id || !f.Found.After(f.Verified) {
		t.Fatalf("no scrub fault for %v after the flip: %+v", id, f)
	}
	st := h.Stats()
	if st.ScrubPasses < 1 || st.ScrubFailures != 1 || st.ScrubbedBytes == 0 {
		t.Errorf("stats after a scheduled pass: %+v", st)
	}
	extra.Lock()
	if extraCalls < 1 {
		t.Errorf("ScrubExtra called %d times", extraCalls)
	}
	extra.Unlock()
	if _, err := run(t, m, prompts[0], 2); !errors.As(err, &f) || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("generation after the fault: %v", err)
	}
}

// TestScrubOnUse: with Scrub.OnUse a flipped resident bit is found before
// the copy is used; the expert is read again from storage and the logits
// are those of the checkpoint, with no fault.
func TestScrubOnUse(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 2 * size, Scrub: Scrub{OnUse: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	want, err := run(t, m, prompts[0], 6)
	if err != nil {
		t.Fatal(err)
	}
	before := h.Stats()
	for range 3 {
		flipResident(t, h)
	}
	got, err := run(t, m, prompts[0], 6)
	if err != nil || !same(got, want) {
		t.Fatalf("on-use scrub: %v, identical %v", err, same(got, want))
	}
	after := h.Stats()
	if after.ScrubFailures-before.ScrubFailures < 1 || after.Streamed == before.Streamed || h.Fault() != nil {
		t.Errorf("before %+v after %+v fault %v", before, after, h.Fault())
	}
	if after.ScrubbedBytes-before.ScrubbedBytes < (after.Hits-before.Hits)*int64(ck.ExpertBytes(0, 0)) {
		t.Errorf("%d bytes rechecked for %d hits", after.ScrubbedBytes-before.ScrubbedBytes, after.Hits-before.Hits)
	}
}

// TestScrubDuringEviction: scrubs running while a tiny RAM tier evicts on
// every step never touch a released buffer (run with -race) and change no
// logit.
func TestScrubDuringEviction(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	ref, err := New(ck, Options{StagingBudget: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := engine.Load(ck, engine.Options{Experts: ref})
	want, err := run(t, mr, prompts[1], 12)
	ref.Close()
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(ck, Options{RAMBudget: 6 * size, StagingBudget: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, errs := h.Scrub(3 * size); len(errs) > 0 {
					t.Error(errs)
					return
				}
			}
		}()
	}
	got, err := run(t, m, prompts[1], 12)
	close(stop)
	wg.Wait()
	if err != nil || !same(got, want) {
		t.Fatalf("with scrubs during eviction: %v, identical %v", err, same(got, want))
	}
	if st := h.Stats(); st.Evictions == 0 || st.ScrubbedBytes == 0 {
		t.Errorf("the test did not scrub while evicting: %+v", st)
	}
}

// TestScrubOfAnEvictedCopy: a copy evicted while the scrub hashes it keeps
// its buffer until the scrub is done (a released buffer would be reused by
// the next read under the scrub's feet), and the arena gets it back then.
func TestScrubOfAnEvictedCopy(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 4 * size, StagingBudget: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, _ := engine.Load(ck, engine.Options{Experts: h})
	if _, err := run(t, m, prompts[0], 2); err != nil {
		t.Fatal(err)
	}
	free := func() int {
		n := 0
		var bs []*weights.Buffer
		for {
			b, err := h.ram.Get()
			if err != nil {
				break
			}
			bs = append(bs, b)
			n++
		}
		for _, b := range bs {
			b.Release()
		}
		return n
	}
	calls := 0
	scrubHashHook = func(h *Hierarchy, id weights.ExpertID) {
		calls++
		h.mu.Lock()
		h.evictLocked(id)                              // as a Stream admitting another expert would
		want := h.ram.Capacity() - len(h.resident) - 1 // the scrub still holds the evicted copy's buffer
		h.mu.Unlock()
		if got := free(); got != want {
			t.Errorf("arena: %d free during the scrub of an evicted copy, want %d", got, want)
		}
	}
	defer func() { scrubHashHook = nil }()
	n, errs := h.Scrub(size)
	if len(errs) != 0 || n == 0 || calls != 1 {
		t.Fatalf("scrub of an evicted copy: %d bytes, %v, %d hooks", n, errs, calls)
	}
	scrubHashHook = nil
	h.mu.Lock()
	resident := len(h.resident)
	h.mu.Unlock()
	if got := free(); got != h.ram.Capacity()-resident {
		t.Errorf("arena after the scrub: %d free, want %d", got, h.ram.Capacity()-resident)
	}
}

func TestParseScrub(t *testing.T) {
	for in, want := range map[string]Scrub{"off": {}, "use": {OnUse: true}, "10m": {Every: 10 * time.Minute}, "use,30s": {OnUse: true, Every: 30 * time.Second}, "1h,use": {OnUse: true, Every: time.Hour}} {
		got, err := ParseScrub(in)
		if err != nil || got != want {
			t.Errorf("ParseScrub(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseScrub(got.String()); err != nil || back != got {
			t.Errorf("ParseScrub(%q.String() = %q) = %+v, %v", in, got.String(), back, err)
		}
	}
	for _, in := range []string{"", "on", "10", "10ms", "use,use", "1m,2m", "-5m", "use,", ",", "off,use"} {
		if got, err := ParseScrub(in); err == nil {
			t.Errorf("ParseScrub(%q) = %+v, want an error", in, got)
		}
	}
}

// TestFileChangedBetweenReads: a bit flipped in the file after a first read
// is found on the next read; no token is produced from bad bytes.
func TestFileChangedBetweenReads(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{StagingBudget: 2 * size}) // no RAM tier: every use reads
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
	if _, err := New(ck, Options{StagingBudget: size - 1}); !errors.Is(err, weights.ErrBudget) || !strings.Contains(err.Error(), "device budget") {
		t.Errorf("device budget below one expert: %v", err)
	}
	if _, err := New(ck, Options{StagingBudget: size, RAMBudget: 100}); !errors.Is(err, weights.ErrBudget) || !strings.Contains(err.Error(), "RAM budget") {
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
		h, err := New(ck, Options{RAMBudget: ram * size, StagingBudget: 4 * size, Prefetch: true})
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
		h.Settle() // every prefetch read landed: the counters are final
		st := h.Stats()
		rl := h.refs[0].ReadLength()
		h.Close()
		t.Logf("RAM %d experts: prefetch issued %d, useful %d, wasted %d; hits %d misses %d", ram, st.PrefetchIssued, st.PrefetchUseful, st.PrefetchWasted, st.Hits, st.Misses)
		// With every expert resident soon (64), hints find nothing to read
		// before their ranks are trusted.
		if (ram < 64 && (st.PrefetchIssued == 0 || st.PrefetchUseful == 0)) || st.PrefetchUseful+st.PrefetchWasted > st.PrefetchIssued {
			t.Errorf("RAM %d experts: prefetch counters %+v", ram, st)
		}
		// Every byte read is a use's (a miss, or a staging read) or a
		// prefetch's, and PrefetchBytes counts the latter.
		if st.PrefetchBytes != st.PrefetchIssued*rl || st.BytesRead != (st.Misses+st.Streamed)*rl+st.PrefetchBytes {
			t.Errorf("RAM %d experts: %d bytes read, %d by %d prefetches, %d misses and %d staged of %d bytes each", ram, st.BytesRead, st.PrefetchBytes, st.PrefetchIssued, st.Misses, st.Streamed, rl)
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
		h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 4 * size, PolicyOptions: policy.Options{Heat: heat2.Counts}})
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

// TestLoadHeatRefusesBadFiles: a heat ledger with a negative count, or one
// larger than any model's could be, is refused with an error naming it.
func TestLoadHeatRefusesBadFiles(t *testing.T) {
	ck := openCk(t, testModel(t))
	cache := t.TempDir()
	heat, err := LoadHeat(cache, ck)
	if err != nil {
		t.Fatal(err)
	}
	heat.Counts[3] = -1
	if err := heat.Save(cache); err != nil {
		t.Fatal(err)
	}
	p := HeatPath(cache, ck.Root())
	if _, err := LoadHeat(cache, ck); err == nil || !strings.Contains(err.Error(), p+": count 3 is -1") {
		t.Errorf("negative count: %v", err)
	}
	if err := os.Truncate(p, maxHeatFile+1); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHeat(cache, ck); err == nil || !strings.Contains(err.Error(), "more than the heat ledger limit") {
		t.Errorf("oversized file: %v", err)
	}
}

// TestDescribeSaysWhatIsHeld: the banner gives what the RAM tier can hold,
// not only its budget: all the experts and their size when they fit in
// it, else the bytes of the experts it holds out of the budget.
func TestDescribeSaysWhatIsHeld(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	for _, budget := range []int64{1 << 46, 3 * size} {
		h, err := New(ck, Options{RAMBudget: budget, StagingBudget: 2 * size})
		if err != nil {
			t.Fatal(err)
		}
		d := h.Describe()
		n := h.dims.N()
		h.Close()
		if budget > int64(n)*size {
			want := fmt.Sprintf("RAM tier %d of %d experts (all of them, %s; budget 64.0 TiB", n, n, bytesString(int64(n)*size))
			if !strings.Contains(d, want) {
				t.Errorf("budget above the experts: %q lacks %q", d, want)
			}
			continue
		}
		if want := fmt.Sprintf("RAM tier 3 of %d experts (up to %s of the %s budget", n, bytesString(3*size), bytesString(3*size)); !strings.Contains(d, want) {
			t.Errorf("budget of 3 experts: %q lacks %q", d, want)
		}
	}
}
