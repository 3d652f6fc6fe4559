package tokenizer

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoEngineDependencies keeps the package importable on its own: it must
// not depend on any other package of engine/.
func TestNoEngineDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	n := 0
	for _, dep := range strings.Fields(string(out)) {
		n++
		if strings.HasPrefix(dep, "github.com/tarfa-ai/tarfa/") &&
			!strings.HasPrefix(dep, "github.com/tarfa-ai/tarfa/engine/tokenizer") {
			t.Errorf("engine/tokenizer depends on %s", dep)
		}
	}
	if n < 10 {
		t.Fatalf("go list -deps gave only %d packages: %s", n, out)
	}
}
