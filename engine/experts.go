package engine

import (
	"context"
	"fmt"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/ledger"
)

// ExpertSource supplies the routed experts one MoE step needs; it is
// declared in package expertstream, below both the engine and the tier that
// implements it, so that the tier does not import the engine.
type ExpertSource = expertstream.Source

// ExpertConsumer computes with routed experts as a source delivers them
// (expertstream.Consumer).
type ExpertConsumer = expertstream.Consumer

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
		if err := c.Consume(e, expertstream.OnHost(ve), tier); err != nil {
			return err
		}
		if !hit {
			d.cache.put(layer, e, ve)
		}
	}
	return nil
}

// Hinter is an ExpertSource that can use a prediction of the experts a
// layer will need (expertstream.Hinter). Hints are speed only.
type Hinter = expertstream.Hinter
