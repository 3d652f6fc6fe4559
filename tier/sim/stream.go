package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// Hint is a prefetch hint the engine gave before one step's Stream: the
// experts it expects Layer (an index of the trace's layers) to need next
// (engine.Hinter).
type Hint struct {
	Layer   int     `json:"layer"`
	Experts []int32 `json:"experts"`
}

// Counters are what the RAM tier did over the counted tokens, in the terms
// of tier.Stats: a use is a hit (a resident copy, or one a prefetch is
// reading), a miss (read into the RAM tier) or streamed (read through a
// device slot only, every resident copy being pinned); BytesRead counts
// every read, prefetches included.
type Counters struct {
	Hits           int64 `json:"hits"`
	Misses         int64 `json:"misses"`
	Streamed       int64 `json:"streamed"`
	BytesRead      int64 `json:"bytes_read"`
	Evictions      int64 `json:"evictions"`
	PrefetchIssued int64 `json:"prefetch_issued"`
	PrefetchUseful int64 `json:"prefetch_useful"`
	PrefetchWasted int64 `json:"prefetch_wasted"`
	// PrefetchSkipped are hinted experts not read ahead: their rank does
	// not pay (policy.ReadAhead); PrefetchBackedOff those of a rank that
	// would pay with reads in time and kept, not read ahead because at
	// their place their layer's were not. PrefetchProbes, of
	// PrefetchIssued, were read as probes of a layer that held reads back.
	PrefetchSkipped   int64 `json:"prefetch_skipped"`
	PrefetchBackedOff int64 `json:"prefetch_backed_off"`
	// PrefetchCached are hinted experts not read ahead because the page
	// cache holds them (Config.PageCache: every record).
	PrefetchCached int64 `json:"prefetch_cached,omitempty"`
	PrefetchProbes int64 `json:"prefetch_probes"`
	// PrefetchUnused are the reads ahead the first Stream of their layer
	// did not use (PrefetchLost: though it used the expert, the copy
	// evicted before it), PrefetchLate those it used while they were still
	// being read (tier.Stats').
	PrefetchUnused int64 `json:"prefetch_unused"`
	PrefetchLost   int64 `json:"prefetch_lost"`
	PrefetchLate   int64 `json:"prefetch_late"`
	// PageCacheUses, of Streamed, are the uses the page cache served
	// (Config.PageCache: not in the RAM tier, read from there, not admitted).
	PageCacheUses int64 `json:"page_cache_uses"`
}

// cpuEntry is a resident copy of the simulated RAM tier.
type cpuEntry struct {
	ready      float64 // when its bytes are verified
	prefetched bool    // read on a hint and not used since
	// A read ahead's outcome, as tier's entry: ahead until the first
	// Stream of its layer measures it; late: that Stream used it before it
	// was verified, at usedAt (measured when it is); started: when the
	// storage started serving it.
	ahead, late     bool
	evicted         bool // before its step (it stays in runCPU's ahead)
	place           int
	started, usedAt float64
}

// pipe is the read pipeline of tier.Hierarchy: requests served in the
// order they were issued by the storage (its latency overlapped QueueDepth
// requests deep, its bandwidth shared), each read buffer then verified in
// parts of HashPart bytes, each part by the first of HashCores hashers
// free (first in, first out, as the tier's hashers take them).
type pipe struct {
	read1, lat, hash1 float64
	parts             int
	qd                float64
	storage           float64   // when the storage has served every request so far
	hashers           []float64 // when each hasher is free
}

// HashPart is the tier's part of an expert's check (tier's hashPart).
const HashPart = 1 << 20

func newPipe(h *Hardware, expertBytes int64) *pipe {
	B := float64(expertBytes)
	return &pipe{read1: B / (h.StorageGBps * 1e9), lat: h.StorageLatencyUS * 1e-6, hash1: B / (h.HashGBpsPerCore * 1e9),
		parts: int(max(1, (expertBytes+HashPart-1)/HashPart)),
		qd:    float64(h.QueueDepth), storage: math.Inf(-1), hashers: make([]float64, h.HashCores)}
}

// read issues one read at t and returns when its bytes are verified.
func (p *pipe) read(t float64) float64 {
	_, v := p.readFrom(t)
	return v
}

// readFrom issues one read at t and returns when the storage starts serving
// it (a tier reader starting it) and when its bytes are verified.
func (p *pipe) readFrom(t float64) (start, verified float64) {
	done := max(t+p.lat+p.read1, p.storage+p.read1+p.lat/p.qd)
	p.storage = done
	return max(t, done-p.read1-p.lat), p.hash(done)
}

// hash verifies one record whose bytes are in memory at t, each part on
// the hasher free first, and returns when its last part is done.
func (p *pipe) hash(t float64) float64 {
	done := t
	for range p.parts {
		i := 0
		for j, f := range p.hashers {
			if f < p.hashers[i] {
				i = j
			}
		}
		v := max(t, p.hashers[i]) + p.hash1/float64(p.parts)
		p.hashers[i] = v
		done = max(done, v)
	}
	return done
}

// checkHints validates cfg.Hints against tr: one per step, naming experts
// of the trace's model.
func checkHints(tr *trace.Trace, cfg *Config) error {
	if cfg.Hints == nil {
		return nil
	}
	d := dims(tr)
	if cfg.DeviceSlots > 0 {
		return fmt.Errorf("sim: Hints are replayed by the CPU hierarchy (DeviceSlots 0), not with %d device slots", cfg.DeviceSlots)
	}
	if cfg.Prefetch != 0 {
		return fmt.Errorf("sim: Hints and Prefetch %v: give the measured hints or a prefetch fraction, not both", cfg.Prefetch)
	}
	if want := tr.Tokens() * d.Layers; len(cfg.Hints) != want {
		return fmt.Errorf("sim: %d hints for a trace of %d steps (%d tokens × %d layers): want one per step", len(cfg.Hints), want, tr.Tokens(), d.Layers)
	}
	for i, h := range cfg.Hints {
		if len(h.Experts) == 0 {
			continue
		}
		if h.Layer < 0 || h.Layer >= d.Layers {
			return fmt.Errorf("sim: hint of step %d (token %d, layer %d) names layer %d of %d", i, i/d.Layers, i%d.Layers, h.Layer, d.Layers)
		}
		for _, e := range h.Experts {
			if e < 0 || int(e) >= d.Experts {
				return fmt.Errorf("sim: hint of step %d (token %d, layer %d) names expert %d of %d", i, i/d.Layers, i%d.Layers, e, d.Experts)
			}
		}
	}
	return nil
}

// oracleHints stands in for the engine's predictor when a trace has no
// measured hints: before each step, the first round(p·k) experts of the
// next step, each named right with probability right, else as another
// expert of the layer (drawn from a fixed seed: the same hints every run).
func oracleHints(tr *trace.Trace, p, right float64) []Hint {
	d := dims(tr)
	n := int(math.Round(p * float64(tr.Header.TopK)))
	rng := rand.New(rand.NewPCG(1, 2))
	hints := make([]Hint, tr.Tokens()*d.Layers)
	for i := range len(hints) - 1 {
		tok, l := (i+1)/d.Layers, (i+1)%d.Layers
		set := tr.Step(tok, l)
		set = set[:min(n, len(set))]
		if right >= 1 {
			hints[i] = Hint{Layer: l, Experts: set}
			continue
		}
		xs := make([]int32, 0, len(set))
		for _, e := range set {
			if rng.Float64() >= right && d.Experts > len(set)+len(xs) {
				for {
					if x := int32(rng.IntN(d.Experts)); !slices.Contains(set, x) && !slices.Contains(xs, x) {
						e = x
						break
					}
				}
			}
			xs = append(xs, e)
		}
		hints[i] = Hint{Layer: l, Experts: xs}
	}
	return hints
}

// Use kinds of one Stream.
const (
	useHit = iota
	useMiss
	useStreamed
	usePageCache // not in the RAM tier, read from the page cache (Config.PageCache)
)

// runCPU replays tr as tier.Hierarchy serves it to the engine on the CPU
// (no device slots): Stream by Stream, the same policy code deciding the
// same things in the same order, and the read pipeline timing it.
//
// A layer's Stream starts after its non-expert work. It leases the layer's
// experts, resident ones first (policy.Cache.Request; when every resident
// copy is pinned the expert streams through a device slot and is not
// admitted), measures the reads ahead for its layer (policy.ReadAhead: used
// as it leases them, the others not), starts its own misses' reads and the
// streamed ones, then the reads of the hint given before it that
// policy.ReadAhead decides to read (those not resident, while fewer than
// QueueDepth prefetch reads are in flight, each admitted to the RAM tier
// and pinned until its bytes are verified). It computes the resident
// experts at once, its own reads in the order they verify, and then the
// copies a prefetch is still reading, one expert at a time. A token is its
// layers plus the per-token work. The layer clock is the tier's, which
// counts the first token as token 1.
func runCPU(tr *trace.Trace, cfg Config, part policy.Partition, res *Result) error {
	d := dims(tr)
	k := tr.Header.TopK
	hw := &cfg.Hardware
	ram, err := policy.NewCache(d, cfg.RAMSlots, part, cfg.Policy, cfg.Options)
	if err != nil {
		return fmt.Errorf("sim: RAM tier: %w", err)
	}
	if err := checkLeases(ram, k); err != nil {
		return fmt.Errorf("sim: RAM tier: %w", err)
	}
	ents := make([]*cpuEntry, d.N())
	if cfg.Warm != nil {
		order, err := policy.WarmOrder(d, cfg.Warm, part, ram.Capacity())
		if err != nil {
			return fmt.Errorf("sim: warm start: %w", err)
		}
		n, err := ram.Warm(order, -1)
		if err != nil {
			return fmt.Errorf("sim: warm start: %w", err)
		}
		for _, id := range order {
			if ram.Contains(id) {
				ents[d.Index(id)] = &cpuEntry{ready: math.Inf(-1)}
			}
		}
		f, _ := hw.LayerTime(Work{Storage: n}, cfg.ExpertBytes, false, 0, 0)
		res.WarmFillBytes = int64(n) * cfg.ExpertBytes
		res.WarmFillSeconds = max(f.Read, f.Hash)
	}
	hints := cfg.Hints
	var ra policy.ReadAhead
	if cfg.TrustHints {
		ra.TrustAll()
	}
	if hints == nil && cfg.Prefetch > 0 {
		right := 1.0
		if cfg.HintPrecision > 0 {
			right = cfg.HintPrecision
		}
		hints = oracleHints(tr, cfg.Prefetch, right)
		if right >= 1 {
			ra.TrustAll()
		}
	}
	p := newPipe(hw, cfg.ExpertBytes)
	comp, dense, perTok := hw.CPUExpertUS*1e-6, hw.DenseMSPerLayer*1e-3, hw.TokenMS*1e-3
	B := cfg.ExpertBytes
	var all, c Counters
	type aheadRead struct {
		x int
		e *cpuEntry
	}
	var ahead []aheadRead // reads ahead whose outcome is not measured yet, in issue order
	evict := func(id policy.ExpertID) {
		x := d.Index(id)
		if e := ents[x]; e != nil && e.prefetched {
			c.PrefetchWasted++
		}
		if e := ents[x]; e != nil {
			e.evicted = e.ahead // before its step, which measures it
		}
		ents[x] = nil
		c.Evictions++
	}
	var inflight []int // prefetch reads that hold their lease, by dense index
	// retire ends, in the order they verify, the leases of the prefetch
	// reads verified by t, and measures those a Stream used while they
	// were read.
	retire := func(t float64) error {
		slices.SortStableFunc(inflight, func(a, b int) int { return cmp.Compare(ents[a].ready, ents[b].ready) })
		n := 0
		for _, x := range inflight {
			e := ents[x]
			if e.ready > t {
				break
			}
			if e.late {
				e.late = false
				ra.Used(d.ID(x).Layer, e.place, max(e.usedAt-e.started, 0)/max(e.ready-e.started, 1e-12))
				c.PrefetchLate++
			}
			if err := ram.Release(d.ID(x)); err != nil {
				return err
			}
			n++
		}
		inflight = append(inflight[:0], inflight[n:]...)
		return nil
	}
	kind := make([]int, k)
	ready := make([]float64, k)
	var own []int
	var used, hint []int
	times := make([]float64, 0, res.Tokens)
	var sum Stages
	t := 0.0
	for tok := range tr.Tokens() {
		start := t
		c = Counters{}
		var st Stages
		for l := range d.Layers {
			now := d.Step(tok+1, l)
			t += dense
			st.Dense += dense
			if err := retire(t); err != nil {
				return err
			}
			set := tr.Step(tok, l)
			for pass := range 2 {
				for j, e := range set {
					id := policy.ExpertID{Layer: l, Expert: int(e)}
					if ram.Contains(id) != (pass == 0) {
						continue
					}
					if pass == 1 && cfg.PageCache {
						kind[j] = usePageCache
						continue
					}
					out, err := ram.Request(id, now)
					if errors.Is(err, policy.ErrAllPinned) {
						kind[j] = useStreamed
						continue
					}
					if err != nil {
						return fmt.Errorf("sim: RAM tier, token %d layer %d: %w", tok, l, err)
					}
					if out.Evict {
						evict(out.Evicted)
					}
					x := d.Index(id)
					if out.Hit {
						kind[j] = useHit
						en := ents[x]
						if en.prefetched {
							en.prefetched = false
							c.PrefetchUseful++
						}
						if en.ahead {
							en.ahead = false
							ahead = slices.DeleteFunc(ahead, func(a aheadRead) bool { return a.e == en })
							if en.ready > t {
								en.late, en.usedAt = true, t // measured when it is verified
							} else {
								ra.Used(l, en.place, 1)
							}
						}
						continue
					}
					kind[j] = useMiss
					ents[x] = &cpuEntry{}
				}
			}
			// The hint given before this Stream comes true or not now.
			used = used[:0]
			for _, e := range set {
				used = append(used, int(e))
			}
			ra.Score(l, used)
			// The reads ahead for this layer it did not use.
			ahead = slices.DeleteFunc(ahead, func(a aheadRead) bool {
				if d.ID(a.x).Layer != l {
					return false
				}
				a.e.ahead = false
				hintTrue := slices.Contains(used, d.ID(a.x).Expert)
				ra.Unused(l, hintTrue)
				c.PrefetchUnused++
				if hintTrue {
					c.PrefetchLost++
				}
				return true
			})
			reads := 0
			own = own[:0]
			read := func(j int, e int32) {
				ready[j] = p.read(t)
				if kind[j] == useMiss {
					ents[d.Index(policy.ExpertID{Layer: l, Expert: int(e)})].ready = ready[j]
				}
				own = append(own, j)
				reads++
			}
			// Our misses first, then the streamed ones, then the hint's
			// reads (after them, as the tier queues them: a read ahead
			// must not delay a needed one).
			for j, e := range set {
				switch kind[j] {
				case useHit:
					c.Hits++
				case useMiss:
					c.Misses++
					read(j, e)
				}
			}
			cachedReads := 0
			for j, e := range set {
				switch kind[j] {
				case useStreamed:
					c.Streamed++
					read(j, e)
				case usePageCache:
					c.Streamed++
					c.PageCacheUses++
					ready[j] = p.hash(t) // from the page cache: a copy from memory, left out (the hash bounds it)
					own = append(own, j)
					cachedReads++
				}
			}
			if hints != nil {
				h := hints[tok*d.Layers+l]
				hint = hint[:0]
				for _, e := range h.Experts {
					hint = append(hint, int(e))
				}
				ra.Given(h.Layer, hint)
				for i, e := range h.Experts {
					if len(inflight) >= hw.QueueDepth {
						break
					}
					id := policy.ExpertID{Layer: h.Layer, Expert: int(e)}
					if ram.Contains(id) {
						continue
					}
					if cfg.PageCache {
						c.PrefetchCached++ // its step reads it from the page cache (tier: PrefetchCached)
						continue
					}
					probe := false
					decision, place := ra.Decide(i)
					switch decision {
					case policy.Skip:
						c.PrefetchSkipped++
						continue
					case policy.BackedOff:
						c.PrefetchBackedOff++
						continue
					case policy.Probe:
						probe = true
					}
					out, err := ram.Request(id, now)
					if err != nil {
						continue // every copy pinned: no room to prefetch into
					}
					if out.Evict {
						evict(out.Evicted)
					}
					x := d.Index(id)
					start, ready := p.readFrom(t)
					ents[x] = &cpuEntry{ready: ready, prefetched: true, ahead: true, started: start, place: place}
					inflight = append(inflight, x)
					ahead = append(ahead, aheadRead{x, ents[x]})
					c.PrefetchIssued++
					if probe {
						c.PrefetchProbes++
					}
					reads++
				}
			}
			c.BytesRead += int64(reads+cachedReads) * B
			st.Read += float64(reads) * (p.read1 + p.lat/p.qd)
			st.Hash += float64(reads+cachedReads) * p.hash1 / float64(len(p.hashers))
			st.Compute += float64(len(set)) * comp
			// Resident copies at once, our reads as they verify, then the
			// copies prefetches are still reading.
			tc := t
			for j, e := range set {
				if kind[j] == useHit && ents[d.Index(policy.ExpertID{Layer: l, Expert: int(e)})].ready <= t {
					tc += comp
				}
			}
			for len(own) > 0 {
				m := 0
				for i, j := range own {
					if ready[j] < ready[own[m]] {
						m = i
					}
				}
				tc = max(tc, ready[own[m]]) + comp
				own = append(own[:m], own[m+1:]...)
			}
			for j, e := range set {
				if r := ents[d.Index(policy.ExpertID{Layer: l, Expert: int(e)})]; kind[j] == useHit && r.ready > t {
					tc = max(tc, r.ready) + comp
				}
			}
			st.Streams += tc - t
			t = tc
			// The prefetcher ends the leases of the reads verified while the
			// Stream ran, before the Stream ends its own.
			if err := retire(t); err != nil {
				return err
			}
			for j, e := range set {
				if kind[j] != useStreamed && kind[j] != usePageCache {
					if err := ram.Release(policy.ExpertID{Layer: l, Expert: int(e)}); err != nil {
						return err
					}
				}
			}
		}
		t += perTok
		st.Total = t - start
		if tok < cfg.Warmup {
			res.WarmupSeconds += st.Total
			continue
		}
		times = append(times, st.Total)
		sum.add(st)
		all.add(c)
	}
	n := float64(res.Tokens)
	sum.scale(1 / n)
	res.StagesPerToken = sum
	res.SecondsPerToken = dist(times)
	if res.SecondsPerToken.Mean > 0 {
		res.TokensPerSecond = 1 / res.SecondsPerToken.Mean
	}
	res.StorageBytesPerToken = float64(all.BytesRead) / n
	uses := float64(all.Hits + all.Misses + all.Streamed)
	res.HitRAM = float64(all.Hits) / uses
	res.FromStorage = float64(all.Misses+all.Streamed-all.PageCacheUses) / uses
	res.FromPageCache = float64(all.PageCacheUses) / uses
	res.Counters = &all
	res.Bound = bound(sum)
	return nil
}

func (c *Counters) add(o Counters) {
	c.Hits += o.Hits
	c.Misses += o.Misses
	c.Streamed += o.Streamed
	c.BytesRead += o.BytesRead
	c.Evictions += o.Evictions
	c.PrefetchIssued += o.PrefetchIssued
	c.PrefetchUseful += o.PrefetchUseful
	c.PrefetchWasted += o.PrefetchWasted
	c.PrefetchSkipped += o.PrefetchSkipped
	c.PrefetchBackedOff += o.PrefetchBackedOff
	c.PrefetchCached += o.PrefetchCached
	c.PrefetchProbes += o.PrefetchProbes
	c.PrefetchUnused += o.PrefetchUnused
	c.PrefetchLost += o.PrefetchLost
	c.PrefetchLate += o.PrefetchLate
	c.PageCacheUses += o.PageCacheUses
}

// bound is the stage with the most busy time.
func bound(sum Stages) string {
	name, big := "dense", sum.Dense
	for _, s := range []struct {
		name string
		v    float64
	}{{"storage read", sum.Read}, {"hash", sum.Hash}, {"host-to-device copy", sum.Copy}, {"expert compute", sum.Compute}} {
		if s.v > big {
			name, big = s.name, s.v
		}
	}
	return name
}
