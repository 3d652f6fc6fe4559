package cuda

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// modules are the PTX modules gen.sh makes: each one's sources (its .cu
// file and the headers it includes) and its embedded PTX by architecture.
var modules = []struct {
	name string
	srcs []string
	ptx  map[string]string
	// minArith is the fewest float add/sub/mul/div/sqrt instructions
	// TestPTXCanonical expects (fewer: its pattern or the PTX is wrong).
	minArith int
}{
	{"ops", []string{"blake3.cuh", "canon.cuh", "ops.cu"}, map[string]string{"compute_80": ptx80, "compute_90": ptx90}, 1000},
	{"fp8", []string{"fp8.cu", "fp8.cuh"}, map[string]string{"compute_80": ptxFP8_80, "compute_90": ptxFP8_90}, 10},
}

// TestModulesCoverSources: every file in kernels/ is a source of some
// module (a new one must be added to gen.sh and to modules).
func TestModulesCoverSources(t *testing.T) {
	used := map[string]bool{}
	for _, m := range modules {
		for _, s := range m.srcs {
			used[s] = true
		}
	}
	for _, pat := range []string{"*.cu", "*.cuh"} {
		got, err := filepath.Glob(filepath.Join("kernels", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range got {
			if !used[filepath.Base(p)] {
				t.Errorf("kernels/%s is a source of no PTX module", filepath.Base(p))
			}
		}
	}
}

// sourceHashes reads the "// source NAME sha256 HEX" lines gen.sh writes at
// the top of a PTX file.
func sourceHashes(ptx string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(ptx))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "//") {
			break
		}
		var name, hash string
		if f := strings.Fields(line); len(f) == 5 && f[1] == "source" && f[3] == "sha256" {
			name, hash = f[2], f[4]
			out[name] = hash
		}
	}
	return out
}

// checkCurrent reports how ptx's recorded source hashes differ from srcs
// as they are in kernels/ (nil if they match exactly).
func checkCurrent(t *testing.T, ptx string, srcs []string, read func(name string) ([]byte, error)) []string {
	t.Helper()
	got := sourceHashes(ptx)
	var bad []string
	for _, s := range srcs {
		b, err := read(s)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:])
		switch h, ok := got[s]; {
		case !ok:
			bad = append(bad, s+": not among the PTX's sources")
		case h != want:
			bad = append(bad, s+": sha256 "+h+" in the PTX, "+want+" now")
		}
		delete(got, s)
	}
	for s := range got {
		bad = append(bad, s+": a source of the PTX that is not in kernels/")
	}
	slices.Sort(bad)
	return bad
}

// TestPTXIsCurrent: the embedded PTX of every module was generated from
// its sources as they are (run kernels/gen.sh where nvcc is after changing
// them).
func TestPTXIsCurrent(t *testing.T) {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join("kernels", name)) }
	for _, m := range modules {
		for arch, ptx := range m.ptx {
			if !strings.Contains(ptx, ".target sm_"+strings.TrimPrefix(arch, "compute_")) {
				t.Errorf("%s %s PTX: no .target line for its architecture", m.name, arch)
			}
			for _, b := range checkCurrent(t, ptx, m.srcs, read) {
				t.Errorf("%s %s PTX is stale (run backend/cuda/kernels/gen.sh %s): %s", m.name, arch, m.name, b)
			}
		}
	}
}

// TestPTXStaleDetected: a changed source, a missing one and an extra one
// are each reported (the check cannot pass vacuously).
func TestPTXStaleDetected(t *testing.T) {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join("kernels", name)) }
	changed := func(name string) ([]byte, error) {
		b, err := read(name)
		if name == "ops.cu" {
			b = append(slices.Clone(b), '\n')
		}
		return b, err
	}
	srcs := modules[0].srcs
	if bad := checkCurrent(t, ptx90, srcs, changed); len(bad) != 1 || !strings.HasPrefix(bad[0], "ops.cu: sha256") {
		t.Errorf("one changed source: %q", bad)
	}
	dropped := strings.Replace(ptx90, "// source canon.cuh", "// sourcex canon.cuh", 1)
	if bad := checkCurrent(t, dropped, srcs, read); len(bad) != 1 || !strings.Contains(bad[0], "not among") {
		t.Errorf("a source missing from the PTX: %q", bad)
	}
	extra := "// source gone.cu sha256 00\n" + ptx90
	if bad := checkCurrent(t, extra, srcs, read); len(bad) != 1 || !strings.Contains(bad[0], "not in kernels") {
		t.Errorf("an extra source: %q", bad)
	}
}

// TestDevKnobs: the validation build's overrides set their fields, and a
// value that is not a number is refused.
func TestDevKnobs(t *testing.T) {
	env := map[string]string{"TARFA_CUDA_MATMUL_DEPTH": "1", "TARFA_CUDA_MATMUL_ROWS": "4"}
	set, err := devKnobs(func(k string) string { return env[k] })
	if err != nil || set == nil {
		t.Fatalf("knobs: %v", err)
	}
	var o Options
	set(&o)
	if o.MatMulDepth != 1 || o.MatMulRows != 4 {
		t.Errorf("options %+v", o)
	}
	if set, err := devKnobs(func(string) string { return "" }); set != nil || err != nil {
		t.Errorf("no knobs: %v, %v", set != nil, err)
	}
	if _, err := devKnobs(func(k string) string { return map[string]string{"TARFA_CUDA_MATMUL_ROWS": "four"}[k] }); err == nil {
		t.Error("TARFA_CUDA_MATMUL_ROWS=four accepted")
	}
}

// TestReadPTXBounded: a PTX file longer than maxPTX is refused, not read
// whole.
func TestReadPTXBounded(t *testing.T) {
	dir := t.TempDir()
	ok, long := filepath.Join(dir, "ok.ptx"), filepath.Join(dir, "long.ptx")
	if err := os.WriteFile(ok, []byte(ptx90), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readPTX(ok); err != nil || got != ptx90 {
		t.Errorf("a PTX file read back: %v (%d bytes)", err, len(got))
	}
	f, err := os.Create(long)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxPTX + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	if _, err := readPTX(long); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("a %d-byte file: %v", maxPTX+1, err)
	}
}

// TestRouteWarpE: the Go side's bound on route_warp is the kernel's.
func TestRouteWarpE(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("kernels", "ops.cu"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("#define ROUTE_WARP_E %d\n", routeWarpE); !strings.Contains(string(src), want) {
		t.Errorf("kernels/ops.cu has no %q", want)
	}
}

// TestSameSources: PTX loaded in place of the embedded one (ptxdir.go) must
// name the same sources with the same sha256: another compiler's output
// passes, a changed, missing or extra source does not, nor PTX without a
// header.
func TestSameSources(t *testing.T) {
	other := strings.Replace(ptx90, "with nvcc ", "with nvcc 99.9 (another) ", 1)
	if err := sameSources(other, ptx90); err != nil {
		t.Errorf("the same sources refused: %v", err)
	}
	if c := ptxCompiler(ptx90); !strings.HasPrefix(c, "nvcc release ") {
		t.Errorf("compiler %q", c)
	}
	i := strings.Index(ptx90, "// source ops.cu sha256 ")
	if i < 0 {
		t.Fatal("no ops.cu line in the PTX's header")
	}
	j := i + len("// source ops.cu sha256 ")
	flip := map[byte]byte{'0': '1'}[ptx90[j]]
	if flip == 0 {
		flip = '0'
	}
	for name, ptx := range map[string]string{
		"changed":   ptx90[:j] + string(flip) + ptx90[j+1:],
		"missing":   strings.Replace(ptx90, "// source canon.cuh", "// sourcex canon.cuh", 1),
		"extra":     strings.Replace(ptx90, "// source ops.cu", "// source gone.cu sha256 00\n// source ops.cu", 1),
		"no header": ".version 8.0\n.target sm_90\n",
	} {
		if err := sameSources(ptx, ptx90); err == nil {
			t.Errorf("%s source accepted", name)
		}
	}
	if err := sameSources(ptx90, ".version 8.0\n"); err == nil {
		t.Error("an embedded PTX without sources accepted")
	}
}

// forbidden matches PTX instructions the canonical arithmetic rules out:
// floating-point fused multiply-adds (fma, mad), approximate or
// flush-to-zero arithmetic (which covers ex2, lg2, sin, cos, rsqrt),
// tensor-core matrix instructions, and atomics or reductions to memory
// (their order is not fixed).
var forbidden = regexp.MustCompile(`^\s*(@!?%p\d+\s+)?((fma|mad)(\.\w+)*\.f(16|32|64)|(wmma|mma|wgmma|atom|red)\.[\w.]*|\w+(\.\w+)*\.(approx|ftz)(\.\w+)*)\b`)

// TestPTXCanonical: the embedded PTX has none of the instructions the
// canonical arithmetic forbids, and every float32 add, multiply and divide
// rounds to nearest even explicitly.
func TestPTXCanonical(t *testing.T) {
	arith := regexp.MustCompile(`^\s*(@!?%p\d+\s+)?(add|sub|mul|div|sqrt)(\.[\w]+)*\.f(32|64)\b`)
	for _, mod := range modules {
		for arch, ptx := range mod.ptx {
			n := 0
			for i, line := range strings.Split(ptx, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				if m := forbidden.FindString(line); m != "" {
					t.Errorf("%s %s PTX line %d: %s", mod.name, arch, i+1, strings.TrimSpace(line))
				}
				if m := arith.FindString(line); m != "" {
					n++
					if !strings.Contains(m, ".rn") {
						t.Errorf("%s %s PTX line %d: %s does not round to nearest explicitly", mod.name, arch, i+1, strings.TrimSpace(line))
					}
				}
			}
			if n < mod.minArith {
				t.Errorf("%s %s PTX: only %d float add/sub/mul/div/sqrt instructions found: the pattern or the PTX is wrong", mod.name, arch, n)
			}
		}
	}
	for _, bad := range []string{"\tfma.rn.f32 \t%f1, %f2, %f3, %f4;", "\tmad.rn.f32 %f1, %f2, %f3, %f4;", "\tmul.ftz.f32 %f1, %f2, %f3;",
		"\tex2.approx.f32 %f1, %f2;", "\t@%p1 atom.global.add.f32 %f1, [%rd1], %f2;", "\tred.global.add.f32 [%rd1], %f2;", "\tdiv.approx.f32 %f1, %f2, %f3;"} {
		if forbidden.FindString(bad) == "" {
			t.Errorf("the check misses %q", bad)
		}
	}
	for _, ok := range []string{"\tmad.lo.s32 %r1, %r2, %r3, %r4;", "\tadd.rn.f32 %f1, %f2, %f3;", "\tld.shared.f32 %f1, [%r1];", "\tcvt.rzi.s32.f64 %r1, %fd1;"} {
		if m := forbidden.FindString(ok); m != "" {
			t.Errorf("the check rejects %q (%q)", ok, m)
		}
	}
}

// TestKernelSizesMatchSources: the launch sizes the queue uses are the
// #defines the kernels are compiled with.
func TestKernelSizesMatchSources(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("kernels", "ops.cu"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"SN_THREADS": softmaxNormThreads, "ARGMAX_THREADS": argmaxThreads,
		"RN_THREADS": rmsRowThreads, "RN_MAX": rmsRowMax} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("ops.cu defines no %s", name)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("ops.cu: %s %d, the queue launches %d", name, got, want)
		}
	}
}
