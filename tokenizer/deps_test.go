package tokenizer

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// allowedDeps are the packages of the module outside tokenizer that
// the tokenizer may use: jnf for its capped file reads (jnf depends on the
// standard library only).
var allowedDeps = []string{"github.com/tarfa-ai/tarfa/jnf"}

// TestNoEngineDependencies keeps the package importable on its own: it must
// not depend on any other package of engine/, nor on the module's other
// packages beyond allowedDeps.
func TestNoEngineDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	n := 0
	for _, dep := range strings.Fields(string(out)) {
		n++
		if strings.HasPrefix(dep, "github.com/tarfa-ai/tarfa/") &&
			!strings.HasPrefix(dep, "github.com/tarfa-ai/tarfa/tokenizer") &&
			!slices.Contains(allowedDeps, dep) {
			t.Errorf("tokenizer depends on %s", dep)
		}
	}
	if n < 10 {
		t.Fatalf("go list -deps gave only %d packages: %s", n, out)
	}
}
