package engine

import (
	"fmt"

	"github.com/tarfa-ai/tarfa/backend"
)

// Backends are the backend names Tarfa ships (backend/cpu and backend/cuda;
// the cuda one says how to build it in a binary built without CUDA).
// OpenBackend opens those the program has linked: the engine imports no
// concrete backend, they register themselves (backend.Register).
var Backends = []string{"cpu", "cuda"}

// BackendOptions configures OpenBackend.
type BackendOptions = backend.Options

// OpenBackend opens a registered backend by name: "cpu" (the reference, also
// for "") or "cuda" (an error naming the fix in a binary built without
// CUDA). The program must import the backend packages it opens (runner
// imports both).
func OpenBackend(name string, o BackendOptions) (backend.Backend, error) {
	if name == "" {
		name = "cpu"
	}
	be, err := backend.Open(name, o)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return be, nil
}
