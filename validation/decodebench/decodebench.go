// Package decodebench measures decoding through the streaming hierarchy on
// a checkpoint, against the storage it streams from (tarfa bench decode):
//
//   - raw: every routed expert record read with O_DIRECT (the model's own
//     files, the records' own offsets and lengths, Readers reads in
//     flight), page cache dropped — the storage's bandwidth for this model;
//   - verified: the same records through the hierarchy (read, BLAKE3
//     against the manifest, handed to a consumer), page cache dropped — the
//     engine's verified-expert bandwidth, next to raw in the same round;
//   - hash: BLAKE3 of expert records already in memory on one core;
//   - decode, for each RAM budget, cold (empty RAM tier) and warm (the RAM
//     tier as one previous generation of the same prompt left it), page
//     cache dropped before the timed generation: seconds per token, bytes
//     read from storage per token and the storage bound, those bytes ÷ the
//     raw bandwidth of the same round;
//   - ledger: decode with every expert resident, with and without the
//     session ledger (routing chain, logits chain, expert uses), alternated.
//
// The decodes run on each of Options.Backends (cpu, or cuda under a
// device-memory budget and an expert placement); each decode figure has,
// per decoded token, what the backend's counters (backend.Meter) and the
// engine's say: bytes copied to the device and the device time of those
// copies, the device time of the kernels and its fraction of the wall time
// (GPU busy), the experts computed on the device (streamed or resident
// there) and on the host, and the hashers the hierarchy ran.
//
// Every round runs the figures in that order (benchrun.Interleave), so a
// slow minute slows a figure and its baseline alike. Every generation's
// logits are compared bit for bit with the first one's.
//
// The simulator (tier/sim) is calibrated on figures of the same run that
// are not the ones it predicts — storage from raw, hashing from hash, the
// time per expert, per layer and per token from the resident decodes — and
// then predicts each decode from its own measured routing trace and the
// engine's prefetch hints of the same run, replayed through the same
// hierarchy (policy, partition, budget, readers, one hasher per core): its
// bytes, hits and prefetch counts are the hierarchy's but for when
// prefetch reads complete, which follows the simulated timing. Each decode
// also reports the time inside the hierarchy's Streams and the rest, next
// to the simulator's Stream time, so an error can be told apart: the
// hierarchy's pipeline or the non-expert work.
package decodebench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	_ "github.com/tarfa-ai/tarfa/backend/cpu"  // registers the "cpu" backend (engine.OpenBackend)
	_ "github.com/tarfa-ai/tarfa/backend/cuda" // registers "cuda" (the stub says how to build it in)
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/sim"
	"github.com/tarfa-ai/tarfa/tier/trace"
	"github.com/tarfa-ai/tarfa/validation/benchrun"
	"github.com/tarfa-ai/tarfa/validation/iobench"
	"github.com/tarfa-ai/tarfa/weights"
)

// Options configures Run.
type Options struct {
	Threads      int       // engine goroutines per operation (0: all cores)
	Readers      int       // reads in flight, raw and hierarchy alike (0: tier.DefaultReaders)
	RAMFractions []float64 // RAM-tier budgets as fractions of the routed experts' bytes (default 0.25)
	Policy       string    // "" = policy.Default
	Partition    policy.Partition
	Prefetch     bool
	// DecodeOnly measures only the decodes (and the ledger, with Ledger):
	// no raw, verified or hash figures, so no storage bound and no
	// prediction; a decode's rounds are then its own reads and nothing
	// else's (a large model's read figures take minutes a round).
	DecodeOnly   bool
	Direct       tier.DirectMode
	DecodeTokens int  // tokens generated per timed generation (at least 2)
	Repeat       int  // rounds
	Ledger       bool // measure the ledger's cost (needs every routed expert to fit in RAM)
	LedgerPairs  int  // ledger / no-ledger generations per round (0: 1)
	// NoDrop measures without dropping the page cache: storage figures
	// then come from memory, labelled so.
	NoDrop bool
	// Backends are the backends every decode figure is measured on, each
	// next to the others in every round (none: the CPU reference); the
	// ledger figure uses the first.
	Backends []Backend
	// Progress, if set, is called before every figure's run.
	Progress func(done, total int64)
}

// Backend is a backend the decodes run on.
type Backend struct {
	// Name is the backend's ("cpu": the CPU reference; "cuda"), VRAMBudget
	// its device-memory budget in bytes (0: the whole device) and
	// Placement where it computes the routed experts not resident in its
	// memory.
	Name       string           `json:"backend"`
	VRAMBudget int64            `json:"vram_budget,omitempty"`
	Placement  engine.Placement `json:"placement,omitempty"`
	// PinSlots lets a backend that can pin host memory (backend.Pinner)
	// pin the hierarchy's staging buffers, so that streamed experts are copied
	// to the device from where they were read, with no staging copy.
	PinSlots bool `json:"pin_slots,omitempty"`
	// VerifyCopies makes a device backend hash every routed expert it
	// copies into device memory, there, against its digest.
	VerifyCopies bool `json:"verify_copies,omitempty"`
	// DevicePolicy and Exclusive configure the hierarchy's device level
	// over the backend's expert slots (a backend.SlotPool: cuda; tier
	// Options.DevicePolicy, Options.Exclusive).
	DevicePolicy string `json:"device_policy,omitempty"`
	Exclusive    bool   `json:"exclusive,omitempty"`
	// DevicePrefetch is tier.Options.DevicePrefetch for the hierarchy over
	// the backend's device level (a backend listed with and without it
	// measures the prefetch next to its baseline, in every round).
	DevicePrefetch bool `json:"device_prefetch,omitempty"`
	// New, if set, makes the backend instead of engine.OpenBackend (each
	// model gets its own; tests give a simulated device).
	New func() (backend.Backend, error) `json:"-"`
}

// Label names the backend in figure names: "cpu", "cuda 16 GiB auto".
func (c Backend) Label() string {
	s := c.Name
	if c.VRAMBudget > 0 {
		s += fmt.Sprintf(" %.4g GiB", float64(c.VRAMBudget)/(1<<30))
	}
	if c.Name != "cpu" {
		pl := string(c.Placement)
		if pl == "" {
			pl = "auto"
		}
		s += " " + pl
	}
	if c.PinSlots {
		s += " pinned"
	}
	if c.DevicePrefetch {
		s += " device prefetch"
	}
	return s
}

// Bandwidth is a read figure.
type Bandwidth struct {
	Bytes   int64            `json:"bytes"` // per run
	Reads   int64            `json:"reads"` // per run
	Direct  bool             `json:"direct"`
	Seconds benchrun.Summary `json:"seconds"`
	GBps    benchrun.Summary `json:"gbps"` // 10⁹ bytes per second
}

// Decode is one decode figure.
type Decode struct {
	Name string `json:"name"`
	// Backend is the backend it ran on and Residency what that kept where.
	Backend     Backend            `json:"backend"`
	Residency   *backend.Residency `json:"residency,omitempty"`
	RAMFraction float64            `json:"ram_fraction"`
	RAMBudget   int64              `json:"ram_budget"`
	RAMSlots    int                `json:"ram_slots"` // experts the RAM tier holds
	Warm        bool               `json:"warm"`
	// SecondsPerToken: decode steps only (the prompt is one token).
	SecondsPerToken      benchrun.Summary `json:"seconds_per_token"`
	StorageBytesPerToken benchrun.Summary `json:"storage_bytes_per_token"`
	HitRate              benchrun.Summary `json:"hit_rate"` // RAM-tier hits of all expert uses
	// BoundSecondsPerToken is the storage bound: the median storage bytes
	// per token ÷ the median raw bandwidth. RatioToBound: the median
	// seconds per token ÷ it (1 = as fast as the disk allows).
	BoundSecondsPerToken float64 `json:"bound_seconds_per_token"`
	RatioToBound         float64 `json:"ratio_to_bound"`
	PrefetchIssued       int64   `json:"prefetch_issued"` // decode steps of all rounds
	PrefetchUseful       int64   `json:"prefetch_useful"`
	PrefetchWasted       int64   `json:"prefetch_wasted"`
	// PrefetchSkipped are hinted experts not read ahead: their rank of
	// hints seldom came true (policy.HintScore).
	PrefetchSkipped int64 `json:"prefetch_skipped"`
	// DevicePrefetched, DevicePrefetchUsed, DevicePrefetchUnused and
	// DevicePrefetchSkipped are the decode steps' copies of the device
	// prefetch into slots, those their layer then bound, those it did not,
	// and the hinted experts it did not copy because their rank of hints
	// seldom came true (tier.Stats; DevicePrefetch).
	DevicePrefetched      int64 `json:"device_prefetched,omitempty"`
	DevicePrefetchUsed    int64 `json:"device_prefetch_used,omitempty"`
	DevicePrefetchUnused  int64 `json:"device_prefetch_unused,omitempty"`
	DevicePrefetchSkipped int64 `json:"device_prefetch_skipped,omitempty"`
	// DemandReadBytes are the bytes the decode steps of all rounds read
	// from storage for their own uses (StorageBytesPerToken less what
	// prefetches read).
	DemandReadBytes int64 `json:"demand_read_bytes"`
	// Predicted is the calibrated simulator on each round's measured trace
	// (median over rounds); Error = (predicted − measured) ÷ measured of
	// the medians.
	Predicted benchrun.Summary `json:"predicted_seconds_per_token"`
	Error     float64          `json:"prediction_error"`
	Within    bool             `json:"within_tolerance"`
	// NotPredicted says why a decode has no prediction: the simulator is
	// calibrated on the first backend's resident decodes and replays the
	// experts streamed through the hierarchy, so a decode on another
	// backend, or one whose device held experts in its own memory (they
	// never reach the hierarchy), is measured but not predicted.
	NotPredicted string `json:"not_predicted,omitempty"`
	// PredictedStorageBytesPerToken, PredictedHitRate and PredictedBound
	// are what the simulator's own RAM tier did with the trace (median over
	// rounds; the bound of the last): where they differ from the measured
	// bytes and hits, the error is the policy model's, not the timing's.
	PredictedStorageBytesPerToken benchrun.Summary `json:"predicted_storage_bytes_per_token"`
	PredictedHitRate              benchrun.Summary `json:"predicted_hit_rate"`
	PredictedBound                string           `json:"predicted_bound,omitempty"`
	// StreamSecondsPerToken is the time inside the hierarchy's Streams per
	// decoded token (from a layer's request for its experts to the last one
	// computed), GapSecondsPerToken the rest (the non-expert work);
	// PredictedStream… the simulator's (medians over rounds).
	StreamSecondsPerToken          benchrun.Summary `json:"stream_seconds_per_token"`
	GapSecondsPerToken             benchrun.Summary `json:"gap_seconds_per_token"`
	PredictedStreamSecondsPerToken benchrun.Summary `json:"predicted_stream_seconds_per_token"`
	streams, gaps, predStreams     []float64
	// PredictedPrefetch* are the simulator's prefetch counters over the
	// same steps and rounds as the measured ones.
	PredictedPrefetchIssued int64 `json:"predicted_prefetch_issued"`
	PredictedPrefetchUseful int64 `json:"predicted_prefetch_useful"`
	PredictedPrefetchWasted int64 `json:"predicted_prefetch_wasted"`
	// The backend's and the engine's counters over the decode steps (per
	// decoded token; medians over rounds). H2DBytesPerToken are all bytes
	// copied to the device, ExpertH2DBytesPerToken the streamed experts'
	// part; H2DSecondsPerToken and KernelSecondsPerToken the device time
	// of those copies and of the kernels (CUDA events; 0 on the CPU);
	// H2DGBps is the median bytes ÷ the median copy time; GPUBusy the
	// kernel time ÷ the decode's wall time. ExpertsOnDevicePerToken are the
	// expert uses the backend computed (ExpertsResidentPerToken of them
	// hits of the hierarchy's device level, bound from a slot that held
	// them; DeviceHits of DeviceUses over the decodes, DeviceSlots the
	// level's slots; HostFallbackPerToken computed on
	// the host by the backend for want of a staging buffer), and
	// ExpertsOnHostPerToken those the placement gave the host CPU beside a
	// device backend. HashedBytesPerToken are the bytes the hierarchy's
	// Hashers verified.
	H2DBytesPerToken        benchrun.Summary `json:"h2d_bytes_per_token"`
	ExpertH2DBytesPerToken  benchrun.Summary `json:"expert_h2d_bytes_per_token"`
	H2DSecondsPerToken      benchrun.Summary `json:"h2d_seconds_per_token"`
	H2DGBps                 float64          `json:"h2d_gbps"`
	KernelSecondsPerToken   benchrun.Summary `json:"kernel_seconds_per_token"`
	GPUBusy                 benchrun.Summary `json:"gpu_busy"`
	ExpertsOnDevicePerToken benchrun.Summary `json:"experts_on_device_per_token"`
	ExpertsResidentPerToken benchrun.Summary `json:"experts_resident_per_token"`
	DeviceHits              int64            `json:"device_hits"`
	DeviceUses              int64            `json:"device_uses"`
	DeviceSlots             int              `json:"device_slots"`
	HostFallbackPerToken    benchrun.Summary `json:"host_fallback_experts_per_token"`
	ExpertsDirectPerToken   benchrun.Summary `json:"experts_direct_per_token"` // copied from pinned slots, no staging copy
	// StreamedPerToken are the hierarchy's reads through staging buffers only
	// (not admitted to the RAM tier), per token.
	StreamedPerToken               benchrun.Summary `json:"streamed_per_token"`
	ExpertsOnHostPerToken          benchrun.Summary `json:"experts_on_host_per_token"`
	HashedBytesPerToken            benchrun.Summary `json:"hashed_bytes_per_token"`
	Hashers                        int              `json:"hashers"`
	meters                         []meterSample
	predicted, predBytes, predHits []float64
	secs                           []float64
	bytes                          []float64
	hits                           []float64
	traces                         []*trace.Trace
	hints                          [][]sim.Hint
	warmups                        []int
}

// LedgerFigure is decode with and without the session ledger.
type LedgerFigure struct {
	With     benchrun.Summary `json:"with_tokens_per_second"`
	Without  benchrun.Summary `json:"without_tokens_per_second"`
	Overhead float64          `json:"overhead"` // 1 − with/without (medians)
	PerRound benchrun.Summary `json:"overhead_per_round"`
}

// Result is a whole run.
type Result struct {
	Model        string        `json:"model"`
	Host         benchrun.Host `json:"host"`
	Started      time.Time     `json:"started"`
	LoadBefore   float64       `json:"load_before"`
	LoadAfter    float64       `json:"load_after"`
	Repeat       int           `json:"repeat"`
	Threads      int           `json:"threads"`
	Readers      int           `json:"readers"`
	Backends     []Backend     `json:"backends"`
	DecodeTokens int           `json:"decode_tokens"`
	Policy       string        `json:"policy"`
	Prefetch     bool          `json:"prefetch"`
	CacheDropped bool          `json:"cache_dropped"`
	CacheNote    string        `json:"cache_note,omitempty"`
	MoELayers    int           `json:"moe_layers"`
	Experts      int           `json:"experts"`
	TopK         int           `json:"top_k"`
	ExpertBytes  int64         `json:"expert_bytes"` // the largest record read
	RoutedBytes  int64         `json:"routed_bytes"` // every routed expert

	Raw           Bandwidth        `json:"raw"`
	RawSplit      Bandwidth        `json:"raw_split"` // the same bytes in 4× the requests (for the latency fit)
	Verified      Bandwidth        `json:"verified"`
	VerifiedRatio float64          `json:"verified_ratio"` // medians
	RatioPerRound benchrun.Summary `json:"verified_ratio_per_round"`
	HashPerCore   Bandwidth        `json:"hash_per_core"`
	Decode        []*Decode        `json:"decode"`
	Ledger        *LedgerFigure    `json:"ledger,omitempty"`

	Hardware sim.Hardware `json:"calibrated_hardware"`
	Fits     []sim.Fit    `json:"fits"`
	// Unfitted are the phases the fit left at their defaults, and why.
	Unfitted []Unfitted `json:"unfitted,omitempty"`
	// DecodeOnly: Options.DecodeOnly (Raw, Verified, HashPerCore, RawSplit,
	// Hardware and Fits are not measured).
	DecodeOnly  bool   `json:"decode_only,omitempty"`
	Digest      string `json:"logits_digest"`
	Identical   bool   `json:"bit_identical"`
	Generations int    `json:"generations"`
}

// prompt is the one-token prompt of every generation.
var prompt = []int{17}

// Run measures dir.
func Run(ctx context.Context, dir string, opt Options) (*Result, error) {
	if opt.Readers <= 0 {
		opt.Readers = tier.DefaultReaders
	}
	if len(opt.RAMFractions) == 0 {
		opt.RAMFractions = []float64{0.25}
	}
	if opt.DecodeTokens < 2 || opt.Repeat < 1 {
		return nil, fmt.Errorf("decodebench: %d decode tokens and %d rounds: want at least 2 and 1", opt.DecodeTokens, opt.Repeat)
	}
	for _, f := range opt.RAMFractions {
		if !(f > 0 && f <= 1) {
			return nil, fmt.Errorf("decodebench: RAM fraction %v: want more than 0, at most 1", f)
		}
	}
	ck, err := weights.Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	cfg := ck.Config()
	b := &bench{ck: ck, opt: opt, res: &Result{Model: dir, Host: benchrun.ThisHost(), Started: time.Now().UTC(), LoadBefore: benchrun.LoadAverage(),
		Repeat: opt.Repeat, Threads: opt.Threads, Readers: opt.Readers, DecodeTokens: opt.DecodeTokens, Policy: opt.Policy, Prefetch: opt.Prefetch,
		Experts: cfg.Experts, TopK: cfg.TopK, Identical: true, DecodeOnly: opt.DecodeOnly}}
	if b.res.Policy == "" {
		b.res.Policy = policy.Default
	}
	if len(opt.Backends) == 0 {
		opt.Backends = []Backend{{Name: "cpu"}}
	}
	opt.Backends = slices.Clone(opt.Backends)
	for i, c := range opt.Backends {
		if c.Name == "" {
			c.Name = "cpu"
		}
		opt.Backends[i] = c
	}
	b.opt.Backends = opt.Backends
	b.res.Backends = opt.Backends
	if b.res.Threads == 0 {
		b.res.Threads = runtime.GOMAXPROCS(0)
	}
	for l, sp := range cfg.Sparse {
		if !sp {
			continue
		}
		b.res.MoELayers++
		for e := range cfg.Experts {
			ref, err := ck.ExpertRef(l, e)
			if err != nil {
				return nil, err
			}
			b.refs = append(b.refs, ref)
			b.res.RoutedBytes += ref.Length()
			b.res.ExpertBytes = max(b.res.ExpertBytes, ref.ReadLength())
		}
	}
	if len(b.refs) == 0 {
		return nil, errors.New("decodebench: the model has no routed experts")
	}
	b.res.CacheDropped = !opt.NoDrop
	if !opt.NoDrop {
		if err := iobench.DropCaches(); err != nil {
			b.res.CacheDropped, b.res.CacheNote = false, err.Error()+"; storage figures come from the page cache"
		}
	} else {
		b.res.CacheNote = "page cache not dropped (--no-drop): storage figures come from memory"
	}

	var arms []benchrun.Arm
	if !opt.DecodeOnly {
		arms = []benchrun.Arm{b.rawArm(), b.verifiedArm(), b.hashArm(), b.rawSplitArm()}
	}
	for _, c := range opt.Backends {
		for _, f := range opt.RAMFractions {
			for _, warm := range []bool{false, true} {
				d := &Decode{Backend: c, RAMFraction: f, Warm: warm, RAMBudget: int64(math.Ceil(f*float64(len(b.refs)))) * b.res.ExpertBytes}
				d.Name = fmt.Sprintf("RAM %.0f%%, %s", f*100, map[bool]string{false: "cold", true: "warm"}[warm])
				if len(opt.Backends) > 1 || c.Name != "cpu" {
					d.Name = c.Label() + ", " + d.Name
				}
				b.res.Decode = append(b.res.Decode, d)
				arms = append(arms, b.decodeArm(d))
			}
		}
	}
	if opt.Ledger {
		arms = append(arms, b.ledgerArms()...)
	}
	total := int64(len(arms) * opt.Repeat)
	var done int64
	r := benchrun.Runner{Rounds: opt.Repeat, OnRun: func(int, int) {
		if opt.Progress != nil {
			opt.Progress(done, total)
		}
		done++
	}}
	durs, err := r.Interleave(ctx, arms)
	b.closeResident()
	if err != nil {
		return nil, err
	}
	if opt.Progress != nil {
		opt.Progress(total, total)
	}
	b.res.LoadAfter = benchrun.LoadAverage()
	res := b.res
	if !opt.DecodeOnly {
		res.Raw.Seconds, res.Raw.GBps = benchrun.Summarize(benchrun.Seconds(durs[0])), benchrun.Summarize(benchrun.Rates(float64(res.Raw.Bytes)/1e9, durs[0]))
		res.Verified.Seconds, res.Verified.GBps = benchrun.Summarize(benchrun.Seconds(durs[1])), benchrun.Summarize(benchrun.Rates(float64(res.Verified.Bytes)/1e9, durs[1]))
		res.VerifiedRatio = benchrun.Ratio(res.Verified.GBps, res.Raw.GBps)
		res.RatioPerRound = benchrun.PairRatios(benchrun.Rates(float64(res.Verified.Bytes)/1e9, durs[1]), benchrun.Rates(float64(res.Raw.Bytes)/1e9, durs[0]))
		res.HashPerCore.Seconds, res.HashPerCore.GBps = benchrun.Summarize(benchrun.Seconds(durs[2])), benchrun.Summarize(benchrun.Rates(float64(res.HashPerCore.Bytes)/1e9, durs[2]))
		res.RawSplit.Seconds, res.RawSplit.GBps = benchrun.Summarize(benchrun.Seconds(durs[3])), benchrun.Summarize(benchrun.Rates(float64(res.RawSplit.Bytes)/1e9, durs[3]))
	}
	if opt.Ledger {
		// Decode time only (the prompt's prefill is the same either way).
		with := benchrun.Rates(float64(b.ledgerTokens), b.ledgerWith)
		without := benchrun.Rates(float64(b.ledgerTokens), b.ledgerWithout)
		res.Ledger = &LedgerFigure{With: benchrun.Summarize(with), Without: benchrun.Summarize(without)}
		res.Ledger.Overhead = 1 - benchrun.Ratio(res.Ledger.With, res.Ledger.Without)
		per := make([]float64, len(with))
		for i := range with {
			per[i] = 1 - with[i]/without[i]
		}
		res.Ledger.PerRound = benchrun.Summarize(per)
	}
	if err := b.calibrate(); err != nil {
		return nil, err
	}
	res.Digest, res.Generations = b.digest, b.gens
	return res, nil
}

type bench struct {
	ck   *weights.Checkpoint
	opt  Options
	res  *Result
	refs []weights.ExpertRef

	digest string // of the first generation's logits
	gens   int

	hashData [][]byte

	// the ledger arms' model, open across both arms of a round
	resident     *model
	ledgerTokens int
	phases       []phases // of the ledger arms' timed generations
	// decode times of the ledger arms' generations, by setting
	ledgerWith, ledgerWithout []time.Duration
}

// model is an engine over its own hierarchy.
type model struct {
	h   *tier.Hierarchy
	src *timedSource
	m   *engine.Model
	be  backend.Backend
}

// meterSample is a figure's counters over one generation's decode steps.
type meterSample struct {
	be       backend.Counters
	eng      engine.Stats
	dev      tier.Level // the device level's counters (Hits, Uses)
	hashed   int64
	streamed int64
	secs     float64
}

// snapshot is the counters at one point of a generation.
type snapshot struct {
	tier tier.Stats
	be   backend.Counters
	eng  engine.Stats
}

func (m *model) snapshot() snapshot {
	s := snapshot{tier: m.h.Stats(), eng: m.m.Stats()}
	if mt, ok := m.be.(backend.Meter); ok {
		s.be = mt.Counters()
	}
	return s
}

func (b *bench) open(ctx context.Context, ram int64, c Backend, prefetch bool) (*model, error) {
	// A backend of its own for every model: a device backend's resident
	// experts must not outlive a figure (a cold figure starts cold).
	var be backend.Backend
	var err error
	if c.New != nil {
		be, err = c.New()
	} else {
		be, err = engine.OpenBackend(c.Name, engine.BackendOptions{Threads: b.opt.Threads, VRAMBudget: c.VRAMBudget, Timing: true, VerifyCopies: c.VerifyCopies})
	}
	if err != nil {
		return nil, err
	}
	dev := 2 * int64(max(b.opt.Readers, b.res.TopK)) * b.res.ExpertBytes
	to := tier.Options{RAMBudget: ram, StagingBudget: dev, Readers: b.opt.Readers, Direct: b.opt.Direct,
		Policy: b.opt.Policy, Partition: b.opt.Partition, Prefetch: prefetch, Hashers: b.hashers(), DevicePrefetch: c.DevicePrefetch}
	if p, ok := be.(backend.Pinner); ok && c.PinSlots {
		to.Pinner = p
	}
	if pool, ok := be.(backend.SlotPool); ok {
		// The device level: the backend's expert slots, sized at the
		// first step from what the budget leaves after the weights.
		to.Slots, to.DevicePolicy, to.Exclusive = pool, c.DevicePolicy, c.Exclusive
	}
	h, err := tier.New(b.ck, to)
	if err != nil {
		be.Close()
		return nil, err
	}
	src := newTimedSource(h, b.ck.Config().Sparse)
	m, err := engine.LoadContext(ctx, b.ck, engine.Options{Backend: be, Placement: c.Placement, Experts: src})
	if err != nil {
		h.Close()
		be.Close()
		return nil, err
	}
	return &model{h: h, src: src, m: m, be: be}, nil
}

// hashers is the number of hashers each hierarchy runs: one per core.
func (b *bench) hashers() int { return runtime.GOMAXPROCS(0) }

func (m *model) close() {
	if m != nil {
		m.h.Close()
		m.m.Close()
		m.be.Close()
		// The model's resident tensors are garbage now: return them before
		// the next figure opens another (a real checkpoint's are GBs).
		m.m = nil
		debug.FreeOSMemory()
	}
}

func (b *bench) closeResident() {
	b.resident.close()
	b.resident = nil
}

// drop empties the page cache unless told not to (or it cannot).
func (b *bench) drop() error {
	if !b.res.CacheDropped {
		return nil
	}
	return iobench.DropCaches()
}

// generate runs the greedy generation of the bench prompt and checks its
// logits against the first generation's. It returns the decode time and
// the counters at the end of prefill.
func (b *bench) generate(ctx context.Context, mm *model, withLedger bool) (time.Duration, snapshot, error) {
	s := mm.m.NewSession()
	if withLedger {
		cfg := b.ck.Config()
		s.SetLedger(ledger.New(b.ck.Root(), cfg.Layers, cfg.TopK, ledger.ModeExact))
	}
	h := sha256.New()
	var lb []byte
	var atPrefill snapshot
	steps := 0
	res, err := engine.Generate(ctx, s, prompt, engine.GenOptions{MaxTokens: b.opt.DecodeTokens}, func(tok int, lg []float32) error {
		if steps == 0 {
			atPrefill = mm.snapshot()
			mm.src.take() // the timings that follow are the decode steps'
		}
		steps++
		lb = lb[:0]
		for _, v := range lg {
			lb = binary.LittleEndian.AppendUint32(lb, math.Float32bits(v))
		}
		h.Write(lb)
		return nil
	})
	if err != nil {
		return 0, atPrefill, err
	}
	if steps != b.opt.DecodeTokens {
		return 0, atPrefill, fmt.Errorf("decodebench: %d tokens generated, want %d (no stop tokens are given)", steps, b.opt.DecodeTokens)
	}
	d := hex.EncodeToString(h.Sum(nil))
	b.gens++
	if b.digest == "" {
		b.digest = d
	} else if d != b.digest {
		b.res.Identical = false
	}
	return res.Decode, atPrefill, nil
}

func (b *bench) rawArm() benchrun.Arm {
	b.res.Raw.Bytes, b.res.Raw.Reads, b.res.Raw.Direct = 0, int64(len(b.refs)), b.opt.Direct != tier.DirectOff
	for _, r := range b.refs {
		b.res.Raw.Bytes += r.ReadLength()
	}
	return benchrun.Arm{Name: "raw read of the routed experts",
		Prepare: func(context.Context) error { return b.drop() },
		Run: func(ctx context.Context) error {
			direct, err := rawRead(ctx, b.refs, b.opt.Readers, b.opt.Direct != tier.DirectOff, int(b.res.ExpertBytes))
			if err == nil && !direct {
				b.res.Raw.Direct = false
			}
			return err
		}}
}

// rawSplit is how many requests the split raw read makes per record.
const rawSplit = 4

func (b *bench) rawSplitArm() benchrun.Arm {
	b.res.RawSplit.Bytes, b.res.RawSplit.Reads, b.res.RawSplit.Direct = b.res.Raw.Bytes, requests(b.refs, rawSplit), b.res.Raw.Direct
	return benchrun.Arm{Name: "raw read of the routed experts, 4 requests per record",
		Prepare: func(context.Context) error { return b.drop() },
		Run: func(ctx context.Context) error {
			_, err := rawReadSplit(ctx, b.refs, b.opt.Readers, b.res.Raw.Direct, int(b.res.ExpertBytes), rawSplit)
			return err
		}}
}

// streamAll hands every routed expert of every MoE layer to a consumer that
// only checks it arrived verified.
type nopConsumer struct{ n int64 }

func (c *nopConsumer) Consume(_ int, p expertstream.Placed, _ ledger.Tier) error {
	c.n += p.Host.Bytes()
	return nil
}

func (b *bench) verifiedArm() benchrun.Arm {
	b.res.Verified.Reads = int64(len(b.refs))
	b.res.Verified.Bytes = b.res.Raw.Bytes
	var h *tier.Hierarchy
	cfg := b.ck.Config()
	all := make([]int, cfg.Experts)
	for i := range all {
		all[i] = i
	}
	return benchrun.Arm{Name: "verified read through the hierarchy",
		Prepare: func(context.Context) error {
			var err error
			// Two buffers per read in flight: one being read, one being hashed.
			dev := 2 * int64(b.opt.Readers) * b.res.ExpertBytes
			if h, err = tier.New(b.ck, tier.Options{StagingBudget: dev, Readers: b.opt.Readers, Direct: b.opt.Direct}); err != nil {
				return err
			}
			return b.drop()
		},
		Run: func(ctx context.Context) error {
			var c nopConsumer
			for l, sp := range cfg.Sparse {
				if sp {
					if err := h.Stream(ctx, l, all, &c); err != nil {
						return err
					}
				}
			}
			if c.n != b.res.RoutedBytes {
				return fmt.Errorf("decodebench: %d verified bytes delivered, want %d", c.n, b.res.RoutedBytes)
			}
			return nil
		},
		After: func(context.Context) error {
			st := h.Stats()
			if st.Buffered > 0 {
				b.res.Verified.Direct = false
			} else if st.DirectReads > 0 {
				b.res.Verified.Direct = true
			}
			return h.Close()
		}}
}

// hashSample is how many expert records the hash figure hashes per run.
const hashSample = 16

func (b *bench) hashArm() benchrun.Arm {
	n := min(hashSample, len(b.refs))
	return benchrun.Arm{Name: "BLAKE3 of expert records in memory, one core",
		Prepare: func(ctx context.Context) error {
			if b.hashData != nil {
				return nil
			}
			var total int64
			for i := range n {
				ref := b.refs[i*len(b.refs)/n]
				buf, err := readRecord(ref)
				if err != nil {
					return err
				}
				b.hashData = append(b.hashData, buf)
				total += int64(len(buf))
			}
			b.res.HashPerCore.Bytes, b.res.HashPerCore.Reads = total, int64(n)
			return nil
		},
		Run: func(ctx context.Context) error {
			for _, d := range b.hashData {
				if err := ctx.Err(); err != nil {
					return err
				}
				blake3Sum(d)
			}
			return nil
		}}
}

func (b *bench) decodeArm(d *Decode) benchrun.Arm {
	var mm *model
	var warmup int
	return benchrun.Arm{Name: "decode, " + d.Name,
		Prepare: func(ctx context.Context) error {
			var err error
			if err = b.drop(); err != nil {
				return err
			}
			if mm, err = b.open(ctx, d.RAMBudget, d.Backend, b.opt.Prefetch); err != nil {
				return err
			}
			r := mm.be.Residency()
			d.Residency = &r
			d.RAMSlots = mm.h.Stats().RAMCap
			mm.src.start()
			warmup = 0
			if d.Warm {
				if _, _, err := b.generate(ctx, mm, false); err != nil {
					return err
				}
				mm.h.Settle() // its prefetch reads are not the timed generation's
				warmup = b.opt.DecodeTokens
			}
			return b.drop()
		},
		Run: func(ctx context.Context) error {
			dec, pre, err := b.generate(ctx, mm, false)
			if err != nil {
				return err
			}
			// The generation's prefetch reads land in its own figures.
			mm.h.Settle()
			post := mm.snapshot()
			after, atPrefill := post.tier, pre.tier
			n := float64(b.opt.DecodeTokens - 1)
			dev := tier.Level{Hits: after.Device.Hits - atPrefill.Device.Hits, Uses: after.Device.Uses - atPrefill.Device.Uses}
			d.meters = append(d.meters, meterSample{be: post.be.Sub(pre.be), eng: engineSub(post.eng, pre.eng), dev: dev,
				hashed: after.BytesHashed - atPrefill.BytesHashed, streamed: after.Streamed - atPrefill.Streamed, secs: dec.Seconds()})
			d.DeviceHits += dev.Hits
			d.DeviceUses += dev.Uses
			d.DeviceSlots = after.Device.Capacity
			d.Hashers = b.hashers()
			ph := mm.src.take() // the decode steps'
			d.streams = append(d.streams, ph.stream.Seconds()/n)
			d.gaps = append(d.gaps, (dec-ph.stream).Seconds()/n)
			d.secs = append(d.secs, dec.Seconds()/n)
			d.bytes = append(d.bytes, float64(after.BytesRead-atPrefill.BytesRead)/n)
			uses := (after.Hits + after.Misses + after.Streamed) - (atPrefill.Hits + atPrefill.Misses + atPrefill.Streamed)
			if uses > 0 {
				d.hits = append(d.hits, float64(after.Hits-atPrefill.Hits)/float64(uses))
			}
			d.PrefetchIssued += after.PrefetchIssued - atPrefill.PrefetchIssued
			d.DemandReadBytes += (after.BytesRead - after.PrefetchBytes) - (atPrefill.BytesRead - atPrefill.PrefetchBytes)
			d.PrefetchUseful += after.PrefetchUseful - atPrefill.PrefetchUseful
			d.PrefetchWasted += after.PrefetchWasted - atPrefill.PrefetchWasted
			d.PrefetchSkipped += after.PrefetchSkipped - atPrefill.PrefetchSkipped
			d.DevicePrefetched += after.DevicePrefetched - atPrefill.DevicePrefetched
			d.DevicePrefetchUsed += after.DevicePrefetchUsed - atPrefill.DevicePrefetchUsed
			d.DevicePrefetchUnused += after.DevicePrefetchUnused - atPrefill.DevicePrefetchUnused
			d.DevicePrefetchSkipped += after.DevicePrefetchSkipped - atPrefill.DevicePrefetchSkipped
			tokens, hints := mm.src.stop()
			if d.Backend.Label() != b.opt.Backends[0].Label() {
				d.NotPredicted = "the simulator is calibrated on " + b.opt.Backends[0].Label()
				return nil
			}
			if dev.Hits > 0 {
				// The time model below is the RAM tier's pipeline; the device
				// level's hit rate is compared by tarfa sim on a trace.
				d.NotPredicted = fmt.Sprintf("%d of %d expert uses were device-level hits; the prediction models the RAM tier's pipeline only (compare the device level's hit rate with tarfa sim --vram-gib on a trace of the run)", dev.Hits, dev.Uses)
				return nil
			}
			tr, err := b.trace(tokens)
			if err != nil {
				return err
			}
			d.traces = append(d.traces, tr)
			var flat []sim.Hint
			for _, t := range hints {
				flat = append(flat, t...)
			}
			d.hints = append(d.hints, flat)
			d.warmups = append(d.warmups, warmup+1) // the timed generation's prefill too
			return nil
		},
		After: func(context.Context) error {
			mm.close()
			mm = nil
			return nil
		}}
}

// engineSub is a − b of the engine's expert counters.
func engineSub(a, b engine.Stats) engine.Stats {
	return engine.Stats{Tokens: a.Tokens - b.Tokens, ExpertsOnHost: a.ExpertsOnHost - b.ExpertsOnHost,
		ExpertsOnDevice: a.ExpertsOnDevice - b.ExpertsOnDevice}
}

// summarizeMeters fills d's counter figures from its samples, per decoded
// token (n of them per generation).
func (d *Decode) summarizeMeters(n float64) {
	if len(d.meters) == 0 {
		return
	}
	per := func(f func(m meterSample) float64) benchrun.Summary {
		v := make([]float64, len(d.meters))
		for i, m := range d.meters {
			v[i] = f(m) / n
		}
		return benchrun.Summarize(v)
	}
	d.H2DBytesPerToken = per(func(m meterSample) float64 { return float64(m.be.H2DBytes) })
	d.ExpertH2DBytesPerToken = per(func(m meterSample) float64 { return float64(m.be.ExpertH2DBytes) })
	d.H2DSecondsPerToken = per(func(m meterSample) float64 { return m.be.H2DSeconds })
	d.KernelSecondsPerToken = per(func(m meterSample) float64 { return m.be.KernelSeconds })
	d.ExpertsOnDevicePerToken = per(func(m meterSample) float64 { return float64(m.eng.ExpertsOnDevice) })
	d.ExpertsResidentPerToken = per(func(m meterSample) float64 { return float64(m.dev.Hits) })
	d.HostFallbackPerToken = per(func(m meterSample) float64 { return float64(m.be.HostExperts) })
	d.ExpertsDirectPerToken = per(func(m meterSample) float64 { return float64(m.be.ExpertsDirect) })
	d.StreamedPerToken = per(func(m meterSample) float64 { return float64(m.streamed) })
	d.ExpertsOnHostPerToken = per(func(m meterSample) float64 { return float64(m.eng.ExpertsOnHost) })
	d.HashedBytesPerToken = per(func(m meterSample) float64 { return float64(m.hashed) })
	busy := make([]float64, 0, len(d.meters))
	for _, m := range d.meters {
		if m.secs > 0 {
			busy = append(busy, m.be.KernelSeconds/m.secs)
		}
	}
	d.GPUBusy = benchrun.Summarize(busy)
	if d.H2DSecondsPerToken.Median > 0 {
		d.H2DGBps = d.H2DBytesPerToken.Median / d.H2DSecondsPerToken.Median / 1e9
	}
}

// trace makes a measured routing trace of recorded tokens.
func (b *bench) trace(tokens [][][]int) (*trace.Trace, error) {
	h := trace.Header{Format: trace.Format, Version: trace.Version, ModelRoot: b.ck.Root().String(), Layers: b.res.MoELayers,
		Experts: b.res.Experts, TopK: b.res.TopK, Source: trace.Measured}
	tr, err := trace.New(h)
	if err != nil {
		return nil, err
	}
	for i, t := range tokens {
		if err := tr.Append(t); err != nil {
			return nil, fmt.Errorf("decodebench: trace token %d: %w", i, err)
		}
	}
	return tr, nil
}

// ledgerArms alternate decode with and without the session ledger on one
// model that keeps every routed expert resident, opened for each round.
func (b *bench) ledgerArms() []benchrun.Arm {
	b.ledgerTokens = b.opt.DecodeTokens
	prep := func(ctx context.Context) error {
		if b.resident != nil {
			return nil
		}
		// Without prefetch: a hint may name an expert the prompt never
		// routes to, whose speculative read would count as storage here.
		mm, err := b.open(ctx, int64(len(b.refs))*b.res.ExpertBytes, b.opt.Backends[0], false)
		if err != nil {
			return err
		}
		b.resident = mm
		// Fill the RAM tier (every expert the prompt routes to) untimed.
		for range 2 {
			if _, _, err := b.generate(ctx, mm, false); err != nil {
				return err
			}
		}
		return nil
	}
	// The two arms of a round swap settings on odd rounds (ABBA), so
	// neither setting always runs first after the round's storage figures.
	round := [2]int{}
	run := func(arm int) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			withLedger := (arm == 0) == (round[arm]%2 == 0)
			round[arm]++
			mm := b.resident
			mm.src.take()
			mm.src.start()
			before := mm.h.Stats()
			d, _, err := b.generate(ctx, mm, withLedger)
			if err != nil {
				return err
			}
			mm.src.stop()
			b.phases = append(b.phases, mm.src.take())
			if st := mm.h.Stats(); st.BytesRead != before.BytesRead {
				return fmt.Errorf("decodebench: the resident decode read %d bytes from storage: the RAM tier does not hold the routed experts", st.BytesRead-before.BytesRead)
			}
			if withLedger {
				b.ledgerWith = append(b.ledgerWith, d)
			} else {
				b.ledgerWithout = append(b.ledgerWithout, d)
			}
			return nil
		}
	}
	pairs := max(b.opt.LedgerPairs, 1)
	arms := make([]benchrun.Arm, 0, 2*pairs)
	for range pairs {
		arms = append(arms,
			benchrun.Arm{Name: "decode, every expert resident, ledger (even rounds; none on odd)", Prepare: prep, Run: run(0)},
			benchrun.Arm{Name: "decode, every expert resident, no ledger (even rounds; ledger on odd)", Prepare: prep, Run: run(1)})
	}
	// Closed after each round, so only one model is open when the next
	// figures run (every routed expert of a real checkpoint is most of the
	// machine's memory).
	arms[len(arms)-1].After = func(context.Context) error { b.closeResident(); return nil }
	return arms
}

// Unfitted is a simulator phase the calibration could not fit from the
// measured figures (it keeps the hardware default).
type Unfitted struct {
	Phase  sim.Phase `json:"phase"`
	Reason string    `json:"reason"`
}

// summarize makes decode d's figures from its rounds' measurements.
func (b *bench) summarize(d *Decode) {
	d.summarizeMeters(float64(b.opt.DecodeTokens - 1))
	d.SecondsPerToken = benchrun.Summarize(d.secs)
	d.StorageBytesPerToken = benchrun.Summarize(d.bytes)
	d.HitRate = benchrun.Summarize(d.hits)
	d.StreamSecondsPerToken = benchrun.Summarize(d.streams)
	d.GapSecondsPerToken = benchrun.Summarize(d.gaps)
	if raw := b.res.Raw.GBps.Median; raw > 0 {
		d.BoundSecondsPerToken = d.StorageBytesPerToken.Median / (raw * 1e9)
	}
	if d.BoundSecondsPerToken > 0 {
		d.RatioToBound = d.SecondsPerToken.Median / d.BoundSecondsPerToken
	}
}

// calibrate fits the simulator to the raw, hash and resident figures and
// predicts every decode run from its own trace (with DecodeOnly there are
// none: it only summarizes the decodes).
func (b *bench) calibrate() error {
	res := b.res
	if b.opt.DecodeOnly {
		for _, d := range res.Decode {
			b.summarize(d)
			d.NotPredicted = "decode only: no read or hash figures to calibrate the simulator on"
		}
		return nil
	}
	// The hierarchy's: Readers reads in flight, one hasher per core.
	hw := sim.Hardware{StorageGBps: 1, QueueDepth: b.opt.Readers, H2DGBps: 1, HashGBpsPerCore: 1, HashCores: runtime.GOMAXPROCS(0)}
	samples := []sim.Sample{
		{Phase: sim.PhaseRead, Bytes: res.Raw.Bytes, Count: res.Raw.Reads, Seconds: res.Raw.Seconds.Median},
		{Phase: sim.PhaseRead, Bytes: res.RawSplit.Bytes, Count: res.RawSplit.Reads, Seconds: res.RawSplit.Seconds.Median},
		{Phase: sim.PhaseHash, Bytes: res.HashPerCore.Bytes, Cores: 1, Seconds: res.HashPerCore.Seconds.Median},
	}
	var p phases
	for _, q := range b.phases {
		p.consume += q.consume
		p.consumes += q.consumes
		p.intra += q.intra
		p.intraN += q.intraN
		p.cross += q.cross
		p.crossN += q.crossN
	}
	if p.consumes > 0 {
		samples = append(samples, sim.Sample{Phase: sim.PhaseCPUExpert, Count: p.consumes, Seconds: p.consume.Seconds()})
	}
	if p.intraN > 0 || p.crossN > 0 {
		// A token is its layers' Streams, a gap between consecutive layers
		// (the next layer's non-expert work and this one's shared expert)
		// and one gap between tokens (the LM head, sampling, the first
		// layer's non-expert work).
		dense := 0.0
		if p.intraN > 0 {
			dense = p.intra.Seconds() / float64(p.intraN)
		} else {
			dense = 0 // one MoE layer: the cross gap holds its non-expert work and the token's
		}
		// A phase measured as no time at all (the per-token gap can be
		// shorter than the layer gap it is reduced by) gives the fit
		// nothing: it keeps its default rather than failing the run.
		if dense > 0 {
			samples = append(samples, sim.Sample{Phase: sim.PhaseDense, Count: max(p.intraN, 1), Seconds: dense * float64(max(p.intraN, 1))})
		} else {
			res.Unfitted = append(res.Unfitted, Unfitted{sim.PhaseDense, "no gap between the Streams of one token was measured"})
		}
		if p.crossN > 0 {
			if tok := p.cross.Seconds()/float64(p.crossN) - dense; tok > 0 {
				samples = append(samples, sim.Sample{Phase: sim.PhaseToken, Count: p.crossN, Seconds: tok * float64(p.crossN)})
			} else {
				res.Unfitted = append(res.Unfitted, Unfitted{sim.PhaseToken, fmt.Sprintf("the gap between tokens (%.3g ms) was not longer than the gap between layers (%.3g ms)",
					1e3*p.cross.Seconds()/float64(p.crossN), 1e3*dense)})
			}
		}
	}
	fitted, fits, err := sim.Calibrate(hw, samples)
	if err != nil {
		return err
	}
	res.Hardware, res.Fits = fitted, fits
	for _, d := range res.Decode {
		b.summarize(d)
		if len(b.phases) == 0 {
			continue // not calibrated without the resident figures
		}
		for i, tr := range d.traces {
			// The same hierarchy on the same trace: the engine's own hints
			// when it prefetched.
			cfg := sim.Config{Hardware: fitted, ExpertBytes: res.ExpertBytes, RAMSlots: max(d.RAMSlots, 1), Policy: res.Policy,
				Partition: b.opt.Partition.String(), Warmup: d.warmups[i]}
			if b.opt.Prefetch {
				cfg.Hints = d.hints[i]
			}
			if cfg.Warmup >= tr.Tokens() {
				continue
			}
			r, err := sim.Run(tr, cfg)
			if err != nil {
				return fmt.Errorf("decodebench: simulating %s: %w", d.Name, err)
			}
			d.predicted = append(d.predicted, r.SecondsPerToken.Mean)
			d.predBytes = append(d.predBytes, r.StorageBytesPerToken)
			d.predHits = append(d.predHits, r.HitRAM)
			d.predStreams = append(d.predStreams, r.StagesPerToken.Streams)
			d.PredictedBound = r.Bound
			if c := r.Counters; c != nil {
				d.PredictedPrefetchIssued += c.PrefetchIssued
				d.PredictedPrefetchUseful += c.PrefetchUseful
				d.PredictedPrefetchWasted += c.PrefetchWasted
			}
		}
		if len(d.predicted) > 0 {
			d.Predicted = benchrun.Summarize(d.predicted)
			d.PredictedStorageBytesPerToken = benchrun.Summarize(d.predBytes)
			d.PredictedHitRate = benchrun.Summarize(d.predHits)
			d.PredictedStreamSecondsPerToken = benchrun.Summarize(d.predStreams)
			d.Error = (d.Predicted.Median - d.SecondsPerToken.Median) / d.SecondsPerToken.Median
			d.Within = math.Abs(d.Error) <= sim.Tolerance
		}
	}
	return nil
}

// sortedRefs orders refs by file and offset (sequential within a file).
func sortedRefs(refs []weights.ExpertRef) []weights.ExpertRef {
	out := slices.Clone(refs)
	slices.SortFunc(out, func(a, b weights.ExpertRef) int {
		if a.Path() != b.Path() {
			if a.Path() < b.Path() {
				return -1
			}
			return 1
		}
		return int(a.Offset() - b.Offset())
	})
	return out
}
