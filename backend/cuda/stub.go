//go:build !cuda

package cuda

import "github.com/tarfa-ai/tarfa/backend"

// Built reports whether this binary has the CUDA backend.
const Built = false

// New fails: this build has no CUDA backend.
func New(Options) (backend.Backend, error) { return nil, ErrNotBuilt }
