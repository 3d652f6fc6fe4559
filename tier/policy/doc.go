// Package policy decides which resident experts a capacity-limited tier of
// the streaming memory hierarchy keeps: staging buffers or the RAM tier. It is
// pure: no I/O, no engine, no clocks of its own.
//
// # Model
//
// A tier holds at most a fixed number of experts (all routed experts of a
// model have the same size). The engine asks for the experts of one MoE
// layer of one token at a time: every expert it asks for must be resident
// while that layer computes, so it is pinned for the duration (a lease) and
// only unpinned experts can be evicted. [Cache] implements this protocol over
// a [Policy]: Request (hit, or evict a victim and admit), Release (end of the
// lease), with the capacity either shared by all layers ([Global]) or split
// evenly between them ([PerLayer]).
//
// Time is the layer clock: the access of layer l of token t happens at step
// t·Layers + l ([Dims.Step]). Policies use it for recency; the layer-aware
// policy needs exactly this clock, because it reads an expert's layer phase
// from it.
//
// # Policies
//
// Every policy is O(1) or O(log n) per operation and allocates nothing after
// construction (BenchmarkPolicies). [Names] lists them:
//
//   - lru: least recently used.
//   - lfu: least frequently used, counting every access since the start
//     (history kept for non-resident experts too, "perfect LFU"); ties LRU.
//   - lfu-decay: LFU with exponential aging: each access weighs
//     2^(step/half-life), so a count halves every Options.HalfLifeTokens.
//
// The frequency policies and lru2 measure age in runs of the expert's own
// layer, as leaststale does, so that a global capacity does not favour the
// layers that ran last (see leaststale).
//   - lru2: LRU-2 (O'Neil et al., 1993): evict the expert whose second most
//     recent access is oldest; experts seen once go first, in LRU order.
//   - heat: lfu-decay whose counts start from a heat ledger if one is given
//     (Options.Heat, per-expert use counts of earlier runs, normalised so the
//     mean expert starts with Options.PriorWeight accesses; recent accesses
//     outweigh the prior as it ages), and which protects recency: an expert
//     used at its layer's last run is evicted only when no other is left.
//   - static: only the ledger's heat decides (ties LRU): "pin the most
//     frequent experts", with the coldest resident expert as the scratch slot.
//   - leaststale: layer-aware LRU. An expert's staleness is the number of
//     executions of its own layer since its last use; evict the stalest,
//     and among equally stale experts the one whose layer ran most recently
//     (its next chance of use is furthest away). Within one layer this is
//     LRU; with a global capacity it removes LRU's cyclic bias (plain LRU
//     evicts the experts of the layer about to run, since they were used a
//     whole token ago). SpecMD (Hoang et al., 2026, arXiv:2602.03921) names a
//     "Least-Stale" policy for MoE caches; we did not have its exact
//     definition, and this is our own layer-clock formulation.
//   - belady: Belady's MIN, the offline optimum: evict the expert whose next
//     use is furthest in the future. It needs the future ([Oracle]), so it
//     is for evaluation only: the bound every online policy is measured
//     against.
//   - oracle: the online policy that knows the generator of a synthetic
//     trace (Options.Routing: its weights, reuse, shift and current
//     popularity order) and evicts the expert least likely to be used at
//     its layer's next step, the probability computed from those parameters
//     and the routing so far; ties go to the expert whose next use is
//     furthest. Without reuse it is A0, the optimal online policy for
//     independent references. It measures what an online policy can reach
//     with the best information it could have (BENCHMARKS.md); no real
//     model has a Routing, so it is for evaluation only ([Evaluation]).
//   - oracle-learn: the oracle told the generator's structure (top-k,
//     reuse, the weights by rank, when the order shifts) but not which
//     expert has which rank (Routing.Ranks, if given, is ignored). It
//     estimates each expert's weight from its layer's routing since the
//     last shift — the posterior mean given how often the expert was drawn
//     at the runs it was not in the previous set, the ranks uniformly
//     likely a priori — and then evicts as the oracle does with those
//     weights. It is a reference for a policy that knows everything except
//     what it must learn from the data, not a bound (a better estimate, the
//     exact posterior over orders, could do better); for evaluation only.
//   - predict: the plug-in estimate of oracle, from nothing but the access
//     stream. Per layer it estimates the reuse beyond chance (how often an
//     expert of the last set is used again, less what fresh draws would
//     give) and each expert's popularity (decayed use counts, by the layer
//     clock; of three estimates — half-lives Options.HalfLifeTokens and half
//     that, and a growing one restarted when the popularity shifts — and
//     the same three counting only fresh draws, the one that predicted the
//     layer's recent fresh draws best, a fresh-draw count only where it
//     leads the use counts clearly; when a test that
//     pools the evidence of all layers detects that every layer's
//     popularity shifted at once, all estimates restart from the change
//     point), and evicts the
//     expert least likely to be used at its layer's next step, P = ρ + (1 −
//     ρ)·q for an expert of the layer's last set and q for the others; ties
//     go to the one used longest ago in its layer's runs.
//
// Which one is the default is chosen by measurement (BENCHMARKS.md, "Expert
// cache policies against Belady"); see [Default].
//
// # Reading ahead
//
// [ReadAhead] decides which of the engine's prefetch hints a tier reads
// ahead, by a cost rule (p·h > 1 − p, in units of one read) over what it
// measures: the hints' precision ([HintScore]), the share of a read that
// reads ahead had done before their step (given by the caller, which has
// the clock) and whether their copies were kept until then; it holds reads
// back where they do not pay and probes again.
package policy
