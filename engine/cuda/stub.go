//go:build !cuda && !cudaemu

package cuda

import (
	"errors"

	"github.com/tarfa-ai/tarfa/engine/backend"
)

// ErrNotBuilt is New's error in a binary built without CUDA.
var ErrNotBuilt = errors.New("this binary was built without CUDA: build it with -tags cuda (see engine/cuda)")

// Built reports whether this binary has the CUDA backend.
const Built = false

// New fails: this build has no CUDA backend.
func New(Options) (backend.Backend, error) { return nil, ErrNotBuilt }
