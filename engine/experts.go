package engine

import (
	"context"
	"fmt"

	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// ExpertSource supplies the routed experts one MoE step needs (the
// streaming hierarchy, package tier, implements it). Stream calls
// c.Consume for each of experts exactly once, in any order — as each
// verified copy becomes available — on the calling goroutine, and the copy
// may be released or recycled as soon as Consume returns. It stops at the
// first error (from the source or from Consume) and returns it. The model's
// results do not depend on the order: every expert's outputs go to their
// own (token, slot) rows, which are combined in the canonical slot order.
type ExpertSource interface {
	Stream(ctx context.Context, layer int, experts []int, c ExpertConsumer) error
}

// ExpertConsumer computes with routed experts as a source delivers them.
type ExpertConsumer interface {
	// Consume computes with expert e of the current layer. It must not keep
	// ve or any view of it after returning. tier says where the verified
	// bytes came from for this use.
	Consume(e int, ve weights.VerifiedExpert, tier ledger.Tier) error
}

// directSource reads experts from the checkpoint one by one, in order,
// keeping recently used ones in an optional LRU cache of verified values
// (the engine's default when no hierarchy is given).
type directSource struct {
	w     source
	cache *expertCache // nil: none
}

func (d *directSource) Stream(ctx context.Context, layer int, experts []int, c ExpertConsumer) error {
	for _, e := range experts {
		if err := ctx.Err(); err != nil {
			return err
		}
		ve, hit := d.cache.get(layer, e)
		tier := ledger.TierRAM
		if !hit {
			var err error
			if ve, err = d.w.Expert(layer, e); err != nil {
				return fmt.Errorf("engine: layer %d expert %d: %w", layer, e, err)
			}
			tier = ledger.TierStorage
		}
		if err := c.Consume(e, ve, tier); err != nil {
			return err
		}
		if !hit {
			d.cache.put(layer, e, ve)
		}
	}
	return nil
}

// Hinter is an ExpertSource that can use a prediction of the experts a
// layer will need (the streaming hierarchy prefetches them). Hints are
// speed only: a source must produce the same results without them.
type Hinter interface {
	Hint(layer int, experts []int)
}
