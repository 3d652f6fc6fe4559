package cpu

import (
	"errors"

	"github.com/tarfa-ai/tarfa/backend"
)

// The reference backend registers as "cpu" (backend.Open).
func init() {
	backend.Register("cpu", func(o backend.Options) (backend.Backend, error) {
		if o.VRAMBudget != 0 {
			return nil, errors.New("a device-memory budget needs a device backend, not cpu")
		}
		return New(o.Threads), nil
	})
}
