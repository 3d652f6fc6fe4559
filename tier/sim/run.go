package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// Label heads every projection the simulator prints.
const Label = "PROJECTION (simulated)"

// Config is one simulated machine and hierarchy.
type Config struct {
	Hardware    Hardware `json:"hardware"`
	ExpertBytes int64    `json:"expert_bytes"`
	// RAMSlots and DeviceSlots are the tiers' capacities in experts;
	// DeviceSlots 0 means no device: experts compute on the CPU.
	RAMSlots    int    `json:"ram_slots"`
	DeviceSlots int    `json:"device_slots"`
	Policy      string `json:"policy"`
	Partition   string `json:"partition"`
	// Options are the policy's options (Heat for heat and static).
	Options policy.Options `json:"-"`
	// Warm, if set, is a heat ledger (a use count per expert, by dense
	// index) from which both tiers are filled before the first token
	// (policy.WarmOrder); nil: cold start.
	Warm []float64 `json:"-"`
	// Prefetch is the fraction of a layer's I/O issued during the previous
	// layer (0: none). Without a device it is a predictor naming that
	// fraction of each next layer's experts (unless Hints are given),
	// each right with probability HintPrecision (0: 1, always right, and
	// read ahead from the first); below 1 the hints are decided as the
	// engine's are (policy.ReadAhead).
	Prefetch      float64 `json:"prefetch"`
	HintPrecision float64 `json:"hint_precision,omitempty"`
	// Hints, without a device, are the engine's prefetch hints of a measured
	// run, one per step (token·Layers + layer; no experts: none given before
	// that step's Stream); nil: none.
	Hints []Hint `json:"-"`
	// TrustHints reads every hint ahead from the first (policy.ReadAhead
	// TrustAll); else, as the hierarchy does, what policy.ReadAhead decides
	// pays. Prefetch's oracle hints are always trusted: they come true by
	// construction.
	TrustHints bool `json:"trust_hints,omitempty"`
	// Warmup tokens run but are left out of the per-token figures.
	Warmup int `json:"warmup"`
	// Exclusive, with a device, makes the RAM tier and the device slots
	// hold different experts (tier.Options.Exclusive): a device miss that
	// hits the RAM tier takes its copy from it (dropped), a RAM miss is
	// read and hashed without being admitted to the RAM tier. Otherwise
	// inclusive: the RAM copy stays.
	Exclusive bool `json:"exclusive,omitempty"`
	// Balance, with a device, is the balance placement (engine
	// PlaceBalance): each layer's RAM-tier hits below the device are split
	// between the host's compute (CPUExpertUS each) and the copies so
	// that both finish together (Work.Balance).
	Balance bool `json:"balance,omitempty"`
	// PageCache says every record is in the page cache (a repeat run with
	// --direct auto, tier.Stats.PageCacheUses): a use the RAM tier does not
	// hold is read from there, hashed, and not admitted; it costs the hash
	// (and, with a device, the copy) but no storage read.
	PageCache bool `json:"page_cache,omitempty"`
}

// Slots is how many experts of expertBytes fit in gib GiB less reservedGiB.
func Slots(gib, reservedGiB float64, expertBytes int64) int {
	free := (gib - reservedGiB) * (1 << 30)
	if !(free > 0) || expertBytes <= 0 {
		return 0
	}
	return int(math.Floor(free / float64(expertBytes)))
}

func (c *Config) check(tr *trace.Trace) (policy.Partition, error) {
	if err := c.Hardware.Check(); err != nil {
		return 0, err
	}
	part, err := policy.ParsePartition(c.Partition)
	if err != nil {
		return 0, fmt.Errorf("sim: %w", err)
	}
	n := tr.Header.Layers * tr.Header.Experts
	switch {
	case c.ExpertBytes <= 0:
		return 0, fmt.Errorf("sim: ExpertBytes %d: want positive", c.ExpertBytes)
	case c.RAMSlots <= 0 || c.RAMSlots > n:
		return 0, fmt.Errorf("sim: RAMSlots %d: want 1 to %d (the model's experts)", c.RAMSlots, n)
	case c.DeviceSlots < 0 || c.DeviceSlots > n:
		return 0, fmt.Errorf("sim: DeviceSlots %d: want 0 to %d (the model's experts)", c.DeviceSlots, n)
	case !(c.Prefetch >= 0 && c.Prefetch <= 1):
		return 0, fmt.Errorf("sim: Prefetch %v: want a fraction, 0 to 1", c.Prefetch)
	case !(c.HintPrecision >= 0 && c.HintPrecision <= 1):
		return 0, fmt.Errorf("sim: HintPrecision %v: want a probability, 0 to 1", c.HintPrecision)
	case c.HintPrecision > 0 && (c.DeviceSlots > 0 || c.Prefetch == 0 || c.Hints != nil):
		return 0, fmt.Errorf("sim: HintPrecision %v is of the predictor Prefetch stands for without a device and without Hints", c.HintPrecision)
	case c.Warmup < 0 || c.Warmup >= tr.Tokens():
		return 0, fmt.Errorf("sim: Warmup %d tokens: want 0 to %d (the trace has %d tokens)", c.Warmup, tr.Tokens()-1, tr.Tokens())
	}
	if err := checkHints(tr, c); err != nil {
		return 0, err
	}
	return part, nil
}

// Dist is a distribution over tokens, in seconds.
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
}

func dist(x []float64) Dist {
	if len(x) == 0 {
		return Dist{}
	}
	s := slices.Clone(x)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	q := func(p float64) float64 { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return Dist{Mean: sum / float64(len(s)), P50: q(0.5), P99: q(0.99)}
}

// Result is a simulated run. Everything per token is over the tokens after
// the warm-up.
type Result struct {
	Label                string       `json:"label"`
	Trace                string       `json:"trace"` // its source and generator
	Source               trace.Source `json:"source"`
	Tokens               int          `json:"tokens"` // counted (after warm-up)
	Warmup               int          `json:"warmup"`
	Config               Config       `json:"config"`
	Device               bool         `json:"device"` // experts computed on a device
	SecondsPerToken      Dist         `json:"seconds_per_token"`
	TokensPerSecond      float64      `json:"tokens_per_second"` // 1 / mean
	WarmupSeconds        float64      `json:"warmup_seconds"`    // the warm-up tokens together
	StorageBytesPerToken float64      `json:"storage_bytes_per_token"`
	CopyBytesPerToken    float64      `json:"copy_bytes_per_token"`
	HitDevice            float64      `json:"hit_device"` // of all expert uses
	HitRAM               float64      `json:"hit_ram"`
	FromStorage          float64      `json:"from_storage"`
	FromPageCache        float64      `json:"from_page_cache,omitempty"` // served by the page cache (PageCache)
	StagesPerToken       Stages       `json:"stages_per_token"`          // mean busy time of each stage
	Bound                string       `json:"bound"`                     // the stage with the most busy time
	// WarmFillBytes and WarmFillSeconds are the cost of a warm start (Warm),
	// paid before the first token: the RAM tier's experts read from storage
	// and hashed, the device's copied from RAM.
	WarmFillBytes   int64   `json:"warm_fill_bytes,omitempty"`
	WarmFillSeconds float64 `json:"warm_fill_seconds,omitempty"`
	// Counters are the RAM tier's, as tier.Stats counts them (without a
	// device only).
	Counters *Counters `json:"counters,omitempty"`
	// Levels are the uses and hits of each level over the counted tokens,
	// as tier.Stats counts them (Device, RAM, Storage; with a device only).
	Levels *Levels `json:"levels,omitempty"`
}

// Levels are per-level uses and hits: the device slots see every use, the
// RAM tier the device misses, the page cache the RAM misses (serving them
// all with PageCache, else none), storage the rest (and serves them all).
type Levels struct {
	Device    LevelCount `json:"device"`
	RAM       LevelCount `json:"ram"`
	PageCache LevelCount `json:"page_cache"`
	Storage   LevelCount `json:"storage"`
}

// LevelCount is one level's uses and hits.
type LevelCount struct {
	Uses int64 `json:"uses"`
	Hits int64 `json:"hits"`
}

// Run replays tr through the hierarchy cfg describes.
func Run(tr *trace.Trace, cfg Config) (*Result, error) {
	part, err := cfg.check(tr)
	if err != nil {
		return nil, err
	}
	d := dims(tr)
	k := tr.Header.TopK
	device := cfg.DeviceSlots > 0
	if !device {
		res := &Result{Label: Label, Trace: tr.Header.Label(), Source: tr.Header.Source, Tokens: tr.Tokens() - cfg.Warmup,
			Warmup: cfg.Warmup, Config: cfg}
		if err := runCPU(tr, cfg, part, res); err != nil {
			return nil, err
		}
		return res, nil
	}
	ram, err := policy.NewCache(d, cfg.RAMSlots, part, cfg.Policy, cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("sim: RAM tier: %w", err)
	}
	if err := checkLeases(ram, k); err != nil {
		return nil, fmt.Errorf("sim: RAM tier: %w", err)
	}
	var dev *policy.Cache
	if device {
		if dev, err = policy.NewCache(d, cfg.DeviceSlots, part, cfg.Policy, cfg.Options); err != nil {
			return nil, fmt.Errorf("sim: device slots: %w", err)
		}
		if err := checkLeases(dev, k); err != nil {
			return nil, fmt.Errorf("sim: device slots: %w", err)
		}
	}
	res := &Result{Label: Label, Trace: tr.Header.Label(), Source: tr.Header.Source, Tokens: tr.Tokens() - cfg.Warmup,
		Warmup: cfg.Warmup, Config: cfg, Device: device}
	if cfg.Warm != nil {
		nr, err := warm(ram, cfg.Warm, part)
		if err != nil {
			return nil, err
		}
		nd := 0
		if device {
			if nd, err = warm(dev, cfg.Warm, part); err != nil {
				return nil, err
			}
		}
		// The fill reads the RAM tier's experts from storage (hashing them)
		// and copies the device's from RAM, pipelined like a layer.
		f, _ := cfg.Hardware.LayerTime(Work{Storage: nr}, cfg.ExpertBytes, false, 0, 0)
		res.WarmFillBytes = int64(nr) * cfg.ExpertBytes
		res.WarmFillSeconds = max(f.Read, f.Hash, float64(nd)*float64(cfg.ExpertBytes)/(cfg.Hardware.H2DGBps*1e9))
	}
	next := NextUses(tr)
	times := make([]float64, 0, res.Tokens)
	var sum Stages
	var uses, hitD, hitR, fromS, fromP int64
	var lv Levels
	ids := make([]policy.ExpertID, k)
	outs := make([]policy.Outcome, k)
	var miss, held []policy.ExpertID
	var missNext []int64
	slack := 0.0
	i := 0
	for tok := range tr.Tokens() {
		var tokT Stages
		var tokS, tokC float64
		for l := range d.Layers {
			now := d.Step(tok, l)
			w := Work{Balance: cfg.Balance}
			for j, e := range tr.Step(tok, l) {
				ids[j] = policy.ExpertID{Layer: l, Expert: int(e)}
			}
			nx := next[i : i+k]
			i += k
			miss, missNext = append(miss[:0], ids...), append(missNext[:0], nx...)
			if device {
				if err := dev.RequestSet(ids, now, nx, outs); err != nil {
					return nil, fmt.Errorf("sim: device slots, token %d layer %d: %w", tok, l, err)
				}
				miss, missNext = miss[:0], missNext[:0]
				for j, o := range outs {
					if o.Hit {
						w.Device++
					} else {
						miss, missNext = append(miss, ids[j]), append(missNext, nx[j])
					}
				}
			}
			// Exclusive: only the device misses resident in the RAM tier
			// are looked up there (and dropped after); the others are read
			// without being admitted. PageCache: those the RAM tier does not
			// hold are read from the page cache, not admitted.
			if cfg.Exclusive || cfg.PageCache {
				j := 0
				for n, id := range miss {
					switch {
					case ram.Contains(id):
						miss[j], missNext[j] = id, missNext[n]
						j++
					case cfg.PageCache:
						w.PageCache++
					default:
						w.Storage++
					}
				}
				miss, missNext = miss[:j], missNext[:j]
			}
			if err := ram.RequestSet(miss, now, missNext, outs[:len(miss)]); err != nil {
				return nil, fmt.Errorf("sim: RAM tier, token %d layer %d: %w", tok, l, err)
			}
			held = append(held[:0], miss...)
			for _, o := range outs[:len(miss)] {
				if o.Hit {
					w.RAM++
				} else {
					w.Storage++
				}
			}
			if device {
				for _, id := range ids {
					if err := dev.Release(id); err != nil {
						return nil, err
					}
				}
			}
			for _, id := range held {
				if err := ram.Release(id); err != nil {
					return nil, err
				}
				if cfg.Exclusive {
					if _, err := ram.Remove(id); err != nil {
						return nil, err
					}
				}
			}
			st, sl := cfg.Hardware.LayerTime(w, cfg.ExpertBytes, device, cfg.Prefetch, slack)
			slack = sl
			tokT.add(st)
			tokS += float64(w.Storage) * float64(cfg.ExpertBytes)
			if device {
				tokC += float64(w.RAM+w.PageCache+w.Storage) * float64(cfg.ExpertBytes)
			}
			if tok >= cfg.Warmup {
				lv.Device.Uses += int64(k)
				lv.Device.Hits += int64(w.Device)
				lv.RAM.Uses += int64(k - w.Device)
				lv.RAM.Hits += int64(w.RAM)
				lv.PageCache.Uses += int64(w.PageCache + w.Storage)
				lv.PageCache.Hits += int64(w.PageCache)
				lv.Storage.Uses += int64(w.Storage)
				lv.Storage.Hits += int64(w.Storage)
				uses += int64(w.Device + w.RAM + w.PageCache + w.Storage)
				hitD += int64(w.Device)
				hitR += int64(w.RAM)
				fromP += int64(w.PageCache)
				fromS += int64(w.Storage)
			}
		}
		overhead := cfg.Hardware.TokenMS * 1e-3
		tokT.Total += overhead
		slack += overhead
		if tok < cfg.Warmup {
			res.WarmupSeconds += tokT.Total
			continue
		}
		times = append(times, tokT.Total)
		sum.add(tokT)
		res.StorageBytesPerToken += tokS
		res.CopyBytesPerToken += tokC
	}
	n := float64(res.Tokens)
	sum.scale(1 / n)
	res.StagesPerToken = sum
	res.SecondsPerToken = dist(times)
	if res.SecondsPerToken.Mean > 0 {
		res.TokensPerSecond = 1 / res.SecondsPerToken.Mean
	}
	res.StorageBytesPerToken /= n
	res.CopyBytesPerToken /= n
	res.HitDevice = float64(hitD) / float64(uses)
	res.HitRAM = float64(hitR) / float64(uses)
	res.FromStorage = float64(fromS) / float64(uses)
	res.FromPageCache = float64(fromP) / float64(uses)
	res.Bound = bound(sum)
	res.Levels = &lv
	return res, nil
}

func warm(c *policy.Cache, heat []float64, part policy.Partition) (int, error) {
	order, err := policy.WarmOrder(c.Dims(), heat, part, c.Capacity())
	if err != nil {
		return 0, fmt.Errorf("sim: warm start: %w", err)
	}
	return c.Warm(order, -1)
}
