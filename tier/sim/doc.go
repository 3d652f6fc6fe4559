// Package sim replays routing traces (package trace) through a model of the
// streaming memory hierarchy — storage, a RAM tier, device slots — and
// projects the time per token on given hardware. It also measures the hit
// rate of cache policies (package policy) against Belady's optimum. It is
// pure: no I/O; the numbers it produces are projections, labelled so.
//
// # Hierarchy
//
// Two tiers of resident experts, each a policy.Cache with the same policy
// and partitioning: device slots (VRAM) and the RAM tier, sized in whole
// experts. With device slots every expert is computed on the device: a
// device miss is looked up in the RAM tier and copied to the device; a RAM
// miss is read from storage, hashed (verified) into the RAM tier and then
// copied. The RAM tier sees only device misses (a multi-level cache, not
// inclusive). Without device slots (VRAM 0) every expert is computed on the
// CPU from the RAM tier. The experts of one layer are leased together while
// it computes, so each tier needs at least top-k slots (per layer, with
// per-layer partitions).
//
// # Without a device: the tier's own pipeline
//
// With no device slots the simulator replays the trace as tier.Hierarchy
// serves it to the engine on the CPU, Stream by Stream, with the same
// policy code deciding the same things in the same order: a layer's
// experts are leased resident ones first; an expert that finds every
// resident copy pinned streams through a device slot without being
// admitted; the Stream's own reads are issued; then the prefetch hint given
// before the Stream (Config.Hints: the engine's, recorded by a measured
// run; without them Prefetch p stands for a predictor naming p of the next
// layer's experts) starts reads for the hinted experts not resident that
// policy.ReadAhead decides to read ahead (their rank pays, their layer is
// not backed off, or a probe), admitted to the RAM tier and pinned until
// verified, while fewer than QueueDepth are in flight. Its Result carries
// the RAM tier's Counters in tier.Stats terms (hits include copies a
// prefetch is still reading; bytes read include every prefetch, wasted
// ones too; the read-ahead decisions and outcomes), and for the same
// trace, hints and options they are the hierarchy's: a test runs both and
// compares. Only when prefetch reads complete and release their leases,
// and whether a read ahead was still being read when its step came (the
// wait it hid, which policy.ReadAhead weighs), depend on time, so there
// the counters follow the simulated timing.
//
// The time model is an event replay of that pipeline. Reads are served in
// the order issued, each taking B / storage bandwidth, its latency
// overlapped queue-depth deep (a read into an idle store takes latency +
// B / bandwidth); each read buffer is then hashed in 1 MiB parts, each
// by the first of hash-cores hashers free. A layer's Stream starts after
// its non-expert work (dense), computes its resident experts at once, its own
// reads as each verifies, and then the copies prefetches are still
// reading, one expert at a time; a token is its layers plus a per-token
// overhead.
//
// # Time model with a device
//
// Per token and layer, with nD device hits, nR RAM hits and nS storage
// reads of B bytes each:
//
//	read    = nS·B / storage bandwidth + latency · ⌈nS / queue depth⌉
//	hash    = nS·B / (hash rate per core · hash cores)
//	copy    = (nR + nS)·B / host-to-device bandwidth
//	compute = (nD + nR + nS) · time per expert on the device
//	io      = max(read, hash, copy)
//	layer   = dense + max(io − hidden, compute) + fill
//
// The stages form a pipeline over the layer's experts (one expert's bytes
// are hashed and copied while the next is read, and computed while the next
// is copied), so the layer costs its slowest stage, not the sum; fill is the
// pipeline's start-up, one expert's time through the other stages it uses
// (the sum of its per-expert stage times minus the largest). dense is the
// layer's non-expert work (attention or DeltaNet, shared expert, router),
// which must finish before the router names the experts. With prefetch
// fraction p, that share of the next layer's I/O is issued early and runs
// while the I/O stages would otherwise idle during the current layer:
// hidden = min(p·io, previous layer − its io). A token costs its layers plus
// a per-token overhead (LM head, sampling).
//
// This is a model, not a measurement: Calibrate fits its hardware numbers to
// measured per-phase figures, and Validate compares its prediction of a run
// with the run's measured time per token (the hierarchy's target: within
// 15%).
package sim
