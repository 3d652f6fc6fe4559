package sim

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// RoutingOf is the routing model of a synthetic trace, for the oracle
// policy (policy.Options.Routing): its generator's reuse, shift, draw
// weights and popularity order of every epoch, replayed from the header's
// parameters. A measured trace has no generator: it is refused.
func RoutingOf(tr *trace.Trace) (*policy.Routing, error) {
	h := tr.Header
	if h.Source != trace.Synthetic || h.Generator == nil {
		return nil, fmt.Errorf("sim: the oracle policy needs the generator of a synthetic trace; this trace's source is %s, it has none", h.Source)
	}
	g := *h.Generator
	pop, err := trace.PopularityOf(g, h.Layers, h.Experts, h.TopK, tr.Tokens())
	if err != nil {
		return nil, fmt.Errorf("sim: routing of %s: %w", h.Label(), err)
	}
	return &policy.Routing{TopK: h.TopK, Reuse: g.Reuse, Weights: pop.Weights, Shift: g.Shift, Ranks: pop.Ranks}, nil
}
