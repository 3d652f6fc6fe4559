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

// storageSource, the engine's source when Options.Experts is nil, reads
// every expert from the checkpoint (verified by package weights) for
// every use, in order, and keeps nothing: experts kept in memory are a
// hierarchy's (package tier), which the caller constructs.
type storageSource struct{ w source }

func (d storageSource) Stream(ctx context.Context, layer int, experts []int, c ExpertConsumer) error {
	for _, e := range experts {
		if err := ctx.Err(); err != nil {
			return err
		}
		ve, err := d.w.Expert(layer, e)
		if err != nil {
			return fmt.Errorf("engine: layer %d expert %d: %w", layer, e, err)
		}
		if err := c.Consume(e, expertstream.OnHost(ve), ledger.TierStorage); err != nil {
			return err
		}
	}
	return nil
}

// Hinter is an ExpertSource that can use a prediction of the experts a
// layer will need (expertstream.Hinter). Hints are speed only.
type Hinter = expertstream.Hinter
