package tier

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/weights"
)

// Options configures a Hierarchy.
type Options struct {
	// RAMBudget is the bytes of the RAM tier: verified copies kept
	// resident between uses. 0: none (every use reads from storage).
	RAMBudget int64
	// StagingBudget is the bytes of staging buffers in host memory: copies
	// in flight (being read, hashed or computed) that are not resident in
	// the RAM tier. (It was DeviceBudget, and --device-budget: the buffers
	// are host memory, whatever device computes with them.) It
	// must hold at least one expert; with fewer slots than a step needs, the
	// step streams through them.
	StagingBudget int64
	// Pinner, if set, pins the staging buffers and the RAM tier's (a
	// device backend's pinned memory: reads land where the backend copies
	// to the device from, and a resident copy is copied from where it
	// lies, with no staging copy on the step's goroutine). Nil, or a
	// buffer it fails to pin: ordinary memory.
	Pinner weights.Pinner
	// Readers is the number of reads in flight (0: DefaultReaders).
	Readers int
	// Hashers is the number of goroutines verifying what the readers read
	// (0: GOMAXPROCS, every core).
	Hashers int
	// Direct chooses O_DIRECT reads.
	Direct DirectMode
	// PageCache, with DirectAuto, makes the page cache the RAM level for the
	// records it holds: a RAM-tier miss whose pages are all there is read
	// from there into a staging buffer, hashed, and not admitted
	// (Stats.PageCacheUses). The commands set it with --direct auto.
	PageCache bool
	// Policy names the RAM tier's policy (policy.Names; "" = policy.Default)
	// and Partition how its capacity is split between layers.
	Policy    string
	Partition policy.Partition
	// PolicyOptions tune the policy (the heat ledger for "heat").
	PolicyOptions policy.Options
	// Prefetch reads the experts the engine expects next (Hint) into the
	// RAM tier while the current layer computes. Speed only: results never
	// depend on it.
	Prefetch bool
	// DevicePrefetch copies, at the end of each Stream, the experts the
	// engine expects next (Hint) that the RAM tier holds and the device
	// level does not into device slots (admitted under the device level's
	// policy; a consumer that is an expertstream.Prefiller fills them on
	// its queue), so that the copies run beside the next layer's dense
	// work instead of before its experts' compute; as far as they pay, by
	// the rule of policy.ReadAhead with its own measures (devprefetch.go).
	// It needs a device level and a RAM tier. Speed only: results never
	// depend on it.
	DevicePrefetch bool
	// Scrub schedules the re-verification of resident copies (the zero
	// value: none; the commands default to DefaultScrub).
	Scrub Scrub
	// ScrubExtra, if set, re-hashes copies kept resident outside the
	// hierarchy (the model's non-expert tensors: engine.Model.Scrub) on
	// every background pass and ScrubAll, returning the bytes checked.
	ScrubExtra func() (int64, error)

	// Slots, if set, is the device level (device.go): a backend's expert
	// slots, as many as the pool has room for at the first Stream (after
	// the model's weights), at most one per expert and DeviceSlots (0: no
	// bound). Nil: no device level (every expert is delivered as verified
	// host bytes).
	Slots       backend.SlotPool
	DeviceSlots int
	// DevicePolicy names the device level's policy ("": Policy's).
	DevicePolicy string
	// Exclusive makes the RAM tier and the device level hold different
	// experts (device.go); the default is inclusive.
	Exclusive bool
}

// DefaultReaders is the default number of reads in flight.
const DefaultReaders = 8

// Auto, as a budget, lets New choose: for the RAM tier every routed expert
// if they fit in half of the memory the system reports available, else
// that half; for staging buffers two steps' worth (2 × top-k experts), so
// reads overlap with compute.
const Auto = -1

// autoBudgets resolves Auto budgets for a model with n experts of size
// bytes each and top-k k.
func autoBudgets(opt *Options, n, size, k int) {
	if opt.StagingBudget == Auto {
		opt.StagingBudget = int64(2*k) * int64(size)
	}
	if opt.RAMBudget == Auto {
		all := int64(n) * int64(size)
		if avail := availableMemory(); avail > 0 {
			opt.RAMBudget = min(all, avail/2)
		} else {
			opt.RAMBudget = min(all, 1<<30)
		}
	}
}

// Level is one level's counters: the device level (expert slots), the RAM
// tier, storage.
//   - Uses: expert uses that looked at this level (every use for the top
//     level; a level below sees the misses above it).
//   - Hits: uses it served (storage serves every use it sees).
//   - BytesRead and BytesHashed: read from storage and hashed (storage;
//     prefetch reads included).
//   - BytesCopied: the device level's, the verified bytes delivered to
//     fill its slots (copied to the device by the consumer).
//   - Evictions, Capacity and Resident: experts evicted, the slots, and
//     the experts resident now.
type Level struct {
	Uses        int64 `json:"uses"`
	Hits        int64 `json:"hits"`
	BytesRead   int64 `json:"bytes_read,omitempty"`
	BytesHashed int64 `json:"bytes_hashed,omitempty"`
	BytesCopied int64 `json:"bytes_copied,omitempty"`
	Evictions   int64 `json:"evictions,omitempty"`
	Capacity    int   `json:"capacity"`
	Resident    int   `json:"resident"`
}

// HitRate is Hits ÷ Uses (0 without uses).
func (l Level) HitRate() float64 {
	if l.Uses == 0 {
		return 0
	}
	return float64(l.Hits) / float64(l.Uses)
}

// Stats are cumulative counters of a Hierarchy. Device, RAM and Storage are
// the per-level view (Level); the flat counters are the RAM tier's and the
// reads', as before the device level (Hits, Misses and Streamed count the
// uses the RAM tier saw: the device level's misses and the uses it had no
// slot for).
type Stats struct {
	Device Level `json:"device"`
	RAM    Level `json:"ram"`
	// PageCache sees the RAM tier's misses and serves those it holds
	// (PageCacheUses); Storage sees the rest. BytesRead and BytesHashed
	// are Storage's: every read, from the page cache or the device.
	PageCache Level `json:"page_cache"`
	Storage   Level `json:"storage"`

	Hits     int64 `json:"hits"`     // uses served by a resident RAM-tier copy
	Misses   int64 `json:"misses"`   // reads admitted to the RAM tier
	Streamed int64 `json:"streamed"` // reads through staging buffers only
	// PageCacheUses, of Streamed, are the uses the page cache served: with
	// DirectAuto a record the RAM tier does not hold whose pages are all in
	// the page cache (a repeat run's) is read from there into a staging
	// buffer and hashed, and not admitted — the page cache already is a
	// RAM level, and a copy of it would cost fresh memory for every expert.
	PageCacheUses int64 `json:"page_cache_uses"`
	BytesRead     int64 `json:"bytes_read"`
	BytesHashed   int64 `json:"bytes_hashed"`
	DirectReads   int64 `json:"direct_reads"` // reads that bypassed the page cache
	// CachedReads are the reads DirectAuto served from the page cache
	// (a repeat run's): pieces of records it found there (every page of a
	// piece asked, or three pages of the record by a Stream, whose pages
	// evicted since are read like any buffered one); Buffered the others
	// that went through it.
	CachedReads int64 `json:"cached_reads"`
	Buffered    int64 `json:"buffered_reads"`
	Evictions   int64 `json:"evictions"`
	Failures    int64 `json:"failures"` // reads that did not verify

	MaxStagingInUse int   `json:"max_staging_in_use"` // most staging buffers in use at once
	StagingCap      int   `json:"staging_slots"`
	RAMResident     int   `json:"ram_resident"`
	RAMCap          int   `json:"ram_capacity"`
	MaxMapped       int64 `json:"max_mapped_bytes"` // most arena bytes mapped at once (never above the budgets)

	ScrubPasses   int64 `json:"scrub_passes"`   // full passes (background and ScrubAll)
	ScrubbedBytes int64 `json:"scrubbed_bytes"` // by passes, Scrub and on-use checks
	ScrubFailures int64 `json:"scrub_failures"` // copies found changed in memory

	// DevicePrefetched are the experts DevicePrefetch copied into device
	// slots; DevicePrefetchUsed those the next Stream of their layer then
	// bound, DevicePrefetchUnused those it did not (the hint was wrong, or
	// the slot was taken first); DevicePrefetchSkipped the hinted experts
	// in the RAM tier not copied because their rank does not pay, or their
	// layer's copies ahead were not kept (policy.ReadAhead).
	DevicePrefetched      int64 `json:"device_prefetched,omitempty"`
	DevicePrefetchUsed    int64 `json:"device_prefetch_used,omitempty"`
	DevicePrefetchUnused  int64 `json:"device_prefetch_unused,omitempty"`
	DevicePrefetchSkipped int64 `json:"device_prefetch_skipped,omitempty"`

	PrefetchIssued int64 `json:"prefetch_issued"` // reads started by a hint
	PrefetchBytes  int64 `json:"prefetch_bytes"`  // of BytesRead, read by those (counted as they are read, like BytesRead)
	PrefetchUseful int64 `json:"prefetch_useful"` // of which a Stream then hit
	PrefetchWasted int64 `json:"prefetch_wasted"` // evicted before any use
	// PrefetchSkipped are hinted experts not read ahead because their rank
	// does not pay (policy.ReadAhead: p·h ≤ 1 − p even with every read
	// ahead in time, p its hints' precision less its error).
	PrefetchSkipped int64 `json:"prefetch_skipped"`
	// PrefetchCached are hinted experts not read ahead because the page
	// cache holds them (PageCache; asked as a Stream asks): their step
	// reads them from there.
	PrefetchCached int64 `json:"prefetch_cached"`
	// PrefetchBackedOff are hinted experts of a rank that would pay with
	// reads ahead in time and kept, not read ahead: at the place they would
	// take among their hint's reads ahead, their layer's reads ahead were
	// not in time (the share of the read they hid, h) or not kept until
	// their step (policy.ReadAhead).
	PrefetchBackedOff int64 `json:"prefetch_backed_off"`
	// PrefetchProbes, of PrefetchIssued, were read by probes: a layer that
	// held reads back in 16 of its hints in a row reads ahead, with its
	// next one, every rank that pays with reads in time and kept, to
	// measure them again.
	PrefetchProbes int64 `json:"prefetch_probes"`
	// Of the reads ahead, measured at the first Stream of their layer after
	// they were issued: PrefetchUnused that Stream did not use (the hint was
	// wrong, or the copy was evicted first: PrefetchLost, of those, the
	// hint came true); PrefetchLate it used while they were still being
	// read. PrefetchSavedSeconds is the read time the used ones hid (a
	// reader starting it to verified; to the Stream's start for a late
	// one), PrefetchUnusedSeconds the read time of the unused ones: at most
	// the storage and hash time they took from needed reads.
	PrefetchUnused        int64   `json:"prefetch_unused"`
	PrefetchLost          int64   `json:"prefetch_lost"`
	PrefetchLate          int64   `json:"prefetch_late"`
	PrefetchSavedSeconds  float64 `json:"prefetch_saved_seconds"`
	PrefetchUnusedSeconds float64 `json:"prefetch_unused_seconds"`
	// HintsScored are the hinted experts scored against what their layer
	// then used, HintsTrue those it used (read ahead or not): the hints'
	// precision, p in policy.ReadAhead's rule.
	HintsScored int64 `json:"hints_scored"`
	HintsTrue   int64 `json:"hints_true"`
	// By rank (all layers): rank i is the i-th expert of a hint (the
	// engine lists the next layer's router's choices first).
	HintsScoredByRank []int64 `json:"hints_scored_by_rank,omitempty"`
	HintsTrueByRank   []int64 `json:"hints_true_by_rank,omitempty"`
}

// Hierarchy serves a checkpoint's routed experts to the engine (an
// expertstream.Source) through a RAM tier and staging buffers. It is safe for
// concurrent use by several sessions.
type Hierarchy struct {
	ck      *weights.Checkpoint
	dims    policy.Dims
	refs    []weights.ExpertRef // by dense index
	size    int                 // arena buffer size: the largest expert read
	ram     *weights.Arena
	dev     *weights.Arena
	files   *files
	reqs    chan readReq   // reads a Stream waits for
	preqs   chan readReq   // reads ahead (hints, warm): served when reqs is empty
	rwg     sync.WaitGroup // readers
	pieces  pieceQueue     // the reads' pieces, in order, for any reader (pipeline.go)
	hashQ   chan part      // parts of reads a Stream waits for, for any hasher
	phashQ  chan part      // parts of reads ahead: hashed when hashQ is empty
	hwg     sync.WaitGroup // hashers
	wg      sync.WaitGroup // the prefetcher
	wwg     sync.WaitGroup // warm feeders
	closing chan struct{}
	slots   chan struct{} // one token per staging buffer: Streams wait here for one

	mu        sync.Mutex
	loaded    *sync.Cond // broadcast when a RAM-tier read finishes
	cache     *policy.Cache
	resident  map[int]*entry
	token     int64 // layer clock: token·Layers + layer
	lastLayer int

	// the device level (device.go), set up at the first Stream
	devl    *devLevel
	devDone bool
	devErr  error
	recMax  int64 // the largest expert record (a slot's size)

	poolMu sync.Mutex
	pool   []*stream // free Stream scratch, never dropped (a sync.Pool is emptied by every GC)
	opt    Options   // with Auto budgets resolved

	hintMu    sync.Mutex
	hint      []int // experts of hintLayer expected next
	hintLayer int
	ra        policy.ReadAhead // under mu: which hinted experts are read ahead
	ahead     []*entry         // under mu: reads ahead whose outcome is not measured yet, in issue order
	// the device prefetch (devprefetch.go), under mu: the hint it acts on,
	// its rule's state, and its copies whose outcome is not measured yet
	dhint      []int
	dhintLayer int
	dra        policy.ReadAhead
	dahead     []*devEntry
	prefetchQ  chan readDone // replies of prefetch reads
	inflightP  int           // prefetch reads in flight (under mu)

	statsMu sync.Mutex
	stats   Stats

	started     time.Time       // when New verified nothing yet (ScrubExtra's last check)
	fault       *ScrubFault     // under mu
	scrubMu     sync.Mutex      // one scrub at a time
	scrubCursor int             // under mu: where Scrub continues
	scrubBuf    *weights.Buffer // under mu: the buffer the scrub hashes outside mu
	scrubOrphan bool            // under mu: scrubBuf's copy is gone; the scrub releases it
}

// Entry states.
const (
	loading = iota
	ready
	failed
)

// entry is one RAM-tier copy; state and err change under Hierarchy.mu.
type entry struct {
	id    weights.ExpertID
	k     int // dense index
	buf   *weights.Buffer
	ve    weights.VerifiedExpert
	state int
	err   error
	// prefetched: read on a hint and not used since (for the useful and
	// wasted counts); warm: by Warm, without a lease.
	prefetched, warm bool
	verifiedAt       time.Time // when its bytes last matched the digest
	// A read ahead's outcome (policy.ReadAhead.Used, Unused): ahead until
	// the first Stream of its layer since it was issued measures it (in
	// Hierarchy.ahead until then). took is its read's time, from a reader
	// starting it to verified (0 until then). late: that Stream used it
	// before it was verified, at usedAt; unused: that Stream did not use
	// it, before it was verified. Either is counted when it is.
	// evicted: before its step (it stays in Hierarchy.ahead).
	ahead, late, unused, evicted bool
	place                        int // among its hint's reads ahead (policy.ReadAhead.Decide)
	usedAt                       time.Time
	took                         time.Duration
}

// readReq asks a reader to read and verify one expert.
type readReq struct {
	ref     weights.ExpertRef
	buf     *weights.Buffer
	x       int    // expert index
	e       *entry // RAM-tier entry, or nil for a staging buffer
	reply   chan<- readDone
	started time.Time // when a reader started it (set by the reader of its first piece)
	// known: the Stream found every page of it in the page cache just
	// now; the readers copy it from there without asking again.
	known bool
}

type readDone struct {
	readReq
	ve  weights.VerifiedExpert
	err error
}

// New builds a hierarchy over ck and starts its readers; Close stops them.
func New(ck *weights.Checkpoint, opt Options) (*Hierarchy, error) {
	cfg := ck.Config()
	h := &Hierarchy{ck: ck, dims: policy.Dims{Layers: cfg.Layers, Experts: cfg.Experts}, resident: map[int]*entry{}, lastLayer: 1 << 30}
	if err := h.dims.Check(); err != nil {
		return nil, err
	}
	h.loaded = sync.NewCond(&h.mu)
	h.refs = make([]weights.ExpertRef, h.dims.N())
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue
		}
		for e := range cfg.Experts {
			ref, err := ck.ExpertRef(l, e)
			if err != nil {
				return nil, err
			}
			h.refs[h.dims.Index(weights.ExpertID{Layer: l, Expert: e})] = ref
			h.size = max(h.size, int(ref.ReadLength()))
			h.recMax = max(h.recMax, ref.Length())
		}
	}
	if h.size == 0 {
		return nil, errors.New("tier: the model has no routed experts")
	}
	moe := 0
	for _, sp := range cfg.Sparse {
		if sp {
			moe++
		}
	}
	autoBudgets(&opt, moe*cfg.Experts, h.size, cfg.TopK)
	if opt.DevicePrefetch && opt.Exclusive {
		return nil, errors.New("tier: the device prefetch copies from the RAM tier's copies, which an exclusive device level does not keep: DevicePrefetch needs an inclusive one")
	}
	if opt.DevicePrefetch && opt.RAMBudget <= 0 {
		return nil, errors.New("tier: the device prefetch copies from the RAM tier, and the RAM budget is 0: DevicePrefetch needs a RAM tier")
	}
	if opt.Scrub.Every > 0 && opt.Scrub.Every < MinScrubEvery {
		return nil, fmt.Errorf("tier: a scrub pass every %v is more often than every %v", opt.Scrub.Every, MinScrubEvery)
	}
	h.opt = opt
	var err error
	if h.dev, err = weights.NewArena(h.size, opt.StagingBudget); err != nil {
		return nil, fmt.Errorf("tier: the device budget of %d bytes must hold at least one expert (%d bytes read): %w", opt.StagingBudget, h.size, err)
	}
	if opt.Pinner != nil {
		h.dev.SetPinner(opt.Pinner)
	}
	h.stats.StagingCap = h.dev.Capacity()
	h.slots = make(chan struct{}, h.dev.Capacity())
	if opt.RAMBudget > 0 {
		if h.ram, err = weights.NewArena(h.size, opt.RAMBudget); err != nil {
			return nil, fmt.Errorf("tier: the RAM budget of %d bytes holds no expert (%d bytes read; 0 means no RAM tier): %w", opt.RAMBudget, h.size, err)
		}
		if opt.Pinner != nil {
			h.ram.SetLazyPinner(opt.Pinner) // by the reader that first reads into a buffer, not under h.mu
		}
		name := opt.Policy
		if name == "" {
			name = policy.Default
		}
		capacity := min(h.ram.Capacity(), h.dims.N())
		if h.cache, err = policy.NewCache(h.dims, capacity, opt.Partition, name, opt.PolicyOptions); err != nil {
			return nil, fmt.Errorf("tier: %w", err)
		}
		h.stats.RAMCap = capacity
		// Two steps' worth of admissions have their buffers mapped, faulted
		// in and pinned ahead, off the readers' path (a fresh 18 MiB buffer
		// is thousands of page faults and a cuMemHostRegister); never more
		// buffers than the tier holds.
		h.ram.KeepSpare(min(2*cfg.TopK, capacity), capacity)
	}
	n := opt.Readers
	if n <= 0 {
		n = DefaultReaders
	}
	if h.files, err = newFiles(opt.Direct, h.refs); err != nil {
		h.dev.Close()
		if h.ram != nil {
			h.ram.Close() // stops its spare keeper
		}
		return nil, err
	}
	h.reqs = make(chan readReq, n)
	h.preqs = make(chan readReq, n)
	hashers := opt.Hashers
	if hashers <= 0 {
		hashers = runtime.GOMAXPROCS(0)
	}
	h.pieces.init()
	h.hashQ, h.phashQ = make(chan part, 4*hashers), make(chan part, 4*hashers)
	for range hashers {
		h.hwg.Add(1)
		go h.hasher()
	}
	h.rwg.Add(1 + n)
	go h.dispatcher()
	for range n {
		go h.reader()
	}
	h.prefetchQ = make(chan readDone, n)
	h.closing = make(chan struct{})
	h.wg.Add(1)
	go h.prefetcher()
	h.started = time.Now()
	if opt.Scrub.Every > 0 {
		h.wg.Add(1)
		go h.scrubber(opt.Scrub.Every)
	}

	return h, nil
}

// Options are the options in effect (Auto budgets resolved).
func (h *Hierarchy) Options() Options { return h.opt }

// Describe says what is resident where, for the startup line.
func (h *Hierarchy) Describe() string {
	st := h.Stats()
	direct := map[DirectMode]string{DirectAuto: "O_DIRECT where possible", DirectOff: "buffered reads", DirectOn: "O_DIRECT"}[h.opt.Direct]
	ram := "no RAM tier"
	if st.RAMCap > 0 {
		pol := h.opt.Policy
		if pol == "" {
			pol = policy.Default
		}
		// What the tier can hold, which is less than the budget when every
		// expert fits in it.
		held := fmt.Sprintf("up to %s of the %s budget", bytesString(int64(st.RAMCap)*int64(h.size)), bytesString(h.opt.RAMBudget))
		if st.RAMCap >= h.dims.N() {
			held = fmt.Sprintf("all of them, %s; budget %s", bytesString(int64(st.RAMCap)*int64(h.size)), bytesString(h.opt.RAMBudget))
		}
		ram = fmt.Sprintf("RAM tier %d of %d experts (%s; %s, %v)", st.RAMCap, h.dims.N(), held, pol, h.opt.Partition)
	}
	readers := h.opt.Readers
	if readers <= 0 {
		readers = DefaultReaders
	}
	hashers := h.opt.Hashers
	if hashers <= 0 {
		hashers = runtime.GOMAXPROCS(0)
	}
	pf := ""
	if h.opt.Prefetch && h.cache != nil {
		pf = ", prefetch"
	}
	dev := ""
	if h.opt.Slots != nil {
		pol := h.opt.DevicePolicy
		if pol == "" {
			pol = h.opt.Policy
		}
		if pol == "" {
			pol = policy.Default
		}
		mode := "inclusive"
		if h.opt.Exclusive {
			mode = "exclusive"
		}
		dev = fmt.Sprintf("device level over the backend's expert slots (sized at the first step, %s, %s); ", pol, mode)
		if st.Device.Capacity > 0 {
			dev = fmt.Sprintf("device level %d slots (%s, %s); ", st.Device.Capacity, pol, mode)
		}
	}
	return fmt.Sprintf("experts: %s%s; %d staging buffers (%s); %d readers, %d hashers, %s%s; scrub %s", dev, ram, st.StagingCap, bytesString(h.opt.StagingBudget), readers, hashers, direct, pf, h.opt.Scrub)
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ExpertBytes is the size of one expert's read (a record and its padding).
func (h *Hierarchy) ExpertBytes() int { return h.size }

// Close stops the readers and releases the arenas and files. No Stream
// may be running.
func (h *Hierarchy) Close() error {
	close(h.closing)
	h.wwg.Wait()
	close(h.reqs)
	close(h.preqs)
	h.rwg.Wait()
	close(h.hashQ)
	close(h.phashQ)
	h.hwg.Wait()
	close(h.prefetchQ)
	h.wg.Wait()
	h.files.close()
	h.mu.Lock()
	if h.devl != nil {
		h.devl.close()
		h.devl = nil
	}
	h.mu.Unlock()
	err := h.dev.Close()
	if h.ram != nil {
		h.mu.Lock()
		for k, e := range h.resident {
			e.buf.Release()
			delete(h.resident, k)
		}
		h.mu.Unlock()
		if rerr := h.ram.Close(); err == nil {
			err = rerr
		}
	}
	return err
}

// Stats returns the counters.
func (h *Hierarchy) Stats() Stats {
	h.statsMu.Lock()
	s := h.stats
	h.statsMu.Unlock()
	h.mu.Lock()
	s.RAMResident = len(h.resident)
	for i := range h.ra.Scored {
		s.HintsScored, s.HintsTrue = s.HintsScored+h.ra.Scored[i], s.HintsTrue+h.ra.True[i]
	}
	s.HintsScoredByRank, s.HintsTrueByRank = slices.Clone(h.ra.Scored), slices.Clone(h.ra.True)
	if h.devl != nil {
		s.Device.Resident = len(h.devl.entries)
	}
	h.mu.Unlock()
	s.RAM.Uses, s.RAM.Hits, s.RAM.Capacity, s.RAM.Resident, s.RAM.Evictions = s.Hits+s.Misses+s.Streamed, s.Hits, s.RAMCap, s.RAMResident, s.Evictions
	s.PageCache.Uses, s.PageCache.Hits = s.Misses+s.Streamed, s.PageCacheUses
	s.Storage.Uses, s.Storage.Hits = s.Misses+s.Streamed-s.PageCacheUses, s.Misses+s.Streamed-s.PageCacheUses
	s.Storage.BytesRead, s.Storage.BytesHashed = s.BytesRead, s.BytesHashed
	return s
}

func (h *Hierarchy) count(f func(*Stats)) {
	h.statsMu.Lock()
	f(&h.stats)
	h.statsMu.Unlock()
}

func (h *Hierarchy) noteMapped() {
	m := h.dev.Mapped()
	if h.ram != nil {
		m += h.ram.Mapped()
	}
	h.count(func(s *Stats) { s.MaxMapped = max(s.MaxMapped, m) })
}

// tick advances the layer clock for a step of layer.
func (h *Hierarchy) tick(layer int) int64 {
	if layer <= h.lastLayer {
		h.token++
	}
	h.lastLayer = layer
	return h.token*int64(h.dims.Layers) + int64(layer)
}

func (h *Hierarchy) getStream() *stream {
	h.poolMu.Lock()
	defer h.poolMu.Unlock()
	if n := len(h.pool); n > 0 {
		st := h.pool[n-1]
		h.pool = h.pool[:n-1]
		return st
	}
	return &stream{uses: make([]use, 0, h.dims.Experts), reply: make(chan readDone, h.dims.Experts), at: make([]int, h.dims.Experts)}
}

func (h *Hierarchy) putStream(st *stream) {
	h.poolMu.Lock()
	h.pool = append(h.pool, st)
	h.poolMu.Unlock()
}

// use is one expert of a Stream.
type use struct {
	x    int
	e    *entry // RAM-tier entry, leased (nil: through a staging buffer)
	ours bool   // this Stream reads it
	// d is the device-level entry leased (nil: none, the host path):
	// dhit, it holds the expert; dwait, another Stream is filling it;
	// dfill, this Stream delivers the bytes to fill it.
	d                  *devEntry
	dhit, dwait, dfill bool
	// pcache: not in the RAM tier, read from the page cache through a
	// staging buffer and not admitted (Stats.PageCacheUses).
	pcache bool
	// host: the consumer computes it on the host from its RAM-tier copy
	// (expertstream.HostPlacer), no slot taken.
	host bool
}

// bytes reports whether the use needs the expert's bytes from the RAM
// tier or storage now.
func (u *use) bytes() bool { return !u.dhit && !u.dwait }

// stream is one Stream's scratch, pooled.
type stream struct {
	uses     []use
	done     []bool
	readyNow []int
	devX     []int
	reply    chan readDone
	at       []int // use index by expert
}

// Stream implements expertstream.Source. With a device level, the layer's
// experts are leased there first (resident ones first): each one a slot
// holds is delivered as that filled slot, at once; the others need their
// bytes. Those resident in the RAM tier are consumed at once; the others
// are read by the readers into RAM-tier buffers (when the policy admits
// them) or staging buffers (no RAM tier, every resident copy pinned, or an
// exclusive device level's RAM miss), and consumed as each read completes
// and verifies — with the device slot to fill, when the device level
// admitted the expert. A staging buffer is released as soon as its expert
// has been consumed, so a step larger than the staging budget streams
// through it. Every lease is released once the last Consume has returned.
func (h *Hierarchy) Stream(ctx context.Context, layer int, experts []int, c expertstream.Consumer) (err error) {
	if layer < 0 || layer >= h.dims.Layers {
		return fmt.Errorf("tier: layer %d of %d", layer, h.dims.Layers)
	}
	for _, x := range experts {
		if x < 0 || x >= h.dims.Experts || h.refs[h.dims.Index(weights.ExpertID{Layer: layer, Expert: x})].Length() == 0 {
			return fmt.Errorf("tier: layer %d has no routed expert %d", layer, x)
		}
	}
	st := h.getStream()
	defer h.putStream(st)
	st.uses = st.uses[:0]
	for i, x := range experts {
		st.uses = append(st.uses, use{x: x})
		st.at[x] = i
	}
	uses := st.uses

	h.mu.Lock()
	if f := h.fault; f != nil {
		h.mu.Unlock()
		return f
	}
	devl, derr := h.deviceLocked()
	if derr != nil {
		h.mu.Unlock()
		return derr
	}
	now := h.tick(layer)
	release := func() {
		h.releaseLocked(layer, uses) // first: an exclusive device level then drops unleased RAM copies
		if devl != nil {
			devl.releaseLocked(h, layer, uses)
		}
	}
	if devl != nil {
		hp, _ := c.(expertstream.HostPlacer)
		// Resident experts first, as the RAM tier below does.
		for pass := range 2 {
			for i := range uses {
				id := weights.ExpertID{Layer: layer, Expert: uses[i].x}
				if devl.cache.Contains(id) != (pass == 0) {
					continue
				}
				if pass == 1 && hp != nil && h.cache != nil && h.cache.Contains(id) && hp.PreferHost(uses[i].x, h.refs[h.dims.Index(id)].Length()) {
					uses[i].host = true
					continue // computed on the host from its RAM-tier copy: no slot
				}
				if err := devl.leaseLocked(h, &uses[i], id, now); err != nil {
					release()
					h.mu.Unlock()
					return err
				}
			}
		}
	}
	if h.cache != nil {
		// Resident experts first: admitting a missing one must not evict
		// one this layer is about to use.
		for pass := range 2 {
			for i := range uses {
				if !uses[i].bytes() {
					continue
				}
				id := weights.ExpertID{Layer: layer, Expert: uses[i].x}
				resident := h.cache.Contains(id)
				if resident != (pass == 0) {
					continue
				}
				// Only a miss asks the page cache (three one-page
				// mincores on a standing mapping, a few microseconds:
				// it starts no I/O).
				if !resident && h.opt.PageCache && h.files.inPageCache(h.refs[h.dims.Index(id)]) {
					uses[i].pcache = true // the page cache is the RAM level for it
					continue
				}
				if !resident && uses[i].dfill && devl.exclusive {
					continue // exclusive: a RAM miss is not admitted
				}
				if err := h.leaseLocked(&uses[i], id, now); err != nil {
					release()
					h.mu.Unlock()
					return err
				}
			}
		}
	}
	h.scoreHintLocked(layer, experts)
	if devl != nil {
		h.scoreDeviceAheadLocked(devl, layer, experts)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		release()
		h.mu.Unlock()
	}()
	h.noteMapped()

	var hits, misses, streamed, pcached, dhits, duses int64
	pendingOurs := 0
	for _, u := range uses {
		if devl != nil {
			duses++
		}
		switch {
		case !u.bytes():
		case u.e == nil:
			streamed++
			if u.pcache {
				pcached++
			}
		case u.ours:
			misses++
			pendingOurs++
			h.reqs <- readReq{ref: h.refs[u.e.k], buf: u.e.buf, x: u.x, e: u.e, reply: st.reply}
		default:
			hits++
		}
	}
	h.count(func(s *Stats) {
		s.Hits += hits
		s.Misses += misses
		s.Streamed += streamed
		s.PageCacheUses += pcached
		s.Device.Uses += duses
	})
	var firstErr error
	// Staging reads: started now, as many as find a staging buffer at once
	// (drain starts the rest), so they overlap with the RAM-tier ones.
	devX := st.devX[:0]
	for _, u := range uses {
		if u.bytes() && u.e == nil {
			devX = append(devX, u.x)
		}
	}
	devNext, devInflight := 0, 0
	startDev := func(wait bool) {
		for devNext < len(devX) && firstErr == nil && ctx.Err() == nil {
			// Take a slot: wait for one only when nothing of ours is in
			// flight (other Streams hold them all); else come back when a
			// read of ours completes.
			if !wait || devInflight > 0 || pendingOurs > 0 {
				select {
				case h.slots <- struct{}{}:
				default:
					return
				}
			} else {
				select {
				case h.slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
			b, gerr := h.dev.Get()
			if gerr != nil {
				<-h.slots
				firstErr = gerr
				return
			}
			k := h.dims.Index(weights.ExpertID{Layer: layer, Expert: devX[devNext]})
			devInflight++
			h.count(func(s *Stats) { s.MaxStagingInUse = max(s.MaxStagingInUse, devInflight) })
			h.reqs <- readReq{ref: h.refs[k], buf: b, x: devX[devNext], reply: st.reply, known: uses[st.at[devX[devNext]]].pcache}
			devNext++
		}
	}
	startDev(false)
	// The hint's reads start after this layer's own: a read ahead must not
	// delay one that is needed now.
	h.mu.Lock()
	h.prefetchLocked(now)
	h.mu.Unlock()

	// consume delivers expert x from its verified bytes: with the device
	// slot to fill when the device level admitted it.
	consume := func(x int, ve weights.VerifiedExpert, tier ledger.Tier) {
		if firstErr != nil {
			return
		}
		u := &uses[st.at[x]]
		p := expertstream.OnHost(ve)
		if u.dfill {
			p.Slot = u.d.slot
		}
		firstErr = c.Consume(x, p, tier)
		if u.dfill {
			h.mu.Lock()
			u.d.state = ready
			if firstErr != nil {
				u.d.state = failed
			}
			h.loaded.Broadcast()
			h.mu.Unlock()
			if firstErr == nil {
				n := ve.Bytes()
				h.count(func(s *Stats) { s.Device.BytesCopied += n })
			}
		}
	}
	// bind delivers expert x as the slot that holds it.
	bind := func(u *use) {
		if firstErr != nil {
			return
		}
		ref := h.refs[u.d.k]
		firstErr = c.Consume(u.x, expertstream.Placed{ID: ref.ID(), Digest: ref.Digest(), Slot: u.d.slot, Filled: true}, ledger.TierDevice)
		dhits++
	}
	defer func() { h.count(func(s *Stats) { s.Device.Hits += dhits }) }()
	// Device hits first: nothing to move.
	for i := range uses {
		if uses[i].dhit {
			bind(&uses[i])
		}
	}
	// Resident and loaded ones at once; those the consumer computes on the
	// host last, so that the copies of the others run while it does.
	h.mu.Lock()
	readyNow := st.readyNow[:0]
	for pass := range 2 {
		for i, u := range uses {
			if u.bytes() && u.e != nil && !u.ours && u.e.state == ready && u.host == (pass == 1) {
				readyNow = append(readyNow, i)
			}
		}
	}
	st.readyNow = readyNow
	h.mu.Unlock()
	done := st.done[:0]
	for range uses {
		done = append(done, false)
	}
	st.done = done
	for _, i := range readyNow {
		if h.opt.Scrub.OnUse && !h.recheckOnUse(uses[i].e) {
			devX = append(devX, uses[i].x) // changed in memory: read it again
		} else {
			consume(uses[i].x, uses[i].e.ve, ledger.TierRAM)
		}
		done[i] = true
	}
	st.devX = devX
	// drain runs our reads, RAM tier and staging buffers, in completion
	// order; staging reads are started as buffers allow.
	drain := func() {
		for {
			startDev(true)
			h.noteMapped()
			if pendingOurs == 0 && devInflight == 0 {
				if devNext < len(devX) && firstErr == nil && ctx.Err() == nil {
					continue // startDev waits for a slot another Stream holds
				}
				return
			}
			d := <-st.reply
			if d.e != nil {
				pendingOurs--
				h.mu.Lock()
				d.e.ve, d.e.err = d.ve, d.err
				d.e.state, d.e.verifiedAt = ready, time.Now()
				if d.err != nil {
					d.e.state = failed
				}
				h.loaded.Broadcast()
				h.mu.Unlock()
				if d.err != nil && firstErr == nil {
					firstErr = d.err
				}
				consume(d.x, d.ve, ledger.TierStorage)
				for i := range uses {
					if uses[i].e == d.e {
						done[i] = true
					}
				}
				continue
			}
			devInflight--
			if d.err != nil && firstErr == nil {
				firstErr = d.err
			}
			if firstErr == nil && ctx.Err() == nil {
				consume(d.x, d.ve, ledger.TierStorage)
			}
			d.buf.Release()
			<-h.slots
		}
	}
	drain()
	// Copies other Streams are reading.
	for i, u := range uses {
		if !u.bytes() || u.e == nil || done[i] {
			continue
		}
		h.mu.Lock()
		for u.e.state == loading {
			h.loaded.Wait()
		}
		ve, state, rerr := u.e.ve, u.e.state, u.e.err
		h.mu.Unlock()
		if state == failed && firstErr == nil {
			firstErr = rerr
		}
		consume(u.x, ve, ledger.TierRAM)
	}
	// Slots other Streams are filling: bound once filled, else (their
	// fill failed, or a check emptied the slot) read through a staging
	// buffer, for this use only.
	for i := range uses {
		u := &uses[i]
		if !u.dwait || firstErr != nil {
			continue
		}
		h.mu.Lock()
		for u.d.state == loading {
			h.loaded.Wait()
		}
		ok := u.d.state == ready && devl.pool.SlotHolds(u.d.slot, h.refs[u.d.k].Digest())
		h.mu.Unlock()
		if ok {
			bind(u)
			continue
		}
		h.mu.Lock()
		devl.cache.Release(weights.ExpertID{Layer: layer, Expert: u.x})
		u.d, u.dwait = nil, false
		h.mu.Unlock()
		devX = append(devX, u.x)
		h.count(func(s *Stats) { s.Streamed++ })
	}
	st.devX = devX
	drain()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr == nil && devl != nil && h.opt.DevicePrefetch {
		if pf, ok := c.(expertstream.Prefiller); ok {
			firstErr = h.prefillDevice(devl, pf, now)
		}
	}
	return firstErr
}

// Hint says which experts of layer the engine expects to need next (the
// next layer's router applied to this layer's input, the experts the
// previous token used). With Options.Prefetch the next Stream, once it has
// leased its own experts and started its own reads, starts reading the
// hinted ones that are not resident and that policy.ReadAhead says pay
// into the RAM tier (never evicting a leased copy), up to Readers reads at
// a time; readers and hashers serve them only when no needed read waits.
// Results never depend on hints.
func (h *Hierarchy) Hint(layer int, experts []int) {
	if !(h.opt.Prefetch || h.opt.DevicePrefetch) || h.cache == nil || layer < 0 || layer >= h.dims.Layers {
		return
	}
	h.hintMu.Lock()
	h.hint, h.hintLayer = h.hint[:0], layer
	for _, x := range experts {
		if x >= 0 && x < h.dims.Experts { // a hint names experts of its layer; others are dropped here
			h.hint = append(h.hint, x)
		}
	}
	h.hintMu.Unlock()
}

// scoreHintLocked scores the hint given for layer against its experts, and
// measures the reads ahead for layer this Stream did not use (those it
// used were measured as it leased them).
func (h *Hierarchy) scoreHintLocked(layer int, experts []int) {
	h.ra.Score(layer, experts)
	n := 0
	for _, e := range h.ahead {
		if e.id.Layer == layer {
			h.unusedLocked(e, slices.Contains(experts, e.id.Expert))
			continue
		}
		h.ahead[n] = e
		n++
	}
	clear(h.ahead[n:])
	h.ahead = h.ahead[:n]
}

// usedLocked measures read ahead e, which a Stream leased at now: the whole
// wait hidden if it is verified, else the share of it done by now (when it
// is verified).
func (h *Hierarchy) usedLocked(e *entry, now time.Time) {
	e.ahead = false
	for i, a := range h.ahead {
		if a == e {
			h.ahead = append(h.ahead[:i], h.ahead[i+1:]...)
			break
		}
	}
	if e.state == loading {
		e.late, e.usedAt = true, now
		return
	}
	h.ra.Used(e.id.Layer, e.place, 1)
	took := e.took.Seconds()
	h.count(func(s *Stats) { s.PrefetchSavedSeconds += took })
}

// unusedLocked measures read ahead e as not used by its step, whose
// experts include e's if hintTrue (the caller takes it off h.ahead).
func (h *Hierarchy) unusedLocked(e *entry, hintTrue bool) {
	e.ahead = false
	h.ra.Unused(e.id.Layer, hintTrue)
	took := e.took.Seconds()
	if e.state == loading {
		e.unused, took = true, 0 // counted when it is verified
	}
	lost := int64(0)
	if hintTrue {
		lost = 1
	}
	h.count(func(s *Stats) { s.PrefetchUnused++; s.PrefetchLost += lost; s.PrefetchUnusedSeconds += took })
}

// prefetchLocked starts reads for the pending hint.
func (h *Hierarchy) prefetchLocked(now int64) {
	h.hintMu.Lock()
	hint, layer := h.hint, h.hintLayer
	h.hint = h.hint[:0]
	h.hintMu.Unlock()
	if h.opt.DevicePrefetch {
		h.dhint, h.dhintLayer = append(h.dhint[:0], hint...), layer
	}
	if !h.opt.Prefetch {
		return
	}
	h.ra.Given(layer, hint)
	for i, x := range hint {
		if h.inflightP >= cap(h.preqs) {
			return
		}
		id := weights.ExpertID{Layer: layer, Expert: x}
		k := h.dims.Index(id)
		if h.refs[k].Length() == 0 || h.cache.Contains(id) || (h.devl != nil && h.devl.cache.Contains(id)) {
			continue // resident: in the RAM tier, or in a device slot (a use binds it there)
		}
		if h.opt.PageCache && h.files.inPageCache(h.refs[k]) {
			// The page cache is the RAM level for it (its step copies it
			// from there into staging, not admitted): reading it ahead
			// hides no storage wait, and costs a RAM-tier buffer and the
			// cores of a copy and a hash while a step runs.
			h.count(func(s *Stats) { s.PrefetchCached++ })
			continue
		}
		probe := false
		decision, place := h.ra.Decide(i) // for every hinted expert not resident: the hint is scored read or not
		switch decision {
		case policy.Skip:
			h.count(func(s *Stats) { s.PrefetchSkipped++ })
			continue // hints of this rank seldom come true: reading them ahead costs more than it saves
		case policy.BackedOff:
			h.count(func(s *Stats) { s.PrefetchBackedOff++ })
			continue // at its place this layer's reads ahead were not in time, or not kept
		case policy.Probe:
			probe = true
		}
		out, err := h.cache.Request(id, now)
		if err != nil {
			continue // every copy pinned: no room to prefetch into
		}
		if out.Evict {
			h.evictLocked(out.Evicted)
		}
		b, err := h.ram.Get()
		if err != nil {
			h.cache.Release(id)
			continue
		}
		e := &entry{id: id, k: k, buf: b, state: loading, prefetched: true, ahead: true, place: place}
		select {
		case h.preqs <- readReq{ref: h.refs[k], buf: b, x: x, e: e, reply: h.prefetchQ}:
		default: // warm reads fill the queue
			b.Release()
			h.cache.Release(id)
			return
		}
		h.resident[k] = e
		h.ahead = append(h.ahead, e)
		h.inflightP++
		h.count(func(s *Stats) {
			s.PrefetchIssued++
			if probe {
				s.PrefetchProbes++
			}
		})
	}
}

// Settle waits until no prefetch read is in flight, so that counters
// taken after it hold every read a hint started (for measurements made
// generation by generation: a read a hint of one started must not land in
// the next one's figures).
func (h *Hierarchy) Settle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.inflightP > 0 {
		h.loaded.Wait()
	}
}

// prefetcher finishes prefetch reads: it records the copy's state and ends
// the prefetch's lease.
func (h *Hierarchy) prefetcher() {
	defer h.wg.Done()
	for d := range h.prefetchQ {
		h.mu.Lock()
		now := time.Now()
		d.e.ve, d.e.err, d.e.state, d.e.verifiedAt = d.ve, d.err, ready, now
		if d.err != nil {
			d.e.state = failed
		}
		d.e.took = now.Sub(d.started)
		switch e := d.e; {
		case e.late:
			// Used before it was verified: it hid the part of its read
			// done before its Stream came.
			e.late = false
			hid := max(e.usedAt.Sub(d.started), 0)
			h.ra.Used(e.id.Layer, e.place, hid.Seconds()/max(e.took.Seconds(), 1e-9))
			h.count(func(s *Stats) { s.PrefetchLate++; s.PrefetchSavedSeconds += hid.Seconds() })
		case e.unused:
			e.unused = false
			took := e.took.Seconds()
			h.count(func(s *Stats) { s.PrefetchUnusedSeconds += took })
		}
		h.inflightP--
		if !d.e.warm {
			h.cache.Release(d.e.id)
		}
		h.loaded.Broadcast()
		h.mu.Unlock()
	}
}

// leaseLocked takes a RAM-tier lease on id for u: a resident copy, a new
// one to read (ours), or none (u.e stays nil: a staging buffer) when every
// resident copy is pinned.
func (h *Hierarchy) leaseLocked(u *use, id weights.ExpertID, now int64) error {
	out, err := h.cache.Request(id, now)
	if errors.Is(err, policy.ErrAllPinned) {
		return nil
	}
	if err != nil {
		return err
	}
	if out.Evict {
		h.evictLocked(out.Evicted)
	}
	k := h.dims.Index(id)
	if e := h.resident[k]; e != nil {
		if e.state != failed {
			u.e = e
			if e.prefetched {
				e.prefetched = false
				h.count(func(s *Stats) { s.PrefetchUseful++ })
			}
			if e.ahead {
				h.usedLocked(e, time.Now())
			}
			return nil
		}
		// An earlier read failed, or a scrub found the copy bad. Read it
		// again into a fresh buffer — unless another Stream still holds
		// the bad copy (it found out), then go through a staging buffer.
		if h.cache.Pinned(id) > 1 {
			h.cache.Release(id)
			return nil
		}
		h.releaseBufLocked(e)
		b, err := h.ramGetLocked()
		if err != nil {
			delete(h.resident, k)
			h.cache.Release(id)
			return fmt.Errorf("tier: RAM tier: %w", err)
		}
		e.buf, e.ve, e.state, e.err = b, weights.VerifiedExpert{}, loading, nil
		u.e, u.ours = e, true
		return nil
	}
	b, err := h.ramGetLocked()
	if err != nil {
		h.cache.Release(id)
		return fmt.Errorf("tier: RAM tier: %w", err)
	}
	e := &entry{id: id, k: k, buf: b, state: loading}
	h.resident[k] = e
	u.e, u.ours = e, true
	return nil
}

// releaseLocked ends a Stream's RAM-tier leases.
func (h *Hierarchy) releaseLocked(layer int, uses []use) {
	for i := range uses {
		if uses[i].e != nil {
			h.cache.Release(weights.ExpertID{Layer: layer, Expert: uses[i].x})
			uses[i].e = nil
		}
	}
}

// evictLocked frees the buffer of an evicted resident expert (unpinned, so
// no read is running into it).
func (h *Hierarchy) evictLocked(id weights.ExpertID) {
	k := h.dims.Index(id)
	wasted := int64(0)
	if e := h.resident[k]; e != nil {
		if e.prefetched {
			wasted = 1
		}
		e.evicted = e.ahead // before its step, which measures it

		h.releaseBufLocked(e)
		delete(h.resident, k)
	}
	h.count(func(s *Stats) { s.Evictions++; s.PrefetchWasted += wasted })
}
