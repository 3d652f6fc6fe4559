// Package expertstream is the seam between the model code (package engine), which
// computes with routed experts, and what delivers them to it (the streaming
// hierarchy, package tier, or the engine's own direct reader). It sits below
// both, so that neither has to import the other: the tier implements Source
// without knowing the engine, and the engine consumes without knowing the
// tier. It names only verified experts (package weights) and where their
// bytes came from (ledger.Tier).
package expertstream

import (
	"context"

	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// Source supplies the routed experts one MoE step needs (the streaming
// hierarchy, package tier, implements it). Stream calls c.Consume for each
// of experts exactly once, in any order — as each verified copy becomes
// available — on the calling goroutine, and the copy may be released or
// recycled as soon as Consume returns. It stops at the first error (from the
// source or from Consume) and returns it. The model's results do not depend
// on the order: every expert's outputs go to their own (token, slot) rows,
// which are combined in the canonical slot order.
type Source interface {
	Stream(ctx context.Context, layer int, experts []int, c Consumer) error
}

// Consumer computes with routed experts as a source delivers them.
type Consumer interface {
	// Consume computes with expert e of the current layer. It must not keep
	// ve or any view of it after returning. origin says where the verified
	// bytes came from for this use.
	Consume(e int, ve weights.VerifiedExpert, origin ledger.Tier) error
}

// Hinter is a Source that can use a prediction of the experts a layer will
// need (the streaming hierarchy prefetches them). Hints are speed only: a
// source must produce the same results without them.
type Hinter interface {
	Hint(layer int, experts []int)
}
