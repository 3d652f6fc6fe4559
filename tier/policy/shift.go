package policy

// Parameters of the pooled shift detector (shiftPool), picked on DRIFT and
// U (BENCHMARKS.md): with them no stationary trace of BENCHMARKS.md raises
// an alarm in 3000 tokens, and DRIFT's shifts are detected at most a token
// late.
const (
	// shiftWindow is the longest a candidate change point is kept, in
	// tokens, and so the number of runs of each layer predict keeps to
	// restart its estimates from the change point.
	shiftWindow = 32
	// shiftPrior is the prior of the detector's popularity models, in
	// fresh draws per expert (uniform).
	shiftPrior = 2
	// shiftMargin is the CUSUM's reference value, in nats per fresh draw:
	// what the fresh model must gain per draw before it counts as
	// evidence. It covers the fresh model's edge on routing that is
	// uniform, where the prior is the truth and more data only adds noise.
	shiftMargin = 0.05
	// shiftNats is the CUSUM's threshold, in nats summed over all layers.
	shiftNats = 30
)

// shiftPool is a sequential test for a change of popularity in all layers
// at once: a change of topic moves every layer's routing at the same token,
// so the evidence of all layers is pooled, and a shift shows within a token
// or two while no single layer could tell it from noise that fast. The
// per-layer instances of a partitioned tier share one pool (Options.pool).
//
// Each layer contributes, per fresh draw (an expert not in its previous
// set), the log-likelihood ratio of two models of its fresh draws: the
// fresh model, fitted since the candidate change point tau, and the long
// model, fitted since the last shift detected, each the posterior
// predictive of a categorical with a uniform prior of shiftPrior draws per
// expert; less shiftMargin. The pool sums them per token and runs a CUSUM
// over the sums: when the sum since tau drops to 0 or below, tau moves to
// the next token (the fresh model forgets); when it passes shiftNats a
// shift is detected with change point tau. A candidate older than
// shiftWindow tokens is dropped too, so the layers need keep only that
// many runs to restart from it.
type shiftPool struct {
	tok   int64   // the token whose evidence sum accumulates
	sum   float64 // its sum
	s     float64 // the CUSUM statistic: the evidence since tau
	tau   int64   // the candidate change point: the first token of the fresh model
	epoch int     // shifts detected
	start int64   // the change point of the last shift detected
}

func newShiftPool() *shiftPool { return &shiftPool{tok: -1} }

// advance moves the pool to token tok, closing the token before it.
func (p *shiftPool) advance(tok int64) {
	if tok <= p.tok {
		return
	}
	if p.tok < 0 {
		p.tau = tok
	} else {
		p.s += p.sum
		switch {
		case p.s > shiftNats:
			p.epoch++
			p.start = p.tau
			p.s, p.tau = 0, p.tok+1
		case p.s <= 0 || p.tok+1-p.tau >= shiftWindow-1:
			p.s, p.tau = 0, p.tok+1
		}
	}
	p.tok, p.sum = tok, 0
}

// add adds one draw's evidence to token tok (the pool's current token; a
// draw of an earlier one is ignored).
func (p *shiftPool) add(tok int64, llr float64) {
	if tok == p.tok {
		p.sum += llr
	}
}
