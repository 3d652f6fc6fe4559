package decodebench

import (
	"testing"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/ledger"
)

type plainConsumer struct{ consumed int }

func (c *plainConsumer) Consume(int, expertstream.Placed, ledger.Tier) error {
	c.consumed++
	return nil
}

type placerConsumer struct{ plainConsumer }

func (placerConsumer) PreferHost(int, int64) bool { return true }

type prefillConsumer struct{ plainConsumer }

func (prefillConsumer) Prefill(expertstream.Placed) error { return nil }

type bothConsumer struct{ plainConsumer }

func (bothConsumer) PreferHost(int, int64) bool        { return true }
func (bothConsumer) Prefill(expertstream.Placed) error { return nil }

// TestTimedConsumerKeepsInterfaces: the timing wrapper is a HostPlacer and
// a Prefiller exactly when the consumer it wraps is, and still times and
// forwards Consume.
func TestTimedConsumerKeepsInterfaces(t *testing.T) {
	for _, c := range []struct {
		name   string
		c      expertstream.Consumer
		hp, pf bool
	}{{"plain", &plainConsumer{}, false, false}, {"placer", &placerConsumer{}, true, false},
		{"prefiller", &prefillConsumer{}, false, true}, {"both", &bothConsumer{}, true, true}} {
		tc := timedConsumer{c: c.c}
		w := tc.wrap()
		_, hp := w.(expertstream.HostPlacer)
		_, pf := w.(expertstream.Prefiller)
		if hp != c.hp || pf != c.pf {
			t.Errorf("%s: wrapped, HostPlacer %v Prefiller %v; want %v %v", c.name, hp, pf, c.hp, c.pf)
		}
		if err := w.Consume(0, expertstream.Placed{}, ledger.TierDevice); err != nil || tc.n != 1 {
			t.Errorf("%s: Consume through the wrapper: %v, %d timed", c.name, err, tc.n)
		}
	}
}
