package canon

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// fmaInstr matches fused multiply-add mnemonics in `go build -gcflags=-S`
// output: amd64 VFMADD231SS & co, arm64/riscv64/ppc64/s390x FMADDS,
// FMSUBD, FNMADDS, …, arm64 vector VFMLA/VFMLS.
var fmaInstr = regexp.MustCompile(`^(VF(N)?M(ADD|SUB)|F(N)?M(ADD|SUB)|VFML[AS])`)

// The packages whose arithmetic is canonical: no FMA may appear in them.
var canonicalPackages = []string{
	"github.com/tarfa-ai/tarfa/engine/canon",
	"github.com/tarfa-ai/tarfa/engine/cpu",
	"github.com/tarfa-ai/tarfa/engine",
}

// targets are the builds in which Go contracts x*y+z into FMA.
var targets = []struct {
	name string
	env  []string
}{
	{"amd64-v3", []string{"GOOS=linux", "GOARCH=amd64", "GOAMD64=v3"}},
	{"arm64", []string{"GOOS=linux", "GOARCH=arm64"}},
}

// fmaLines compiles pkgs for one target and returns the assembly lines with
// FMA instructions (file:line and instruction).
func fmaLines(t *testing.T, dir string, env []string, pkgs ...string) []string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	args := append([]string{"build", "-o", os.DevNull, "-gcflags=-S"}, pkgs...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "CGO_ENABLED=0")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var hits []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		// instruction lines: "\t0x0000 00000 (file.go:12)\tMNEMONIC\targs"
		if len(f) >= 3 && strings.HasPrefix(f[1], "0x") && fmaInstr.MatchString(f[2]) {
			hits = append(hits, f[1]+" "+f[2])
		}
	}
	return hits
}

// TestNoFMA proves that the canonical packages compile without fused
// multiply-add on the targets where Go contracts x*y+z, so their bits do
// not depend on GOAMD64/GOARCH. A control program checks that the detector
// sees the FMA that plain x*y+z produces there.
func TestNoFMA(t *testing.T) {
	ctl := t.TempDir()
	os.WriteFile(filepath.Join(ctl, "go.mod"), []byte("module fmactl\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(ctl, "f.go"), []byte("package fmactl\n\nfunc F(x, y, z float32) float32 { return x*y + z }\n"), 0o644)
	for _, tg := range targets {
		if len(fmaLines(t, ctl, tg.env, ".")) == 0 {
			t.Fatalf("%s: the detector found no FMA in x*y+z", tg.name)
		}
		if hits := fmaLines(t, ".", tg.env, canonicalPackages...); len(hits) > 0 {
			t.Errorf("%s: %d fused multiply-adds in canonical code, e.g.:\n%s", tg.name, len(hits), strings.Join(hits[:min(len(hits), 10)], "\n"))
		}
	}
}

// TestNoFMAInAssembly: hand-written assembly is not in the compiler's -S
// output, so the .s files of the canonical packages are scanned directly;
// and their arithmetic may only be VMULPS and VADDPS.
func TestNoFMAInAssembly(t *testing.T) {
	arith := regexp.MustCompile(`^V?(ADD|SUB|MUL|DIV|SQRT|RCP|RSQRT|MIN|MAX|DP|HADD|HSUB)(P|S)[SD]\b|^VF`)
	var files []string
	for _, dir := range []string{".", "../cpu", ".."} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.s"))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no assembly found; this test guards lanemajor_amd64.s")
	}
	ops := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 0 || strings.HasPrefix(fields[0], "//") {
				continue
			}
			op := fields[0]
			if fmaInstr.MatchString(op) {
				t.Errorf("%s:%d: fused multiply-add %s", f, i+1, op)
			}
			if arith.MatchString(op) {
				ops++
				if op != "VMULPS" && op != "VADDPS" {
					t.Errorf("%s:%d: %s: only VMULPS and VADDPS may do arithmetic in canonical assembly", f, i+1, op)
				}
			}
		}
	}
	if ops == 0 {
		t.Error("the scan saw no arithmetic at all")
	}
}
