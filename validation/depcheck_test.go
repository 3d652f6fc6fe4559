package validation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The dependency fence (STYLE.md lesson 6): the packages that decide whether
// a model is the checkpoint must stay small enough to audit, so they may not
// depend on the engine or on CUDA, and nothing they build from may use cgo.

// fencedDirs are module-relative directories whose packages (recursively)
// are fenced. A directory that does not exist or has no Go files yet is
// fine; one with Go files must yield at least one package.
var fencedDirs = []string{"jnf", "verify", "attest", "golden"}

// forbiddenImports may not be imported, directly or indirectly, by a fenced
// package: each entry also covers its subpackages.
var forbiddenImports = []string{
	"github.com/tarfa-ai/tarfa/engine",
	"gorgonia.org/cu",
	// A test-only DSSE interop oracle (it prints to stdout from library code).
	"github.com/secure-systems-lab/go-securesystemslib",
}

// listedPackage holds the fields of `go list -json` that the check uses.
type listedPackage struct {
	ImportPath string
	Standard   bool
	DepOnly    bool
	CgoFiles   []string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

func TestDependencyFence(t *testing.T) {
	goTool := findGo(t)
	root := moduleRoot(t, goTool)

	var patterns []string
	wantSome := map[string]bool{} // fenced dir -> has non-test Go files
	for _, d := range fencedDirs {
		n := countGoFiles(t, filepath.Join(root, d))
		if n < 0 {
			continue // no such directory yet
		}
		patterns = append(patterns, "./"+d+"/...")
		wantSome[d] = n > 0
	}
	if len(patterns) == 0 {
		t.Fatalf("none of %v exists under %s", fencedDirs, root)
	}

	// CGO_ENABLED=1 so that cgo files are listed in CgoFiles rather than
	// silently dropped from the build; go list compiles nothing.
	args := append([]string{"list", "-e", "-deps", "-json=ImportPath,Standard,DepOnly,CgoFiles,Imports,Deps,Error"}, patterns...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	pkgs, err := decodePackages(out)
	if err != nil {
		t.Fatal(err)
	}

	roots := fencedRoots(pkgs)
	for d, some := range wantSome {
		prefix := "github.com/tarfa-ai/tarfa/" + d
		got := slices.ContainsFunc(roots, func(p string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") })
		if some && !got {
			t.Errorf("%s/ has Go files but go list found no package in it", d)
		}
	}
	for _, v := range checkFence(pkgs, forbiddenImports) {
		t.Error(v)
	}
	t.Logf("fenced packages: %s", strings.Join(roots, " "))
}

// fencedRoots are the packages that matched the patterns (not deps only).
func fencedRoots(pkgs map[string]*listedPackage) []string {
	var roots []string
	for path, p := range pkgs {
		if !p.DepOnly {
			roots = append(roots, path)
		}
	}
	slices.Sort(roots)
	return roots
}

// checkFence returns one message per violation: a fenced (non-DepOnly)
// package that depends on a forbidden import (with the import chain), a
// non-standard package in a fenced package's build that has cgo files, and
// a package that go list could not load.
func checkFence(pkgs map[string]*listedPackage, forbidden []string) []string {
	var out []string
	isForbidden := func(path string) bool {
		for _, f := range forbidden {
			if path == f || strings.HasPrefix(path, f+"/") {
				return true
			}
		}
		return false
	}
	cgoReported := map[string]bool{}
	for _, root := range fencedRoots(pkgs) {
		p := pkgs[root]
		closure := append([]string{root}, p.Deps...)
		for _, dep := range closure {
			if isForbidden(dep) {
				out = append(out, fmt.Sprintf("%s depends on forbidden %s: %s", root, dep, strings.Join(importChain(pkgs, root, dep), " -> ")))
			}
			d, ok := pkgs[dep]
			if !ok {
				continue
			}
			if d.Error != nil {
				out = append(out, fmt.Sprintf("%s: cannot check dependency %s: %s", root, dep, d.Error.Err))
			}
			if !d.Standard && len(d.CgoFiles) > 0 && !cgoReported[dep] {
				cgoReported[dep] = true
				out = append(out, fmt.Sprintf("%s uses cgo (%s), reached from %s: %s",
					dep, strings.Join(d.CgoFiles, ", "), root, strings.Join(importChain(pkgs, root, dep), " -> ")))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// importChain is a shortest import path from one package to another.
func importChain(pkgs map[string]*listedPackage, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for c := to; c != ""; c = prev[c] {
				chain = append(chain, c)
			}
			slices.Reverse(chain)
			return chain
		}
		if p, ok := pkgs[cur]; ok {
			for _, imp := range p.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return []string{from, "…", to}
}

func decodePackages(data []byte) (map[string]*listedPackage, error) {
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	if len(pkgs) == 0 {
		return nil, errors.New("go list printed no packages")
	}
	return pkgs, nil
}

// countGoFiles counts non-test .go files under dir, or returns -1 if dir
// does not exist. testdata and dot/underscore directories are skipped, as
// the go tool does.
func countGoFiles(t *testing.T, dir string) int {
	t.Helper()
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return -1
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func findGo(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("cannot find the go command (PATH or GOROOT): %v", err)
	}
	return p
}

func moduleRoot(t *testing.T, goTool string) string {
	t.Helper()
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("not inside a module (GOMOD=%q)", gomod)
	}
	return filepath.Dir(gomod)
}

// TestCheckFenceCatchesViolations runs the checker on a synthetic package
// graph, so the fence test is known to fail when it should.
func TestCheckFenceCatchesViolations(t *testing.T) {
	pkgs := map[string]*listedPackage{
		"m/attest":            {ImportPath: "m/attest", Imports: []string{"m/util", "fmt"}, Deps: []string{"fmt", "m/engine/cuda", "m/util", "x/cgolib"}},
		"m/util":              {ImportPath: "m/util", DepOnly: true, Imports: []string{"m/engine/cuda", "x/cgolib"}, Deps: []string{"m/engine/cuda", "x/cgolib"}},
		"m/engine/cuda":       {ImportPath: "m/engine/cuda", DepOnly: true},
		"x/cgolib":            {ImportPath: "x/cgolib", DepOnly: true, CgoFiles: []string{"c.go"}},
		"fmt":                 {ImportPath: "fmt", DepOnly: true, Standard: true},
		"m/verify":            {ImportPath: "m/verify", Imports: []string{"net"}, Deps: []string{"net", "m/broken"}},
		"net":                 {ImportPath: "net", DepOnly: true, Standard: true, CgoFiles: []string{"cgo_unix.go"}},
		"m/broken":            {ImportPath: "m/broken", DepOnly: true, Error: &struct{ Err string }{"no Go files"}},
		"m/jnf":               {ImportPath: "m/jnf", Imports: []string{"m/engineering"}, Deps: []string{"m/engineering"}},
		"m/engineering":       {ImportPath: "m/engineering", DepOnly: true},
		"gorgonia.org/cu/ext": {ImportPath: "gorgonia.org/cu/ext", DepOnly: true},
	}
	got := checkFence(pkgs, []string{"m/engine", "gorgonia.org/cu"})
	want := []string{
		"m/attest depends on forbidden m/engine/cuda: m/attest -> m/util -> m/engine/cuda",
		"m/verify: cannot check dependency m/broken: no Go files",
		"x/cgolib uses cgo (c.go), reached from m/attest: m/attest -> m/util -> x/cgolib",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A standard-library package with cgo files (net) and a path that only
	// shares a prefix with a forbidden one (m/engineering) are fine.
	delete(pkgs, "m/attest")
	delete(pkgs, "m/broken")
	pkgs["m/verify"].Deps = []string{"net"}
	if got := checkFence(pkgs, []string{"m/engine", "gorgonia.org/cu"}); len(got) != 0 {
		t.Fatalf("clean graph reported: %q", got)
	}
}
