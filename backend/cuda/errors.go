package cuda

import "errors"

// ErrNotBuilt is New's error in a binary built without CUDA.
var ErrNotBuilt = errors.New("this binary was built without CUDA: build it with -tags cuda (see backend/cuda)")
