package tier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/internal/pagecache"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/sim"
	"github.com/tarfa-ai/tarfa/tier/trace"
	"github.com/tarfa-ai/tarfa/weights"
)

// countConsumer counts what a Stream delivers; with its last expert it
// waits for the prefetch reads the Stream started (see quiesce).
type countConsumer struct {
	h    *Hierarchy
	n, k int
}

func (c *countConsumer) Consume(int, expertstream.Placed, ledger.Tier) error {
	if c.n++; c.n == c.k {
		c.h.quiesce()
	}
	return nil
}

// quiesce waits until no prefetch read holds its lease. The test calls it
// before a Stream ends, so every prefetch lease ends first, in the order
// the reads verify (one hasher), as on the simulator's hardware below,
// which verifies each read before the Stream that issued it computes its
// last expert.
func (h *Hierarchy) quiesce() {
	h.mu.Lock()
	for h.inflightP > 0 {
		h.loaded.Wait()
	}
	h.mu.Unlock()
}

// TestSimulatorCountsAsTheHierarchy: the simulator replaying a routing
// trace and its prefetch hints does exactly what the hierarchy does with
// them — the same hits, misses, streamed uses, bytes read, evictions and
// prefetches issued, useful and wasted — for several policies, partitions,
// budgets and reader counts, prefetch on and off, and with the model in the
// page cache (DirectAuto: the uses the RAM tier does not hold are the page
// cache's, not admitted) or read without it there (DirectOff: every miss
// admitted).
func TestSimulatorCountsAsTheHierarchy(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	cfg := ck.Config()
	for l, sp := range cfg.Sparse {
		if !sp {
			t.Fatalf("layer %d of the test model is dense: the replay below maps layers one to one", l)
		}
	}
	d := policy.Dims{Layers: cfg.Layers, Experts: cfg.Experts}
	g, err := trace.ParseSynthetic("zipf:s=1.1,reuse=0.4,seed=3")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Synthesize(g, d.Layers, d.Experts, cfg.TopK, 40)
	if err != nil {
		t.Fatal(err)
	}
	// Hints as the engine gives them, before each step's Stream, for the
	// next step's layer: its first expert (a rank that always comes true,
	// soon read ahead), its second four times in five (a rank whose trust
	// comes and goes), some others (right about half of the time: never
	// read ahead), a wrong one, and the previous token's.
	hints := make([]sim.Hint, tr.Tokens()*d.Layers)
	for i := range len(hints) - 1 {
		tok, l := (i+1)/d.Layers, (i+1)%d.Layers
		next := tr.Step(tok, l)
		var xs []int32
		add := func(e int32) {
			for _, x := range xs {
				if x == e {
					return
				}
			}
			xs = append(xs, e)
		}
		add(next[0])
		if len(next) > 1 {
			if i%5 != 0 {
				add(next[1])
			} else {
				add(int32((i*11 + 3) % d.Experts))
			}
		}
		for j, e := range next[min(2, len(next)):] {
			if (i+j)%2 == 0 {
				add(e)
			}
		}
		add(int32((i * 7) % d.Experts))
		if tok > 0 {
			for _, e := range tr.Step(tok-1, l) {
				add(e)
			}
		}
		hints[i] = sim.Hint{Layer: l, Experts: xs}
	}
	heat := tr.Counts()
	pg := int64(weights.PageSize)
	size := (int64(ck.ExpertBytes(0, 0)) + pg - 1) / pg * pg
	probed := pageCacheProbes(t, ck)
	var total sim.Counters
	defer func() {
		t.Logf("over all: %+v", total)
		if total.PrefetchUseful == 0 || total.PrefetchWasted == 0 || total.Evictions == 0 || total.Hits == 0 || (probed && total.PageCacheUses == 0) {
			t.Errorf("the cases do not exercise the hierarchy: %+v over all", total)
		}
	}()
	for _, c := range []struct {
		slots, readers int
		policy         string
		part           policy.Partition
		heat           bool
	}{
		{4, 1, "lru", policy.Global, false}, // one layer's experts: prefetches find every copy pinned
		{6, 1, "lru", policy.Global, false},
		{12, 8, "heat", policy.Global, false},
		{12, 8, "heat", policy.Global, true},
		{16, 3, "leaststale", policy.PerLayer, false},
		{20, 8, "lfu", policy.PerLayer, false},
		{24, 4, "lru2", policy.Global, false},
		{32, 1, "lru", policy.Global, false},  // one prefetch read at a time
		{64, 8, "heat", policy.Global, false}, // everything fits
	} {
		for _, cached := range []bool{false, true} {
			for _, prefetch := range []bool{false, true} {
				name := fmt.Sprintf("%d-slots-%d-readers-%s-%v-heat%v-prefetch%v-pagecache%v", c.slots, c.readers, c.policy, c.part, c.heat, prefetch, cached)
				t.Run(name, func(t *testing.T) {
					direct := readMode(t, cached, probed, dir)
					var po policy.Options
					if c.heat {
						po.Heat = heat
					}
					var eb int64
					st := residentRun(t, cached, dir, func() Stats {
						h, err := New(ck, Options{RAMBudget: int64(c.slots) * size, StagingBudget: 4 * size, Readers: c.readers, Hashers: 1,
							Policy: c.policy, Partition: c.part, PolicyOptions: po, Prefetch: prefetch, Direct: direct, PageCache: cached})
						if err != nil {
							t.Fatal(err)
						}
						defer h.Close()
						for tok := range tr.Tokens() {
							for l := range d.Layers {
								h.quiesce()
								set := tr.Step(tok, l)
								xs := make([]int, len(set))
								for j, e := range set {
									xs[j] = int(e)
								}
								if hn := hints[tok*d.Layers+l]; len(hn.Experts) > 0 {
									ys := make([]int, len(hn.Experts))
									for j, e := range hn.Experts {
										ys[j] = int(e)
									}
									// As the engine does: the hint for the next
									// step's layer, given before this step's Stream.
									h.Hint(hn.Layer, ys)
								}
								cc := countConsumer{h: h, k: len(xs)}
								if err := h.Stream(context.Background(), l, xs, &cc); err != nil {
									t.Fatal(err)
								}
								if cc.n != len(xs) {
									t.Fatalf("token %d layer %d: %d experts consumed, want %d", tok, l, cc.n, len(xs))
								}
							}
						}
						h.quiesce()
						eb = int64(h.ExpertBytes())
						return h.Stats()
					})
					hw := sim.Hardware{StorageGBps: 1000, QueueDepth: c.readers, H2DGBps: 1, HashGBpsPerCore: 1000, HashCores: 4,
						CPUExpertUS: 1, DenseMSPerLayer: 1}
					sc := sim.Config{Hardware: hw, ExpertBytes: eb, RAMSlots: st.RAMCap, Policy: c.policy,
						Partition: c.part.String(), Options: po, PageCache: cached}
					if prefetch {
						// The sim's hint i is given before step i's Stream.
						sc.Hints = hints
					}
					r, err := sim.Run(tr, sc)
					if err != nil {
						t.Fatal(err)
					}
					want := sim.Counters{Hits: st.Hits, Misses: st.Misses, Streamed: st.Streamed, BytesRead: st.BytesRead, Evictions: st.Evictions,
						PrefetchIssued: st.PrefetchIssued, PrefetchUseful: st.PrefetchUseful, PrefetchWasted: st.PrefetchWasted, PrefetchSkipped: st.PrefetchSkipped,
						PrefetchBackedOff: st.PrefetchBackedOff, PrefetchCached: st.PrefetchCached, PrefetchProbes: st.PrefetchProbes, PrefetchUnused: st.PrefetchUnused, PrefetchLost: st.PrefetchLost, PrefetchLate: st.PrefetchLate,
						PageCacheUses: st.PageCacheUses}
					if *r.Counters != want {
						t.Errorf("simulated %+v\nhierarchy %+v", *r.Counters, want)
					}
					uses := float64(st.Hits + st.Misses + st.Streamed)
					if r.HitRAM != float64(st.Hits)/uses || r.StorageBytesPerToken != float64(st.BytesRead)/float64(tr.Tokens()) {
						t.Errorf("simulated hit rate %v, %v bytes per token; hierarchy %v, %v", r.HitRAM, r.StorageBytesPerToken,
							float64(st.Hits)/uses, float64(st.BytesRead)/float64(tr.Tokens()))
					}
					total.Hits += r.Counters.Hits
					total.Evictions += r.Counters.Evictions
					total.PrefetchUseful += r.Counters.PrefetchUseful
					total.PrefetchWasted += r.Counters.PrefetchWasted
					total.PageCacheUses += r.Counters.PageCacheUses
					total.PrefetchUnused += r.Counters.PrefetchUnused
					total.PrefetchBackedOff += r.Counters.PrefetchBackedOff
					total.PrefetchProbes += r.Counters.PrefetchProbes
					total.PrefetchSkipped += r.Counters.PrefetchSkipped
					total.PrefetchIssued += r.Counters.PrefetchIssued
				})
			}
		}
	}
}

// pageCacheProbes reports whether a DirectAuto hierarchy over ck asks the
// page cache (O_DIRECT is allowed here, and a buffered descriptor is kept
// beside it).
func pageCacheProbes(t *testing.T, ck *weights.Checkpoint) bool {
	t.Helper()
	h, err := New(ck, Options{StagingBudget: Auto, Direct: DirectAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, fd := range h.files.fds {
		if fd.cached != nil {
			return true
		}
	}
	return false
}

// residentRun returns the Stats of one run of a case. With cached, the
// case counts on every page of the model's files staying in the page cache
// (the simulator's page cache holds every expert); a kernel short of memory
// may evict some mid-run (CI's memory is shared with other packages'
// tests, which write files), and the hierarchy then rightly reads those
// records past it. Such a run says nothing against the simulator: it is
// run again, after the files are read back in, at most three times. A run
// that read past the page cache while every page of the files is still
// there (O_DIRECT does not bring pages in) is the hierarchy's fault, and
// fails.
func residentRun(t *testing.T, cached bool, dir string, run func() Stats) Stats {
	t.Helper()
	for try := 1; ; try++ {
		st := run()
		if !cached || st.DirectReads == 0 {
			return st
		}
		if !evicted(t, dir) {
			t.Fatalf("%d reads bypassed the page cache, yet every page of the model's files is in it", st.DirectReads)
		}
		if try == 3 {
			t.Fatalf("the kernel evicted pages of the model's files in %d runs in a row (%d reads bypassed the page cache in the last)", try, st.DirectReads)
		}
		t.Logf("run %d: the kernel evicted pages of the model's files (%d reads bypassed the page cache); again", try, st.DirectReads)
		inPageCache(t, dir)
	}
}

// evicted reports whether some page of the model's files is not in the
// page cache.
func evicted(t *testing.T, dir string) bool {
	t.Helper()
	layers, err := filepath.Glob(filepath.Join(dir, "*.jnf"))
	if err != nil || len(layers) == 0 {
		t.Fatalf("no JNF files in %s: %v", dir, err)
	}
	for _, l := range layers {
		f, err := os.Open(l)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err == nil && fi.Size() > 0 && !pagecache.Resident(int(f.Fd()), 0, int(fi.Size())) {
			f.Close()
			return true
		}
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return false
}

// readMode is the Direct mode of a case: DirectOff (every read buffered),
// or with cached DirectAuto over the model's files made resident in the
// page cache (skipped where DirectAuto has nothing to ask: probed false).
func readMode(t *testing.T, cached, probed bool, dir string) DirectMode {
	t.Helper()
	if !cached {
		return DirectOff
	}
	if !probed {
		t.Skip("no O_DIRECT here: DirectAuto reads through the page cache and asks it nothing")
	}
	inPageCache(t, dir)
	return DirectAuto
}

// inPageCache reads the model's files, so that every page of them is in the
// page cache (another test may have dropped them).
func inPageCache(t *testing.T, dir string) {
	t.Helper()
	layers, err := filepath.Glob(filepath.Join(dir, "*.jnf"))
	if err != nil || len(layers) == 0 {
		t.Fatalf("no JNF files in %s: %v", dir, err)
	}
	for _, l := range layers {
		if _, err := os.ReadFile(l); err != nil {
			t.Fatal(err)
		}
	}
}
