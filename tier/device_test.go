package tier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/sim"
	"github.com/tarfa-ai/tarfa/tier/trace"
	"github.com/tarfa-ai/tarfa/weights"
)

// TestDeviceLevelDoesNotChangeABit: the engine on a simulated device (its
// copies checked against their digests) and on the CPU with host-memory
// slots, with the hierarchy's device level over their slots — few, some,
// every expert; several policies; inclusive and exclusive — computes the
// logits of the default path bit for bit, serves hits from the slots
// (bound, no bytes moved) when they are many, and counts every use at the
// device level.
func TestDeviceLevelDoesNotChangeABit(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want [][][]float32
	for _, p := range prompts {
		rows, err := run(t, ref, p, 8)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rows)
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	n := ck.Config().Layers * ck.Config().Experts
	for _, c := range []struct {
		be        string
		slots     int
		policy    string
		exclusive bool
	}{
		{"device", 4, "lru", false}, // one layer's top-k: every use a fill
		{"device", 24, "lru", false},
		{"device", 24, "heat", true},
		{"device", 1000, "", false}, // every expert: hits after the first use
		{"cpu", 24, "lfu", false},
		{"cpu", 1000, "leaststale", true},
	} {
		t.Run(fmt.Sprintf("%s-%d-%s-exclusive%v", c.be, c.slots, c.policy, c.exclusive), func(t *testing.T) {
			var be backend.Backend
			if c.be == "cpu" {
				cp := cpu.New(2)
				cp.SetSlots(c.slots)
				be = cp
			} else {
				be = backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: c.slots, VerifyCopies: true})
			}
			h, err := New(ck, Options{RAMBudget: 8 * size, StagingBudget: 4 * size, Readers: 2, Policy: c.policy,
				Slots: be.(backend.SlotPool), Exclusive: c.exclusive})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				got, err := run(t, m, p, 8)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, want[i]) {
					t.Fatalf("prompt %d: logits differ from the default path", i)
				}
			}
			st := h.Stats()
			bc := be.(backend.Meter).Counters()
			t.Logf("device %+v\nram %+v\nstorage %+v\nbackend %+v", st.Device, st.RAM, st.Storage, bc)
			// The experts bound from slots were computed together
			// (backend.Grouper), and gave the bits above.
			if c.be == "device" && backendtest.GroupedMatMuls(be) == 0 {
				t.Errorf("no grouped products: every expert bound from a slot was computed alone")
			}
			// With a slot for every expert, every step's experts are bound
			// and their rows are one contiguous run: one SiLU·up for all
			// of them (engine: computeHeld), between the two grouped
			// products of each step.
			if c.be == "device" && c.slots >= n {
				if g, s := backendtest.GroupedMatMuls(be), backendtest.GroupedSiLUMuls(be); s != g/2 {
					t.Errorf("%d grouped steps, %d SiLU·up launches between their products: want one a step", g/2, s)
				}
			}
			uses := m.Stats().ExpertsOnDevice + m.Stats().ExpertsOnHost
			if st.Device.Capacity != min(c.slots, n) || st.Device.Resident > st.Device.Capacity || st.Device.Uses != uses {
				t.Errorf("device level: %d slots (want %d), %d resident, %d uses (the engine computed %d)", st.Device.Capacity, min(c.slots, n), st.Device.Resident, st.Device.Uses, uses)
			}
			if st.RAM.Uses != st.Device.Uses-st.Device.Hits || st.Storage.Uses != st.RAM.Uses-st.RAM.Hits {
				t.Errorf("levels: device %d uses %d hits, RAM %d uses %d hits, storage %d uses: each level sees the misses above it",
					st.Device.Uses, st.Device.Hits, st.RAM.Uses, st.RAM.Hits, st.Storage.Uses)
			}
			if bc.ExpertsCached != st.Device.Hits {
				t.Errorf("%d device hits, the backend bound %d slots filled before", st.Device.Hits, bc.ExpertsCached)
			}
			if c.slots >= n && st.Device.Hits == 0 || c.slots == 4 && st.Device.Hits != 0 {
				t.Errorf("%d slots: %d device hits", c.slots, st.Device.Hits)
			}
			// Every miss fills a slot when there is one for every expert;
			// with fewer, a step's experts beyond the free slots take the
			// host path (no fill).
			eb := ck.ExpertBytes(0, 0)
			if fills := st.Device.Uses - st.Device.Hits; st.Device.BytesCopied%eb != 0 || st.Device.BytesCopied > fills*eb ||
				(c.slots >= n && st.Device.BytesCopied != fills*eb) || st.Device.BytesCopied == 0 {
				t.Errorf("%d bytes copied for %d misses of %d bytes", st.Device.BytesCopied, fills, eb)
			}
			if c.exclusive && st.RAMResident != 0 {
				t.Errorf("exclusive: %d experts resident in the RAM tier beside the device's", st.RAMResident)
			}
			if n, err := m.Scrub(); err != nil || (c.be == "device" && be.(backend.Meter).Counters().DeviceScrubbedBytes == 0) || n == 0 {
				t.Errorf("scrub: %d bytes, %v; the device scrubbed %d", n, err, be.(backend.Meter).Counters().DeviceScrubbedBytes)
			}
		})
	}
}

// TestDeviceLevelBadCopy: a copy into a device slot that differs from its
// digest (the device's check of the fill) stops the run naming the expert;
// the slot is then never bound — the next run fills it again (the fake
// device refuses a bind of a slot whose check failed, so a bind would fail
// the run) — and computes the default path's bits. A bit flipped in a
// filled slot afterwards is found by the model's scrub, and the next use
// fills that slot again too.
func TestDeviceLevelBadCopy(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := run(t, ref, prompts[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ck.Config()
	first := -1
	for l, sp := range cfg.Sparse {
		if sp && first < 0 {
			first = l
		}
	}
	be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: 1000, VerifyCopies: true})
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, err := New(ck, Options{RAMBudget: 8 * size, StagingBudget: 4 * size, Slots: be.(backend.SlotPool)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	var digests []jnf.Digest
	for e := range cfg.Experts {
		r, err := ck.ExpertRef(first, e)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, r.Digest())
		backendtest.CorruptCopies(be, r.Digest(), true)
	}
	_, err = run(t, m, prompts[0], 4)
	if !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), fmt.Sprintf("layer %d expert", first)) {
		t.Fatalf("a corrupted copy into a slot: %v; want a verification error naming an expert of layer %d", err, first)
	}
	t.Log(err)
	for _, d := range digests {
		backendtest.CorruptCopies(be, d, false)
	}
	got, err := run(t, m, prompts[0], 4)
	if err != nil {
		t.Fatalf("the run after the bad copy: %v (a slot whose check failed was bound, or not refilled)", err)
	}
	if !same(got, want) {
		t.Fatal("logits after the bad copy differ from the default path")
	}
	// A flip in a resident slot: the scrub finds it, and the next run
	// fills the slot again rather than binding it.
	flipped := false
	for _, d := range digests {
		if backendtest.FlipResident(be, d) {
			flipped = true
			break
		}
	}
	if !flipped {
		t.Fatalf("no slot holds an expert of layer %d", first)
	}
	if _, err := m.Scrub(); !errors.Is(err, jnf.ErrVerification) {
		t.Fatalf("scrub after a flipped slot: %v; want a verification error", err)
	}
	fills := h.Stats().Device.BytesCopied
	got, err = run(t, m, prompts[0], 4)
	if err != nil || !same(got, want) {
		t.Fatalf("the run after the scrub: %v, same bits %v", err, same(got, want))
	}
	if h.Stats().Device.BytesCopied == fills {
		t.Error("the slot the scrub emptied was not filled again")
	}
}

// slotConsumer fills and binds as a Stream places, on a queue of the
// simulated device, counting what it was given.
type slotConsumer struct {
	q                  backend.Queue
	I, H               int
	fills, binds, host int
}

// newSlotConsumer is a slotConsumer on a new queue of be, for the
// experts of cfg.
func newSlotConsumer(tb testing.TB, be backend.Backend, cfg *hf.Config) slotConsumer {
	tb.Helper()
	q, err := be.NewQueue()
	if err != nil {
		tb.Fatal(err)
	}
	return slotConsumer{q: q, I: cfg.MoEIntermediate, H: cfg.Hidden}
}

// everyExpert is 0, 1, …, n−1.
func everyExpert(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

func (c *slotConsumer) Consume(x int, p expertstream.Placed, _ ledger.Tier) error {
	if p.Slot == nil {
		c.host++
		return nil
	}
	sq := c.q.(backend.SlotQueue)
	if p.Filled {
		c.binds++
	} else {
		ve := p.Host
		if err := sq.FillSlot(p.Slot, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), c.I, c.H); err != nil {
			return err
		}
		c.fills++
	}
	var ex backend.Expert
	if err := sq.BindSlot(&ex, p.Slot, p.ID, p.Digest); err != nil {
		return err
	}
	c.q.ReleaseExpert(&ex)
	return nil
}

// TestSimulatorCountsAsTheDeviceLevel: the simulator replaying a routing
// trace through device slots and a RAM tier counts what the hierarchy's
// device level does with the same trace and policy — the same uses and
// hits at each level (device, RAM, storage) — for several policies, slot
// counts and budgets, inclusive and exclusive.
func TestSimulatorCountsAsTheDeviceLevel(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	probed := pageCacheProbes(t, ck)
	cfg := ck.Config()
	d := policy.Dims{Layers: cfg.Layers, Experts: cfg.Experts}
	g, err := trace.ParseSynthetic("zipf:s=1.1,reuse=0.4,seed=5")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Synthesize(g, d.Layers, d.Experts, cfg.TopK, 40)
	if err != nil {
		t.Fatal(err)
	}
	pg := int64(weights.PageSize)
	size := (int64(ck.ExpertBytes(0, 0)) + pg - 1) / pg * pg
	var total sim.Levels
	for _, c := range []struct {
		dev, ram  int
		policy    string
		part      policy.Partition
		exclusive bool
	}{
		{4, 8, "lru", policy.Global, false},
		{8, 16, "lru", policy.Global, false},
		{8, 16, "lru", policy.Global, true},
		{12, 6, "lfu", policy.Global, false},
		{16, 24, "leaststale", policy.PerLayer, false},
		{20, 40, "lru2", policy.Global, true},
	} {
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("dev%d-ram%d-%s-%v-exclusive%v-pagecache%v", c.dev, c.ram, c.policy, c.part, c.exclusive, cached), func(t *testing.T) {
				direct := readMode(t, cached, probed, dir)
				var sc *slotConsumer
				var eb int64
				st := residentRun(t, cached, dir, func() Stats {
					be := backendtest.NewDevice(1, c.dev)
					h, err := New(ck, Options{RAMBudget: int64(c.ram) * size, StagingBudget: 4 * size, Readers: 2, Hashers: 1,
						Policy: c.policy, Partition: c.part, Slots: be.(backend.SlotPool), Exclusive: c.exclusive, Direct: direct, PageCache: cached})
					if err != nil {
						t.Fatal(err)
					}
					defer h.Close()
					slots := newSlotConsumer(t, be, cfg)
					sc = &slots
					for tok := range tr.Tokens() {
						for l := range d.Layers {
							set := tr.Step(tok, l)
							xs := make([]int, len(set))
							for j, e := range set {
								xs[j] = int(e)
							}
							if err := h.Stream(context.Background(), l, xs, sc); err != nil {
								t.Fatal(err)
							}
							if err := sc.q.Sync(); err != nil {
								t.Fatal(err)
							}
						}
					}
					eb = int64(h.ExpertBytes())
					return h.Stats()
				})
				hw := sim.Hardware{StorageGBps: 1000, QueueDepth: 2, H2DGBps: 1, HashGBpsPerCore: 1000, HashCores: 4,
					CPUExpertUS: 1, GPUExpertUS: 1, DenseMSPerLayer: 1}
				r, err := sim.Run(tr, sim.Config{Hardware: hw, ExpertBytes: eb, RAMSlots: st.RAMCap, DeviceSlots: st.Device.Capacity,
					Policy: c.policy, Partition: c.part.String(), Exclusive: c.exclusive, PageCache: cached})
				if err != nil {
					t.Fatal(err)
				}
				got := sim.Levels{Device: sim.LevelCount{Uses: st.Device.Uses, Hits: st.Device.Hits}, RAM: sim.LevelCount{Uses: st.RAM.Uses, Hits: st.RAM.Hits},
					PageCache: sim.LevelCount{Uses: st.PageCache.Uses, Hits: st.PageCache.Hits}, Storage: sim.LevelCount{Uses: st.Storage.Uses, Hits: st.Storage.Hits}}
				if *r.Levels != got {
					t.Errorf("simulated %+v\nhierarchy %+v", *r.Levels, got)
				}
				if int64(sc.binds) != st.Device.Hits || int64(sc.fills) != st.Device.Uses-st.Device.Hits || sc.host != 0 {
					t.Errorf("delivered %d binds, %d fills, %d on the host; the device level counts %d hits of %d uses", sc.binds, sc.fills, sc.host, st.Device.Hits, st.Device.Uses)
				}
				if r.HitDevice != st.Device.HitRate() {
					t.Errorf("simulated device hit rate %v, hierarchy %v", r.HitDevice, st.Device.HitRate())
				}
				total.Device.Hits += got.Device.Hits
				total.RAM.Hits += got.RAM.Hits
				total.PageCache.Hits += got.PageCache.Hits
			})
		}
	}
	if total.Device.Hits == 0 || total.RAM.Hits == 0 || (probed && total.PageCache.Hits == 0) {
		t.Errorf("the cases do not exercise both levels: %+v", total)
	}
}

// TestRAMCopiesPlacedOnTheHost: with a device level and a RAM tier, an
// expert the device does not hold and the RAM tier does is offered to the
// engine's placement first (expertstream.HostPlacer): placed on the host,
// it takes no slot and is computed from its RAM copy; the logits are the
// default path's under every placement.
func TestRAMCopiesPlacedOnTheHost(t *testing.T) {
	ck := openCk(t, testModel(t))
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want [][][]float32
	for _, p := range prompts {
		rows, err := run(t, ref, p, 8)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rows)
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	eb := ck.ExpertBytes(0, 0)
	for _, pl := range []engine.Placement{engine.PlaceHost, engine.PlaceDevice, engine.PlaceAuto, engine.PlaceRandom, engine.PlaceBalance} {
		t.Run(string(pl)+"-", func(t *testing.T) {
			be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: 6, VerifyCopies: true})
			h, err := New(ck, Options{RAMBudget: 64 * size, StagingBudget: 4 * size, Readers: 2, Slots: be.(backend.SlotPool), Direct: DirectOff})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h, Placement: pl})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				got, err := run(t, m, p, 8)
				if err != nil {
					t.Fatal(err)
				}
				if !same(got, want[i]) {
					t.Fatalf("prompt %d: logits differ from the default path", i)
				}
			}
			st, es := h.Stats(), m.Stats()
			fills := st.Device.BytesCopied / eb
			t.Logf("placement %q: device %d/%d hit, %d filled, RAM %d/%d; on the host %d, on the device %d", pl, st.Device.Hits, st.Device.Uses, fills, st.RAM.Hits, st.RAM.Uses, es.ExpertsOnHost, es.ExpertsOnDevice)
			if st.RAM.Hits == 0 || es.ExpertsOnHost+es.ExpertsOnDevice != st.Device.Uses {
				t.Fatalf("stats: %+v, engine %+v", st, es)
			}
			switch pl {
			case engine.PlaceHost:
				// Every RAM hit below a device miss is computed on the host,
				// without a fill; only reads fill slots.
				if es.ExpertsOnHost < st.RAM.Hits || fills > st.RAM.Uses-st.RAM.Hits {
					t.Errorf("host: %d on the host for %d RAM hits, %d fills for %d reads", es.ExpertsOnHost, st.RAM.Hits, fills, st.RAM.Uses-st.RAM.Hits)
				}
			case engine.PlaceDevice:
				if es.ExpertsOnHost != 0 {
					t.Errorf("device: %d on the host", es.ExpertsOnHost)
				}
			case engine.PlaceBalance:
				// The RAM hits below a device miss are split: some on the
				// host, some filled into slots.
				if es.ExpertsOnHost == 0 || es.ExpertsOnHost >= st.RAM.Hits || fills <= st.RAM.Uses-st.RAM.Hits {
					t.Errorf("balance: %d on the host for %d RAM hits, %d fills for %d reads", es.ExpertsOnHost, st.RAM.Hits, fills, st.RAM.Uses-st.RAM.Hits)
				}
			case engine.PlaceAuto:
				// auto leaves RAM hits below a device miss to the device
				// level (engine's PreferHost): the host computes only what
				// found no free slot (a few), not the RAM hits.
				if 4*es.ExpertsOnHost > st.RAM.Hits {
					t.Errorf("auto: %d on the host for %d RAM hits (%d fills): the RAM copies were taken from the device level", es.ExpertsOnHost, st.RAM.Hits, fills)
				}
			}
		})
	}
}

// TestDeviceLevelHeldSlotsLetGoOnError: a layer whose Stream fails after
// some of its experts were bound from device slots for the grouped compute
// lets those slots go uncomputed. With the file mended, the same model runs
// on with the same slots (the fake device refuses to fill a slot a queue
// still binds) and gives the default path's bits.
func TestDeviceLevelHeldSlotsLetGoOnError(t *testing.T) {
	dir := testModel(t)
	ck := openCk(t, dir)
	ref, err := engine.Load(ck, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := run(t, ref, prompts[0], 8)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	// Slots for all but a few experts: the prompt's first layer hits, and
	// the mended run's fills must evict slots the failed step bound.
	slots := ck.Config().Layers*ck.Config().Experts - 4
	be := backendtest.NewDeviceWith(backendtest.DeviceOptions{Threads: 2, Slots: slots})
	h, err := New(ck, Options{StagingBudget: 4 * size, Readers: 2, Slots: be.(backend.SlotPool), Direct: DirectOff})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	m, err := engine.Load(ck, engine.Options{Backend: be, Experts: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, prompts[0], 4); err != nil { // some experts in slots
		t.Fatal(err)
	}
	// Every record on disk that no slot holds changed: the slots' experts
	// still bind (hits), each read fails its digest.
	files, bad := map[string][]byte{}, map[string][]byte{}
	for l := range ck.Config().Layers {
		for e := range ck.Config().Experts {
			h.mu.Lock()
			held := h.devl != nil && h.devl.cache.Contains(weights.ExpertID{Layer: l, Expert: e})
			h.mu.Unlock()
			if held {
				continue
			}
			r, _ := ck.ExpertRef(l, e)
			if _, ok := files[r.Path()]; !ok {
				b, err := os.ReadFile(r.Path())
				if err != nil {
					t.Fatal(err)
				}
				files[r.Path()], bad[r.Path()] = b, append([]byte(nil), b...)
			}
			bad[r.Path()][r.Offset()+r.Length()/3] ^= 1
		}
	}
	for p, b := range bad {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mm *jnf.MismatchError
	if _, err := run(t, m, prompts[0], 8); !errors.As(err, &mm) { // its first layer's experts: hits

		t.Fatalf("records changed on disk: %v, want a digest mismatch", err)
	}
	if st := h.Stats(); st.Device.Hits == 0 {
		t.Fatalf("no device hits before the failure: nothing was held (%+v)", st.Device)
	}
	if n := backendtest.BoundSlots(be); n != 0 {
		t.Errorf("after the failed step %d slots are still bound", n)
	}
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := run(t, m, prompts[0], 8)
	if err != nil || !same(got, want) {
		t.Fatalf("after the mend: %v, identical %v", err, same(got, want))
	}
}

// orderConsumer is a slotConsumer that records the order of deliveries
// (true: a slot to fill) and places the experts in host on the host.
type orderConsumer struct {
	slotConsumer
	host  map[int]bool
	order []bool
}

func (c *orderConsumer) PreferHost(e int, _ int64) bool { return c.host[e] }

func (c *orderConsumer) Consume(x int, p expertstream.Placed, tr ledger.Tier) error {
	if !p.Filled {
		c.order = append(c.order, p.Slot != nil)
	}
	return c.slotConsumer.Consume(x, p, tr)
}

// TestStreamDeliversHostLast: of a layer's experts the RAM tier holds, a
// Stream delivers those the consumer computes on the host after those
// that fill a device slot, so that the copies run while the host computes.
func TestStreamDeliversHostLast(t *testing.T) {
	ck := openCk(t, testModel(t))
	cfg := ck.Config()
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	be := backendtest.NewDevice(1, cfg.Experts)
	h, err := New(ck, Options{RAMBudget: int64(cfg.Layers*cfg.Experts) * size, StagingBudget: 4 * size, Readers: 2, Slots: be.(backend.SlotPool)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sc := newSlotConsumer(t, be, cfg)
	var moe []int
	for l, sp := range cfg.Sparse {
		if sp {
			moe = append(moe, l)
		}
	}
	if len(moe) < 2 {
		t.Fatalf("%d MoE layers, want two", len(moe))
	}
	all := everyExpert(cfg.Experts)
	consumer := func(host func(e int) bool) *orderConsumer {
		c := &orderConsumer{slotConsumer: sc, host: map[int]bool{}}
		for _, e := range all {
			c.host[e] = host(e)
		}
		return c
	}
	// Every expert of two layers into the RAM tier; the device's slots
	// (one layer's worth) end up holding the second layer's.
	for _, l := range moe[:2] {
		if err := h.Stream(context.Background(), l, all, consumer(func(int) bool { return false })); err != nil {
			t.Fatal(err)
		}
	}
	// The first layer again: its even experts on the host, the odd ones
	// filled into slots.
	c := consumer(func(e int) bool { return e%2 == 0 })
	if err := h.Stream(context.Background(), moe[0], all, c); err != nil {
		t.Fatal(err)
	}
	if err := sc.q.Sync(); err != nil {
		t.Fatal(err)
	}
	t.Logf("deliveries (true: a slot to fill): %v", c.order)
	if c.fills != cfg.Experts/2 || c.slotConsumer.host != cfg.Experts-cfg.Experts/2 {
		t.Fatalf("%d fills and %d on the host of %d experts", c.fills, c.slotConsumer.host, cfg.Experts)
	}
	for i := 1; i < len(c.order); i++ {
		if c.order[i] && !c.order[i-1] {
			t.Fatalf("deliveries (true: a slot to fill) %v: a fill after an expert computed on the host", c.order)
		}
	}
}
