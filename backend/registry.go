package backend

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Options configures Open: what a program asks of a backend it opens by
// name. A backend ignores the fields that do not apply to it, or rejects
// them with an error (a device budget on the CPU).
type Options struct {
	// Threads is the number of host goroutines per operation (0: all
	// cores): the CPU backend's, or the host side of a device backend.
	Threads int
	// VRAMBudget bounds a device backend's memory in bytes (0: the whole
	// device); an error for the CPU backend.
	VRAMBudget int64
	// Device is the device ordinal of a device backend.
	Device int
	// Timing makes a device backend measure the device time of its kernels
	// and copies (Meter), for benchmarks.
	Timing bool
	// VerifyCopies makes a device backend hash every routed expert it copies
	// into device memory, there, against its digest.
	VerifyCopies bool
}

// Opener makes a backend from Options.
type Opener func(Options) (Backend, error)

// The registry: concrete backends register themselves (backend/cpu and
// backend/cuda in their init), so that the model code opens one by name
// without importing it; the program's composition root (runner,
// cmd/tarfa) imports the backends it links.
var (
	regMu   sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a backend openable by name. It panics if name is empty,
// open is nil or the name is already registered: two packages claiming one
// name is a build mistake, not a runtime condition.
func Register(name string, open Opener) {
	if name == "" || open == nil {
		panic("backend: Register needs a name and an opener")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := openers[name]; dup {
		panic(fmt.Sprintf("backend: %q registered twice", name))
	}
	openers[name] = open
}

// Registered returns the registered backend names, sorted.
func Registered() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(openers))
	for n := range openers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Open opens the backend registered as name. An unknown name's error lists
// the registered ones; an opener's error is wrapped with the name.
func Open(name string, o Options) (Backend, error) {
	regMu.RLock()
	open := openers[name]
	regMu.RUnlock()
	if open == nil {
		names := Registered()
		if len(names) == 0 {
			return nil, fmt.Errorf("backend %q: no backend is registered (the program must import backend/cpu or backend/cuda)", name)
		}
		return nil, fmt.Errorf("backend %q: want %s", name, strings.Join(names, " or "))
	}
	be, err := open(o)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return be, nil
}
