package policy

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tarfa-ai/tarfa/weights"
)

// ExpertID names one routed expert: its MoE layer and its index in the layer.
type ExpertID = weights.ExpertID

// MaxExperts bounds Dims.N, the number of routed experts of a model
// (Qwen3.5-122B-A10B has 48 × 256 = 12 288).
const MaxExperts = 1 << 24

// Dims is the shape of a model's routed experts.
type Dims struct{ Layers, Experts int }

// Check reports whether d describes a model: both counts positive and at most
// MaxExperts experts in all.
func (d Dims) Check() error {
	if d.Layers <= 0 || d.Experts <= 0 {
		return fmt.Errorf("policy: dims %d layers × %d experts: both must be positive", d.Layers, d.Experts)
	}
	if int64(d.Layers)*int64(d.Experts) > MaxExperts {
		return fmt.Errorf("policy: dims %d layers × %d experts: more than %d experts", d.Layers, d.Experts, MaxExperts)
	}
	return nil
}

// N is the number of routed experts.
func (d Dims) N() int { return d.Layers * d.Experts }

// Valid reports whether id names one of d's experts.
func (d Dims) Valid(id ExpertID) bool {
	return id.Layer >= 0 && id.Layer < d.Layers && id.Expert >= 0 && id.Expert < d.Experts
}

// Index is id's dense index, Layer·Experts + Expert.
func (d Dims) Index(id ExpertID) int { return id.Layer*d.Experts + id.Expert }

// ID is the expert with dense index i.
func (d Dims) ID(i int) ExpertID { return ExpertID{Layer: i / d.Experts, Expert: i % d.Experts} }

// Step is the layer clock: the access of layer l of token t happens at step
// t·Layers + l.
func (d Dims) Step(token, layer int) int64 { return int64(token)*int64(d.Layers) + int64(layer) }

// NoNext is the next-use step of an expert that is never used again.
const NoNext int64 = math.MaxInt64

// Policy orders the resident experts of one tier for eviction. The caller
// ([Cache]) keeps the protocol: Insert only an expert that is not resident,
// Touch, Remove, Pin and Unpin only a resident one, Pin and Unpin at most
// once each per lease (the Cache counts nested leases). Policies panic when
// the protocol is broken, as container types do on misuse; they never see
// untrusted input (Cache validates IDs).
//
// now is the layer clock ([Dims.Step]) and never decreases.
type Policy interface {
	// Name is the policy's name in [Names].
	Name() string
	// Insert makes id resident. It is not an access: the Cache calls
	// Touch next when id is being used.
	Insert(id ExpertID, now int64)
	// Touch records a use of the resident expert id.
	Touch(id ExpertID, now int64)
	// Remove makes id non-resident (it was evicted).
	Remove(id ExpertID)
	// Victim returns the resident, unpinned expert to evict to make room
	// for incoming (an expert of the layer running at now), or false if
	// every resident expert is pinned. It does not remove it.
	Victim(incoming ExpertID, now int64) (ExpertID, bool)
	// Pin excludes the resident id from Victim until Unpin.
	Pin(id ExpertID)
	// Unpin ends Pin.
	Unpin(id ExpertID)
	// Contains reports whether id is resident.
	Contains(id ExpertID) bool
	// Len is the number of resident experts.
	Len() int
}

// Oracle is implemented by offline policies (belady) that need to know when
// each expert is next used. The caller calls SetNext before the Insert or
// Touch of the access, with the step of the expert's next access after now
// (NoNext if none).
type Oracle interface {
	SetNext(id ExpertID, next int64)
}

// Options tune the policies that have parameters. The zero value gives the
// defaults.
type Options struct {
	// StepsPerToken is how many clock steps make one token: the model's
	// number of layers (default: Dims.Layers). A Cache with PerLayer
	// partitions sets it, since each partition sees one layer.
	StepsPerToken int
	// HalfLifeTokens is the aging half-life of lfu-decay, heat and predict,
	// in tokens
	// (default DefaultHalfLifeTokens).
	HalfLifeTokens float64
	// Heat is the heat ledger of heat and static: a non-negative use count
	// per expert, by dense index (Dims.Index). static needs it; heat starts
	// from it if given.
	Heat []float64
	// PriorWeight is how many accesses the heat ledger is worth to the
	// expert of mean heat (heat policy; default DefaultPriorWeight).
	PriorWeight float64
	// Routing is the generator of a synthetic trace, which the oracle
	// policies need (and no other uses): oracle all of it, oracle-learn
	// all but Ranks, which it ignores.
	Routing *Routing

	// pool is the shift detector the per-layer instances of one tier share
	// (predict); nil: the policy makes its own.
	pool *shiftPool
}

// Defaults of Options, chosen by measurement (BENCHMARKS.md).
const (
	DefaultHalfLifeTokens = 64
	DefaultPriorWeight    = 4
)

// Default is the policy the hierarchy uses unless told otherwise, chosen by
// hit rate against Belady on the synthetic traces of BENCHMARKS.md ("Expert
// cache policies against Belady"): of all online policies, predict falls
// least behind the best one of each trace, capacity and partitioning — by
// at most 0.013 in hit rate (behind the ledger's static order, where routing
// is stationary) — and never more than 0.002 behind heat, the default
// before it, which falls up to 0.058 behind (every other policy 0.12 or
// more somewhere: lru by 0.43 with a 2% global capacity, lfu by 0.39 when
// popularity drifts). It needs no ledger.
const Default = "predict"

type constructor struct {
	online bool
	new    func(d Dims, o Options) (Policy, error)
}

var registry = map[string]constructor{
	"lru":          {true, func(d Dims, _ Options) (Policy, error) { return newLRU(d), nil }},
	"fifo":         {true, func(d Dims, _ Options) (Policy, error) { return newFIFO(d), nil }},
	"lfu":          {true, func(d Dims, o Options) (Policy, error) { return newFreq(d, "lfu", o, false, false) }},
	"lfu-decay":    {true, func(d Dims, o Options) (Policy, error) { return newFreq(d, "lfu-decay", o, true, false) }},
	"heat":         {true, func(d Dims, o Options) (Policy, error) { return newFreq(d, "heat", o, true, false) }},
	"static":       {true, func(d Dims, o Options) (Policy, error) { return newFreq(d, "static", o, false, true) }},
	"lru2":         {true, func(d Dims, _ Options) (Policy, error) { return newLRU2(d), nil }},
	"leaststale":   {true, func(d Dims, _ Options) (Policy, error) { return newStale(d), nil }},
	"belady":       {false, func(d Dims, _ Options) (Policy, error) { return newBelady(d), nil }},
	"oracle":       {true, func(d Dims, o Options) (Policy, error) { return newOracle(d, o, knowRanks) }},
	"oracle-learn": {true, func(d Dims, o Options) (Policy, error) { return newOracle(d, o, learnRanks) }},
	"predict":      {true, func(d Dims, o Options) (Policy, error) { return newPredict(d, o), nil }},
}

// Names lists the policies, sorted.
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// NeedsHeat reports whether the named policy needs Options.Heat (static;
// heat uses it if given).
func NeedsHeat(name string) bool { return name == "static" }

// UsesHeat reports whether the named policy uses Options.Heat.
func UsesHeat(name string) bool { return name == "heat" || name == "static" }

// Online reports whether the named policy can run without knowing the
// future (every policy but belady).
func Online(name string) bool { c, ok := registry[name]; return ok && c.online }

// NeedsRouting reports whether the named policy needs Options.Routing, the
// generator of a synthetic trace (oracle, oracle-learn).
func NeedsRouting(name string) bool { return name == "oracle" || name == "oracle-learn" }

// Evaluation reports whether the named policy is a measuring device rather
// than a policy for a tier: belady needs the future, oracle and
// oracle-learn the generator of a synthetic trace. None can run on a real
// model's routing.
func Evaluation(name string) bool { return name == "belady" || NeedsRouting(name) }

// New returns the named policy for a tier of experts of shape d.
func New(name string, d Dims, o Options) (Policy, error) {
	c, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("policy: unknown policy %q (policies: %s)", name, strings.Join(Names(), ", "))
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	if o.StepsPerToken < 0 {
		return nil, fmt.Errorf("policy: StepsPerToken %d is negative", o.StepsPerToken)
	}
	if o.StepsPerToken == 0 {
		o.StepsPerToken = d.Layers
	}
	if o.HalfLifeTokens == 0 {
		o.HalfLifeTokens = DefaultHalfLifeTokens
	}
	if !(o.HalfLifeTokens > 0) || math.IsInf(o.HalfLifeTokens, 0) {
		return nil, fmt.Errorf("policy: HalfLifeTokens %v: want a positive finite number", o.HalfLifeTokens)
	}
	if o.PriorWeight == 0 {
		o.PriorWeight = DefaultPriorWeight
	}
	if !(o.PriorWeight > 0) || math.IsInf(o.PriorWeight, 0) {
		return nil, fmt.Errorf("policy: PriorWeight %v: want a positive finite number", o.PriorWeight)
	}
	if NeedsHeat(name) || o.Heat != nil {
		if err := checkHeat(d, o.Heat); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
	}
	return c.new(d, o)
}

func checkHeat(d Dims, heat []float64) error {
	if len(heat) != d.N() {
		return fmt.Errorf("heat ledger has %d entries, want one per expert (%d layers × %d experts = %d)", len(heat), d.Layers, d.Experts, d.N())
	}
	for i, h := range heat {
		if !(h >= 0) || math.IsInf(h, 0) {
			return fmt.Errorf("heat of %v is %v: want a finite non-negative count", d.ID(i), h)
		}
	}
	return nil
}

// base is the residency and pin state every policy keeps.
type base struct {
	d      Dims
	in     []bool
	pinned []bool
	n      int
}

func newBase(d Dims) base {
	return base{d: d, in: make([]bool, d.N()), pinned: make([]bool, d.N())}
}

func (b *base) Contains(id ExpertID) bool { return b.in[b.d.Index(id)] }
func (b *base) Len() int                  { return b.n }

func (b *base) insert(id ExpertID) int32 {
	i := b.d.Index(id)
	if b.in[i] {
		panic(fmt.Sprintf("policy: Insert of resident %v", id))
	}
	b.in[i] = true
	b.n++
	return int32(i)
}

func (b *base) resident(op string, id ExpertID) int32 {
	i := b.d.Index(id)
	if !b.in[i] {
		panic(fmt.Sprintf("policy: %s of non-resident %v", op, id))
	}
	return int32(i)
}

func (b *base) remove(id ExpertID) int32 {
	i := b.resident("Remove", id)
	b.in[i] = false
	b.pinned[i] = false
	b.n--
	return i
}

func (b *base) pin(id ExpertID) int32 {
	i := b.resident("Pin", id)
	if b.pinned[i] {
		panic(fmt.Sprintf("policy: Pin of pinned %v", id))
	}
	b.pinned[i] = true
	return i
}

func (b *base) unpin(id ExpertID) int32 {
	i := b.resident("Unpin", id)
	if !b.pinned[i] {
		panic(fmt.Sprintf("policy: Unpin of unpinned %v", id))
	}
	b.pinned[i] = false
	return i
}
