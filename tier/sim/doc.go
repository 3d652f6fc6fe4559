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
// # Time model
//
// Per token and layer, with nD device hits, nR RAM hits and nS storage
// reads of B bytes each:
//
//	read    = nS·B / storage bandwidth + latency · ⌈nS / queue depth⌉
//	hash    = nS·B / (hash rate per core · hash cores)
//	copy    = (nR + nS)·B / host-to-device bandwidth    (0 without a device)
//	compute = (nD + nR + nS) · time per expert          (device or CPU)
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
