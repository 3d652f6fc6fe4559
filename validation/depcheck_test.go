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
// a model is the checkpoint must stay small enough to audit, so they may
// depend only on an allowlist (the standard library, each other, the two
// hash implementations, and the BLAKE3 compressions weights hashes an expert
// with in parts), never on the engine or CUDA, and nothing they build from
// may use cgo. The fence is checked for every build tag set and
// platform Tarfa ships (fenceBuilds), so a file behind a build tag cannot
// slip past it. Beside it: only listed packages may use unsafe (the verified
// bytes are immutable only while nobody else does), and no production package
// may import the test helpers (weights/weightstest, package testing).

// fencedDirs are module-relative directories whose packages (recursively)
// are fenced. A directory that does not exist or has no Go files yet is
// fine; one with Go files must yield at least one package.
var fencedDirs = []string{"jnf", "verify", "attest", "golden", "weights", "ledger"}

// allowedImports are the only non-standard packages a fenced package may
// depend on, directly or indirectly: each entry also covers its subpackages.
var allowedImports = []string{
	"github.com/tarfa-ai/tarfa/jnf",
	"github.com/tarfa-ai/tarfa/verify",
	"github.com/tarfa-ai/tarfa/attest",
	"github.com/tarfa-ai/tarfa/golden",
	"github.com/tarfa-ai/tarfa/weights",
	"github.com/tarfa-ai/tarfa/ledger",
	"github.com/zeebo/blake3",
	"lukechampine.com/blake3/guts", // weights: an expert's BLAKE3 in parts, on several cores (weights/tree.go)
	"github.com/minio/sha256-simd",
	"github.com/klauspost/cpuid/v2", // sha256-simd's CPU detection
	"golang.org/x/sync/errgroup",    // convert's worker pool
	"golang.org/x/sys/unix",         // internal/diskspace (statfs), internal/flock
	"github.com/tarfa-ai/tarfa/internal/flock",
	"github.com/tarfa-ai/tarfa/internal/outdir",    // the write journal of convert (standard library and internal/flock only)
	"github.com/tarfa-ai/tarfa/internal/diskspace", // statfs only (golang.org/x/sys/unix)
}

// fenceBuilds are the build configurations the fences are checked under.
var fenceBuilds = []struct{ goarch, tags string }{
	{"amd64", ""}, {"amd64", "purego"}, {"amd64", "cuda"}, {"arm64", ""}, {"arm64", "cuda"},
}

// unsafeAllowed are the production packages that may import unsafe: the
// backends view verified bytes in place, weights makes them immutable;
// backend/cuda/b3host and fp8host hand Go bytes to the CUDA kernels' C for
// the host checks of their BLAKE3 and block-FP8 arithmetic (test-only: see
// testOnly); internal/pagecache
// gives mincore the address of its vector (the tier asks whether a record's
// pages are cached before it chooses O_DIRECT).
var unsafeAllowed = []string{
	"github.com/tarfa-ai/tarfa/backend",
	"github.com/tarfa-ai/tarfa/internal/pagecache",
	"github.com/tarfa-ai/tarfa/backend/cuda",
	"github.com/tarfa-ai/tarfa/backend/cuda/b3host",
	"github.com/tarfa-ai/tarfa/backend/cuda/fp8host",
	"github.com/tarfa-ai/tarfa/weights",
}

// testOnly are packages production code (the tarfa binary and every
// non-test package of the module) must never import.
var testOnly = []string{"github.com/tarfa-ai/tarfa/weights/weightstest", "github.com/tarfa-ai/tarfa/jnf/hf/hftest", "github.com/tarfa-ai/tarfa/backend/backendtest",
	"github.com/tarfa-ai/tarfa/backend/cuda/b3host", "github.com/tarfa-ai/tarfa/backend/cuda/fp8host", "testing"}

// The arrows point downward (architecture review 2026-12, §1.2): beside
// the fence, the module's layering is pinned, so that a new upward import
// fails here rather than in a review.
//
// coreLayers orders the proof core (the fenced packages and the internal
// helpers they use), lowest first: a package may import only packages of a
// lower layer, never one of its own or a higher one, and every fenced
// package must have a layer (a new one is placed deliberately).
var coreLayers = [][]string{
	{"jnf", "internal/flock", "internal/diskspace"},
	{"jnf/safetensors", "internal/outdir"},
	{"jnf/hf", "golden"},
	{"verify", "ledger"},
	{"weights", "attest", "convert"},
	{"weights/weightstest", "jnf/hf/hftest"},
}

// importBans are dependencies (direct or indirect) that packages may never
// have, under any build of fenceBuilds. from is a module-relative package,
// or a directory with "/..." for it and all its subpackages; each entry of
// deny also covers its subpackages (a module-relative path, or a full one
// for another module).
var importBans = []importBan{
	// The storage/RAM tier serves experts through the seam below it
	// (expertstream) and never links the model code or a GPU driver: its
	// init must not need one.
	{"tier/...", []string{"engine", "backend/cuda", "gorgonia.org/cu"}, "the tier sits below the engine; its seam is expertstream"},
	// The model code opens backends by name (backend.Register), the host
	// one included; the composition root links the concrete backends. The
	// engine receives experts from a source and never reaches for the tier.
	{"engine", []string{"backend/cpu", "backend/cuda", "gorgonia.org/cu", "tier"}, "the engine imports no concrete backend (they register) and no tier (its seam is expertstream)"},
	// The independent verifier checks a checkpoint with nothing but its
	// own reading of the bytes (STYLE lesson 3): the replay format and the
	// ledger may not leak into it, even through a package between, and
	// those two know nothing of how weights are loaded or verified. (Bans
	// that would close an import cycle are left to the compiler.)
	{"verify/...", []string{"golden", "ledger"}, "the verifier is independent of what it checks"},
	{"golden/...", []string{"weights", "verify"}, "golden files are data below the loaders"},
	{"ledger/...", []string{"weights", "verify"}, "the ledger records; it does not load or verify"},
}

type importBan struct {
	from string
	deny []string
	why  string
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

func goList(t *testing.T, goTool, root, goarch, tags string, patterns ...string) map[string]*listedPackage {
	t.Helper()
	// CGO_ENABLED=1 so that cgo files are listed in CgoFiles rather than
	// silently dropped from the build; go list compiles nothing.
	args := []string{"list", "-e", "-deps", "-tags", tags, "-json=ImportPath,Standard,DepOnly,CgoFiles,Imports,Deps,Error"}
	args = append(args, patterns...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH="+goarch)
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
	return pkgs
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
	for _, b := range fenceBuilds {
		name := "GOARCH=" + b.goarch + " -tags=" + b.tags
		pkgs := goList(t, goTool, root, b.goarch, b.tags, patterns...)
		roots := fencedRoots(pkgs)
		for d, some := range wantSome {
			prefix := "github.com/tarfa-ai/tarfa/" + d
			got := slices.ContainsFunc(roots, func(p string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") })
			if some && !got {
				t.Errorf("%s: %s/ has Go files but go list found no package in it", name, d)
			}
		}
		for _, v := range checkFence(pkgs, allowedImports) {
			t.Errorf("%s: %s", name, v)
		}
		all := goList(t, goTool, root, b.goarch, b.tags, "./...")
		for _, v := range checkProduction(all, unsafeAllowed, testOnly) {
			t.Errorf("%s: %s", name, v)
		}
		for _, v := range checkLayers(all, modulePath, coreLayers, roots) {
			t.Errorf("%s: %s", name, v)
		}
		for _, v := range checkBans(all, modulePath, importBans) {
			t.Errorf("%s: %s", name, v)
		}
		if b.goarch == "amd64" && b.tags == "" {
			t.Logf("fenced packages: %s", strings.Join(roots, " "))
		}
	}
}

// checkProduction checks every module package that is not a test helper:
// it may import unsafe only if listed in unsafeOK, and may not depend on a
// test-only package.
func checkProduction(pkgs map[string]*listedPackage, unsafeOK, testOnly []string) []string {
	var out []string
	const module = "github.com/tarfa-ai/tarfa/"
	for path, p := range pkgs {
		if !strings.HasPrefix(path, module) || slices.Contains(testOnly, path) {
			continue
		}
		if slices.Contains(p.Imports, "unsafe") && !slices.Contains(unsafeOK, path) {
			out = append(out, fmt.Sprintf("%s imports unsafe, which only %v may", path, unsafeOK))
		}
		for _, dep := range append(slices.Clone(p.Imports), p.Deps...) {
			if slices.Contains(testOnly, dep) || strings.HasPrefix(dep, "testing/") {
				out = append(out, fmt.Sprintf("%s depends on the test-only %s: %s", path, dep, strings.Join(importChain(pkgs, path, dep), " -> ")))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

const modulePath = "github.com/tarfa-ai/tarfa"

// checkLayers checks that every module package placed in layers imports
// only packages of lower layers, and that each of the fenced packages has a
// layer. Paths in layers are relative to module.
func checkLayers(pkgs map[string]*listedPackage, module string, layers [][]string, fenced []string) []string {
	var out []string
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[module+"/"+p] = i
		}
	}
	for _, f := range fenced {
		if _, ok := layer[f]; !ok {
			out = append(out, fmt.Sprintf("%s is fenced but has no layer in coreLayers: place it", f))
		}
	}
	for path, p := range pkgs {
		lp, ok := layer[path]
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			li, ok := layer[imp]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s (layer %d) imports %s, which has no layer in coreLayers", path, lp, imp))
			case li >= lp:
				out = append(out, fmt.Sprintf("%s (layer %d) imports %s (layer %d): imports must point to a lower layer", path, lp, imp, li))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkBans reports every package matched by a ban's from that depends,
// directly or indirectly, on one of its denied packages, with the chain.
func checkBans(pkgs map[string]*listedPackage, module string, bans []importBan) []string {
	var out []string
	full := func(p string) string {
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			return p // another module's path
		}
		return module + "/" + p
	}
	under := func(path, prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	for _, b := range bans {
		dir, recursive := strings.CutSuffix(b.from, "/...")
		from := full(dir)
		matched := false
		for path, p := range pkgs {
			if path != from && !(recursive && under(path, from)) {
				continue
			}
			matched = true
			for _, dep := range append(slices.Clone(p.Imports), p.Deps...) {
				for _, d := range b.deny {
					if under(dep, full(d)) {
						out = append(out, fmt.Sprintf("%s depends on %s (%s): %s", path, dep, b.why, strings.Join(importChain(pkgs, path, dep), " -> ")))
					}
				}
			}
		}
		if !matched {
			out = append(out, fmt.Sprintf("ban on %s matches no package (renamed?)", b.from))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
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
// package that depends on a non-standard package outside allowed (with the
// import chain), a non-standard package in a fenced package's build that
// has cgo files, and a package that go list could not load.
func checkFence(pkgs map[string]*listedPackage, allowed []string) []string {
	var out []string
	isAllowed := func(path string) bool {
		if d, ok := pkgs[path]; ok && d.Standard {
			return true
		}
		for _, f := range allowed {
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
			if !isAllowed(dep) {
				out = append(out, fmt.Sprintf("%s depends on %s, which is not on the allowlist: %s", root, dep, strings.Join(importChain(pkgs, root, dep), " -> ")))
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

// TestCheckFenceCatchesViolations runs the checkers on a synthetic package
// graph, so the fence test is known to fail when it should.
func TestCheckFenceCatchesViolations(t *testing.T) {
	pkgs := map[string]*listedPackage{
		"m/attest":            {ImportPath: "m/attest", Imports: []string{"m/util", "fmt"}, Deps: []string{"fmt", "m/backend/cuda", "m/util", "x/cgolib"}},
		"m/util":              {ImportPath: "m/util", DepOnly: true, Imports: []string{"m/backend/cuda", "x/cgolib"}, Deps: []string{"m/backend/cuda", "x/cgolib"}},
		"m/backend/cuda":      {ImportPath: "m/backend/cuda", DepOnly: true},
		"x/cgolib":            {ImportPath: "x/cgolib", DepOnly: true, CgoFiles: []string{"c.go"}},
		"fmt":                 {ImportPath: "fmt", DepOnly: true, Standard: true},
		"m/verify":            {ImportPath: "m/verify", Imports: []string{"net"}, Deps: []string{"net", "m/broken"}},
		"net":                 {ImportPath: "net", DepOnly: true, Standard: true, CgoFiles: []string{"cgo_unix.go"}},
		"m/broken":            {ImportPath: "m/broken", DepOnly: true, Error: &struct{ Err string }{"no Go files"}},
		"m/jnf":               {ImportPath: "m/jnf", Imports: []string{"m/jnfx"}, Deps: []string{"m/jnfx"}},
		"m/jnfx":              {ImportPath: "m/jnfx", DepOnly: true},
		"gorgonia.org/cu/ext": {ImportPath: "gorgonia.org/cu/ext", DepOnly: true},
	}
	allowed := []string{"m/jnf", "m/verify", "m/attest", "m/broken"}
	got := checkFence(pkgs, allowed)
	want := []string{
		"m/attest depends on m/backend/cuda, which is not on the allowlist: m/attest -> m/util -> m/backend/cuda",
		"m/attest depends on m/util, which is not on the allowlist: m/attest -> m/util",
		"m/attest depends on x/cgolib, which is not on the allowlist: m/attest -> m/util -> x/cgolib",
		"m/jnf depends on m/jnfx, which is not on the allowlist: m/jnf -> m/jnfx",
		"m/verify: cannot check dependency m/broken: no Go files",
		"x/cgolib uses cgo (c.go), reached from m/attest: m/attest -> m/util -> x/cgolib",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A standard-library package with cgo files (net) and a path that only
	// shares a prefix with an allowed one (m/jnfx) are told apart.
	delete(pkgs, "m/attest")
	delete(pkgs, "m/broken")
	delete(pkgs, "m/jnf")
	pkgs["m/verify"].Deps = []string{"net"}
	if got := checkFence(pkgs, allowed); len(got) != 0 {
		t.Fatalf("clean graph reported: %q", got)
	}

	prod := map[string]*listedPackage{
		"github.com/tarfa-ai/tarfa/engine":               {ImportPath: "github.com/tarfa-ai/tarfa/engine", Imports: []string{"unsafe", "fmt"}},
		"github.com/tarfa-ai/tarfa/backend":              {ImportPath: "github.com/tarfa-ai/tarfa/backend", Imports: []string{"unsafe"}},
		"github.com/tarfa-ai/tarfa/cmd/tarfa":            {ImportPath: "github.com/tarfa-ai/tarfa/cmd/tarfa", Imports: []string{"github.com/tarfa-ai/tarfa/x"}, Deps: []string{"github.com/tarfa-ai/tarfa/x", "github.com/tarfa-ai/tarfa/weights/weightstest", "testing"}},
		"github.com/tarfa-ai/tarfa/x":                    {ImportPath: "github.com/tarfa-ai/tarfa/x", Imports: []string{"github.com/tarfa-ai/tarfa/weights/weightstest", "testing/fstest"}, Deps: []string{"github.com/tarfa-ai/tarfa/weights/weightstest", "testing", "testing/fstest"}},
		"github.com/tarfa-ai/tarfa/weights/weightstest":  {ImportPath: "github.com/tarfa-ai/tarfa/weights/weightstest", Imports: []string{"testing"}},
		"github.com/tarfa-ai/tarfa/validation/something": {ImportPath: "github.com/tarfa-ai/tarfa/validation/something", Imports: []string{"os"}},
		"testing":        {ImportPath: "testing", Standard: true},
		"testing/fstest": {ImportPath: "testing/fstest", Standard: true, Imports: []string{"testing"}},
	}
	got = checkProduction(prod, []string{"github.com/tarfa-ai/tarfa/backend"}, testOnly)
	want = []string{
		"github.com/tarfa-ai/tarfa/cmd/tarfa depends on the test-only github.com/tarfa-ai/tarfa/weights/weightstest: github.com/tarfa-ai/tarfa/cmd/tarfa -> github.com/tarfa-ai/tarfa/x -> github.com/tarfa-ai/tarfa/weights/weightstest",
		"github.com/tarfa-ai/tarfa/cmd/tarfa depends on the test-only testing: github.com/tarfa-ai/tarfa/cmd/tarfa -> github.com/tarfa-ai/tarfa/x -> github.com/tarfa-ai/tarfa/weights/weightstest -> testing",
		"github.com/tarfa-ai/tarfa/engine imports unsafe, which only [github.com/tarfa-ai/tarfa/backend] may",
		"github.com/tarfa-ai/tarfa/x depends on the test-only github.com/tarfa-ai/tarfa/weights/weightstest: github.com/tarfa-ai/tarfa/x -> github.com/tarfa-ai/tarfa/weights/weightstest",
		"github.com/tarfa-ai/tarfa/x depends on the test-only testing/fstest: github.com/tarfa-ai/tarfa/x -> testing/fstest",
		"github.com/tarfa-ai/tarfa/x depends on the test-only testing: github.com/tarfa-ai/tarfa/x -> github.com/tarfa-ai/tarfa/weights/weightstest -> testing",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("production violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheckLayersAndBansCatchViolations runs the layering and ban checks on
// a synthetic graph: an import into the same layer or a higher one, an
// import of a module package with no layer, a fenced package with no layer,
// a banned dependency reached directly or through another package, and a
// ban that matches nothing are each reported; the clean graph is not.
func TestCheckLayersAndBansCatchViolations(t *testing.T) {
	pkgs := map[string]*listedPackage{
		"m/low":        {ImportPath: "m/low", Imports: []string{"fmt"}},
		"m/mid":        {ImportPath: "m/mid", Imports: []string{"m/low", "m/side"}},
		"m/side":       {ImportPath: "m/side", Imports: []string{"m/top"}},
		"m/top":        {ImportPath: "m/top", Imports: []string{"m/low", "m/loose"}},
		"m/loose":      {ImportPath: "m/loose"},
		"m/tier":       {ImportPath: "m/tier", Imports: []string{"m/tier/x"}, Deps: []string{"m/tier/x", "m/engine", "x.org/cu"}},
		"m/tier/x":     {ImportPath: "m/tier/x", Imports: []string{"m/engine"}, Deps: []string{"m/engine", "x.org/cu"}},
		"m/engine":     {ImportPath: "m/engine", Imports: []string{"m/backend"}, Deps: []string{"m/backend"}},
		"m/engine/gpu": {ImportPath: "m/engine/gpu", Imports: []string{"x.org/cu"}, Deps: []string{"x.org/cu"}},
		"x.org/cu":     {ImportPath: "x.org/cu"},
	}
	layers := [][]string{{"low"}, {"mid", "side"}, {"top"}}
	got := checkLayers(pkgs, "m", layers, []string{"m/low", "m/mid", "m/new"})
	want := []string{
		"m/mid (layer 1) imports m/side (layer 1): imports must point to a lower layer",
		"m/new is fenced but has no layer in coreLayers: place it",
		"m/side (layer 1) imports m/top (layer 2): imports must point to a lower layer",
		"m/top (layer 2) imports m/loose, which has no layer in coreLayers",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("layer violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	bans := []importBan{
		{"tier/...", []string{"engine", "x.org/cu"}, "below"},
		{"engine", []string{"engine/gpu"}, "registers"},
		{"gone", []string{"low"}, "renamed"},
	}
	got = checkBans(pkgs, "m", bans)
	want = []string{
		"ban on gone matches no package (renamed?)",
		"m/tier depends on m/engine (below): m/tier -> m/tier/x -> m/engine",
		"m/tier depends on x.org/cu (below): m/tier -> … -> x.org/cu",
		"m/tier/x depends on m/engine (below): m/tier/x -> m/engine",
		"m/tier/x depends on x.org/cu (below): m/tier/x -> … -> x.org/cu",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ban violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The engine may use its seam and the device backend may use the
	// driver: only the banned arrows are reported.
	pkgs["m/engine"].Imports = append(pkgs["m/engine"].Imports, "m/engine/gpu")
	pkgs["m/engine"].Deps = append(pkgs["m/engine"].Deps, "m/engine/gpu", "x.org/cu")
	got = checkBans(pkgs, "m", bans[1:2])
	if want := []string{"m/engine depends on m/engine/gpu (registers): m/engine -> m/engine/gpu"}; !slices.Equal(got, want) {
		t.Fatalf("engine ban: %q, want %q", got, want)
	}
	pkgs["m/mid"].Imports = []string{"m/low"}
	pkgs["m/side"].Imports = []string{"m/low"}
	pkgs["m/top"].Imports = []string{"m/mid", "m/side"}
	if got := checkLayers(pkgs, "m", layers, []string{"m/low", "m/mid"}); len(got) != 0 {
		t.Fatalf("clean layering reported: %q", got)
	}
}
