package backend

import (
	"errors"
	"strings"
	"testing"
)

// TestRegistry checks the backend registry: an empty one says what the
// program must import, a registered opener is called with the options, an
// unknown name lists the registered ones, an opener's error keeps its cause
// under the backend's name, and a name cannot be claimed twice.
func TestRegistry(t *testing.T) {
	saved := openers
	openers = map[string]Opener{}
	t.Cleanup(func() { openers = saved })

	if _, err := Open("cpu", Options{}); err == nil || !strings.Contains(err.Error(), "no backend is registered") {
		t.Fatalf("empty registry: %v", err)
	}
	var got Options
	Register("b", func(o Options) (Backend, error) { got = o; return nil, nil })
	cause := errors.New("no device")
	Register("a", func(Options) (Backend, error) { return nil, cause })
	if names := Registered(); strings.Join(names, ",") != "a,b" {
		t.Fatalf("Registered = %q, want [a b]", names)
	}
	if _, err := Open("b", Options{Threads: 3, VRAMBudget: 7}); err != nil || got.Threads != 3 || got.VRAMBudget != 7 {
		t.Fatalf("Open(b) = %v with options %+v", err, got)
	}
	if _, err := Open("tpu", Options{}); err == nil || err.Error() != `backend "tpu": want a or b` {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := Open("a", Options{}); !errors.Is(err, cause) || err.Error() != "backend a: no device" {
		t.Fatalf("opener error: %v", err)
	}
	for _, bad := range []struct {
		name string
		open Opener
	}{{"b", func(Options) (Backend, error) { return nil, nil }}, {"", func(Options) (Backend, error) { return nil, nil }}, {"c", nil}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, nil=%v) did not panic", bad.name, bad.open == nil)
				}
			}()
			Register(bad.name, bad.open)
		}()
	}
}
