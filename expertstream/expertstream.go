// Package expertstream is the seam between the model code (package engine), which
// computes with routed experts, and what delivers them to it (the streaming
// hierarchy, package tier, or the engine's own direct reader). It sits below
// both, so that neither has to import the other: the tier implements Source
// without knowing the engine, and the engine consumes without knowing the
// tier. It names only verified experts (package weights), the device slots
// they are placed in (package backend's interfaces) and where their bytes
// came from (ledger.Tier).
package expertstream

import (
	"context"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// Source supplies the routed experts one MoE step needs (the streaming
// hierarchy, package tier, implements it). Stream calls c.Consume for each
// of experts exactly once, in any order — as each is placed: a verified
// copy available, or a device slot that holds it — on the calling
// goroutine, and the copy and the slot may be released, recycled or
// refilled as soon as Consume returns. It stops at the first error (from the
// source or from Consume) and returns it. The model's results do not depend
// on the order: every expert's outputs go to their own (token, slot) rows,
// which are combined in the canonical slot order.
type Source interface {
	Stream(ctx context.Context, layer int, experts []int, c Consumer) error
}

// Placed is a routed expert as a source delivers it: where the consumer
// computes it from.
//   - Slot nil: Host is the verified copy, computed from in place (or
//     copied to a device for this use only: backend.Queue.LoadExpert).
//   - Slot set, Filled false: the source admitted the expert to its device
//     level; the consumer fills the slot from Host on its own queue
//     (backend.SlotQueue.FillSlot), then binds it.
//   - Slot set, Filled true: the slot holds the expert already (a device
//     hit; Host is zero): the consumer binds it (BindSlot).
type Placed struct {
	// ID and Digest name the expert (its manifest record).
	ID     weights.ExpertID
	Digest jnf.Digest
	// Host is the verified copy of the expert's bytes (zero for a filled
	// slot).
	Host   weights.VerifiedExpert
	Slot   backend.Slot
	Filled bool
}

// OnHost places a verified copy on the host (Slot nil).
func OnHost(ve weights.VerifiedExpert) Placed {
	return Placed{ID: ve.ID(), Digest: ve.Digest(), Host: ve}
}

// Consumer computes with routed experts as a source delivers them.
type Consumer interface {
	// Consume computes with expert e of the current layer as p places it.
	// It must not keep p.Host or any view of it, nor a binding of p.Slot,
	// after returning. origin says where the bytes came from for this use
	// (ledger.TierDevice: a filled slot).
	Consume(e int, p Placed, origin ledger.Tier) error
}

// HostPlacer is a Consumer that may compute an expert on the host from a
// verified copy in host memory instead of having it copied into a device
// slot (where to compute is speed only: both give the same bits). A Source
// with a device level asks it, while it leases the step's slots, about
// each expert the device level does not hold and its RAM tier does: one it
// answers true for gets no slot and is delivered with Slot nil, and the
// consumer computes it where it answered.
type HostPlacer interface {
	PreferHost(e int, bytes int64) bool
}

// Prefiller is a Consumer that can copy an expert it is expected to need
// later into a device slot now, on its own queue, computing nothing (a
// Source's device prefetch: the copy then overlaps other work). p carries
// the verified copy (p.Host) and the slot to fill (p.Slot); the bytes are
// read before Prefill returns. A later Stream delivers the slot filled
// (Placed.Filled) and the consumer binds it by digest, as any device hit.
type Prefiller interface {
	Prefill(p Placed) error
}

// Hinter is a Source that can use a prediction of the experts a layer will
// need (the streaming hierarchy prefetches them). Hints are speed only: a
// source must produce the same results without them.
type Hinter interface {
	Hint(layer int, experts []int)
}
