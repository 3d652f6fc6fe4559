package canon

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fmaInstr matches the fused multiply-add mnemonics of Go's assemblers.
// What the compiler emits for x*y+z, x*y−z, z−x*y and −(x*y)−z (float32,
// float64), read from the control program of controlFused:
//
//	amd64 v3, v4      VFMADD231SS VFMADD231SD (x*y+z only)
//	arm64             FMADDS FMADDD FMSUBS FMSUBD FNMADDS FNMADDD FNMSUBS FNMSUBD
//	riscv64           FMADDS FMADDD FMSUBS FMSUBD FNMSUBS FNMSUBD
//	ppc64, ppc64le    FMADDS FMADD FMSUBS FMSUB
//	loong64           FMADDF FMADDD FMSUBF FMSUBD FNMADDF FNMADDD FNMSUBF FNMSUBD
//	s390x             FMADDS FMADD FMSUBS FMSUB
//
// The vector forms (amd64 VFNMADD…/VFMSUB…, arm64 VFMLA/VFMLS, s390x
// VFMA/WFMADB…, ppc64 XSMADDADP…) are matched too, for assembly files.
var fmaInstr = regexp.MustCompile(`^(VF(N)?M(ADD|SUB)|F(N)?M(ADD|SUB)|VFML[AS]|[VW]FN?M[AS]([SD]B)?$|X[SV]N?M(ADD|SUB))`)

// mulInstr matches a separate floating-point multiply of any of these
// architectures (MULSS, FMULS, FMUL, MULF, MULD, F32Mul, …); on arm,
// MULAF/MULSF are VMLA/VMLS, which round the product before adding.
var mulInstr = regexp.MustCompile(`(?i)mul`)

// The packages whose arithmetic must be canonical: no FMA may appear in
// them. validation/synth writes the synthetic checkpoints that tests pin.
var canonicalPackages = []string{
	"github.com/tarfa-ai/tarfa/canon",
	"github.com/tarfa-ai/tarfa/backend/cpu",
	"github.com/tarfa-ai/tarfa/engine",
	"github.com/tarfa-ai/tarfa/validation/synth",
}

// fmaTargets are the builds in which Go contracts x*y+z into FMA: all of
// them (TestFMATargetsComplete checks every GOARCH).
var fmaTargets = []struct {
	name string
	env  []string
}{
	{"amd64-v3", []string{"GOOS=linux", "GOARCH=amd64", "GOAMD64=v3"}},
	{"amd64-v4", []string{"GOOS=linux", "GOARCH=amd64", "GOAMD64=v4"}},
	{"arm64", []string{"GOOS=linux", "GOARCH=arm64"}},
	{"riscv64", []string{"GOOS=linux", "GOARCH=riscv64"}},
	{"ppc64le", []string{"GOOS=linux", "GOARCH=ppc64le"}},
	{"ppc64", []string{"GOOS=linux", "GOARCH=ppc64"}},
	{"loong64", []string{"GOOS=linux", "GOARCH=loong64"}},
	{"s390x", []string{"GOOS=linux", "GOARCH=s390x"}},
}

// instr is one instruction of `go build -gcflags=-S` output.
type instr struct {
	fn  string // symbol of the function, e.g. fmactl.A32
	pos string // "(file.go:12)"
	op  string // mnemonic
}

// compiled compiles pkgs (in dir) for env with -gcflags=-S and returns
// their instructions.
func compiled(t *testing.T, dir string, env []string, pkgs ...string) []instr {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	args := append([]string{"build", "-o", os.DevNull, "-gcflags=-S"}, pkgs...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "CGO_ENABLED=0")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s go %s: %v\n%s", strings.Join(env, " "), strings.Join(args, " "), err, out)
	}
	var ins []instr
	fn := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// function headers: "fmactl.A32 STEXT nosplit size=… args=…"
		if i := strings.Index(line, " STEXT"); i > 0 && !strings.HasPrefix(line, "\t") {
			fn = line[:i]
			continue
		}
		// instructions: "\t0x0000 00000 (file.go:12)\tMNEMONIC\targs"
		f := strings.Split(line, "\t")
		if len(f) >= 3 && strings.HasPrefix(f[1], "0x") {
			pos := f[1]
			if i := strings.Index(pos, "("); i >= 0 {
				pos = pos[i:]
			}
			ins = append(ins, instr{fn, pos, f[2]})
		}
	}
	if len(ins) == 0 {
		t.Fatalf("%s: no instructions in the -S output of %v", strings.Join(env, " "), pkgs)
	}
	return ins
}

// controlProgram holds every shape of multiply-add that Go can fuse.
const controlProgram = `package fmactl

func A32(x, y, z float32) float32 { return x*y + z }
func S32(x, y, z float32) float32 { return x*y - z }
func R32(x, y, z float32) float32 { return z - x*y }
func N32(x, y, z float32) float32 { return -(x * y) - z }
func A64(x, y, z float64) float64 { return x*y + z }
func S64(x, y, z float64) float64 { return x*y - z }
func R64(x, y, z float64) float64 { return z - x*y }
func N64(x, y, z float64) float64 { return -(x * y) - z }
`

var controlFuncs = []string{"A32", "S32", "R32", "N32", "A64", "S64", "R64", "N64"}

// controlFused compiles the control program for env and returns, for each
// function of controlFuncs, whether the detector sees an FMA in it. It
// fails the test if a function has neither an FMA nor a separate multiply
// (a fused instruction the detector does not know).
func controlFused(t *testing.T, env []string) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fmactl\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte(controlProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	fused, mul := map[string]bool{}, map[string]bool{}
	for _, in := range compiled(t, dir, env, ".") {
		name := strings.TrimPrefix(in.fn, "fmactl.")
		if fmaInstr.MatchString(in.op) {
			fused[name] = true
		} else if mulInstr.MatchString(in.op) {
			mul[name] = true
		}
	}
	for _, f := range controlFuncs {
		if !fused[f] && !mul[f] {
			t.Errorf("%s: control %s has neither a multiply nor an FMA the detector knows", strings.Join(env, " "), f)
		}
	}
	return fused
}

// allTargetsEnv, set to 1, makes TestNoFMA compile every target of
// fmaTargets; .ci/run's step "no FMA on every target" sets it, with its own
// -timeout. Without it TestNoFMA compiles one target, so that a plain
// `go test ./...` stays cheap on a cold build cache: each target rebuilds
// the canonical packages' ~150 dependencies for its GOARCH (about 35 s of
// a 2-core machine each, 5 minutes for all eight).
const allTargetsEnv = "TARFA_TEST_FMA_ALL_TARGETS"

// quickTarget is the target TestNoFMA compiles by default: this machine's
// GOARCH at the lowest level where Go fuses (amd64: v3; v4 differs only
// in its AVX-512 encodings and is compiled with the others), or, for a
// GOARCH where Go never fuses, the first of the list.
func quickTarget() string {
	for _, tg := range fmaTargets {
		if slices.Contains(tg.env, "GOARCH="+runtime.GOARCH) {
			return tg.name
		}
	}
	return fmaTargets[0].name
}

// TestNoFMA proves that the canonical packages compile without fused
// multiply-add on every target where Go contracts x*y+z, so their bits do
// not depend on GOARCH/GOAMD64. On each target the control program shows
// that the detector sees the FMA that plain x*y+z produces there. By
// default it compiles quickTarget only and says so; with
// TARFA_TEST_FMA_ALL_TARGETS=1, every target (nothing is skipped either
// way: the other targets are not run, and the log says where they are).
func TestNoFMA(t *testing.T) {
	all := false
	switch v := os.Getenv(allTargetsEnv); v {
	case "":
	case "1":
		all = true
	default:
		t.Fatalf("%s=%q: want 1 (every target) or unset (%s only)", allTargetsEnv, v, quickTarget())
	}
	quick := quickTarget()
	var others []string
	for _, tg := range fmaTargets {
		if !all && tg.name != quick {
			others = append(others, tg.name)
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			fused := controlFused(t, tg.env)
			if !fused["A32"] || !fused["A64"] {
				t.Fatalf("%s: the detector found no FMA in x*y+z (float32 %v, float64 %v)", tg.name, fused["A32"], fused["A64"])
			}
			var hits []string
			for _, in := range compiled(t, ".", tg.env, canonicalPackages...) {
				if fmaInstr.MatchString(in.op) {
					hits = append(hits, in.fn+" "+in.pos+" "+in.op)
				}
			}
			if len(hits) > 0 {
				t.Errorf("%s: %d fused multiply-adds in canonical code, e.g.:\n%s", tg.name, len(hits), strings.Join(hits[:min(len(hits), 10)], "\n"))
			}
		})
	}
	if len(others) > 0 {
		t.Logf("compiled for %s only; the %d other targets (%s) are compiled with %s=1, as .ci/run's step \"no FMA on every target\" does",
			quick, len(others), strings.Join(others, ", "), allTargetsEnv)
	}
}

// TestFMATargetsComplete: the control program compiled for every GOARCH the
// toolchain supports (and every GOAMD64 level) is fused exactly on the
// builds listed in fmaTargets, so TestNoFMA leaves none out.
func TestFMATargetsComplete(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "tool", "dist", "list").Output()
	if err != nil {
		t.Fatalf("go tool dist list: %v", err)
	}
	goos := map[string]string{} // GOARCH -> a GOOS for it, linux if possible
	for _, p := range strings.Fields(string(out)) {
		o, arch, _ := strings.Cut(p, "/")
		if g, ok := goos[arch]; !ok || g != "linux" && o == "linux" {
			goos[arch] = o
		}
	}
	listed := map[string]bool{}
	for _, tg := range fmaTargets {
		listed[strings.Join(tg.env, " ")] = true
	}
	var fusedBuilds []string
	for arch, o := range goos {
		envs := [][]string{{"GOOS=" + o, "GOARCH=" + arch}}
		if arch == "amd64" {
			envs = nil
			for _, v := range []string{"v1", "v2", "v3", "v4"} {
				envs = append(envs, []string{"GOOS=" + o, "GOARCH=" + arch, "GOAMD64=" + v})
			}
		}
		for _, env := range envs {
			fused := controlFused(t, env)
			key := strings.Join(env, " ")
			if len(fused) > 0 {
				fusedBuilds = append(fusedBuilds, key)
			}
			if len(fused) > 0 != listed[key] {
				t.Errorf("%s: control fused %v, but listed in fmaTargets: %v", key, fused, listed[key])
			}
		}
	}
	slices.Sort(fusedBuilds)
	t.Logf("%d architectures; x*y+z is fused on: %s", len(goos), strings.Join(fusedBuilds, "; "))
}

// fpInstr matches the amd64 instructions that round or compute in floating
// point: the arithmetic (packed and scalar, float32, float64 and binary16),
// every conversion (CVT: widening, narrowing, to and from integers), the
// rounding and exponent/mantissa ones, dot products, and everything that
// begins with VF (the FMA families, VFIXUPIMM, VFPCLASS) or F (x87).
var fpInstr = regexp.MustCompile(`^V?(ADD|SUB|MUL|DIV|SQRT|RCP|RSQRT|MIN|MAX|DP|HADD|HSUB|ADDSUB)(P|S)[SDH]\b|CVT|ROUND|RNDSCALE|SCALEF|GETEXP|GETMANT|REDUCE|RANGE|DPBF16|DPPH|^VF|^F`)

// asmAllowed is, for each canonical assembly file, exactly the
// floating-point instructions (fpInstr) it may hold, and why each is exact
// or canonical there. A file not listed may hold none; every one listed
// must be used.
var asmAllowed = map[string]map[string]string{
	"lanemajor_amd64.s": {
		// The canonical reduction itself: each product is rounded once, then
		// added in the canonical order of its lane (no FMA).
		"VMULPS": "the rounded product of a term",
		"VADDPS": "the canonical sum of a lane",
	},
	"blockfp8_amd64.s": {
		// The exact block-FP8 group sums (blockfp8_vec.go): no operation rounds.
		"VCVTPH2PS": "binary16 to float32 widens exactly (the codes, shifted into binary16 patterns, subnormals included)",
		"VCVTPS2PD": "float32 to float64 widens exactly",
		"VMULPD":    "E4M3Int(w)·2^-17 times E4M3Int(q)·2^17: 4 significant bits each, the product (< 2^36) is exact",
		"VADDPD":    "integers below 2^52 in magnitude (every partial group sum): exact in any order",
	},
}

// TestNoFMAInAssembly: hand-written assembly is not in the compiler's -S
// output, so the .s files of the canonical packages are scanned directly:
// no FMA anywhere, and each file's floating-point instructions exactly
// those asmAllowed gives it.
func TestNoFMAInAssembly(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../backend/cpu", "../engine", "../validation/synth"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.s"))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no assembly found; this test guards lanemajor_amd64.s and blockfp8_amd64.s")
	}
	seenFiles := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		allowed := asmAllowed[name]
		if filepath.Dir(f) != "." {
			allowed = nil // the listed names are canon's files
		} else {
			seenFiles[name] = true
		}
		used := map[string]bool{}
		for i, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 0 || strings.HasPrefix(fields[0], "//") {
				continue
			}
			op := fields[0]
			if fmaInstr.MatchString(op) {
				t.Errorf("%s:%d: fused multiply-add %s", f, i+1, op)
			}
			if fpInstr.MatchString(op) {
				used[op] = true
				if _, ok := allowed[op]; !ok {
					t.Errorf("%s:%d: %s: not one of the floating-point instructions allowed in this file (%v)", f, i+1, op, slices.Sorted(maps.Keys(allowed)))
				}
			}
		}
		for op := range allowed {
			if !used[op] {
				t.Errorf("%s: %s is allowed but not used: keep asmAllowed exact", f, op)
			}
		}
	}
	for name := range asmAllowed {
		if !seenFiles[name] {
			t.Errorf("%s: listed in asmAllowed but not found", name)
		}
	}
}

// TestFPInstrMatches: the instructions the assembly scan must recognise as
// floating point, and some it must not.
func TestFPInstrMatches(t *testing.T) {
	for _, op := range []string{"VMULPS", "VADDPS", "VMULPD", "VADDPD", "VADDSD", "MULSS", "VHADDPD", "VSUBPS",
		"VCVTPH2PS", "VCVTPS2PD", "VCVTPD2PS", "VCVTPS2PH", "VCVTDQ2PS", "VCVTTPS2DQ", "CVTSL2SD", "VROUNDPS",
		"VRNDSCALEPS", "VDPPS", "VDPBF16PS", "VFMADD231PS", "VFNMSUB213SD", "VSCALEFPD", "VGETEXPPS", "FADDD", "VADDPH"} {
		if !fpInstr.MatchString(op) {
			t.Errorf("fpInstr misses %s", op)
		}
	}
	for _, op := range []string{"VPMOVSXBW", "VPSLLW", "VPAND", "VEXTRACTF128", "VPERMILPD", "VMOVSD", "VXORPD",
		"VMOVUPS", "VPUNPCKLWD", "VPMOVZXWD", "VPSLLD", "VPBROADCASTD", "MOVQ", "ADDQ", "LEAQ", "VZEROUPPER"} {
		if fpInstr.MatchString(op) {
			t.Errorf("fpInstr matches %s, which does no floating-point arithmetic", op)
		}
	}
}
