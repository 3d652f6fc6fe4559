package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// helperEnv turns this package's test binary into a helper for
// TestBuildInvariance: instead of running the tests it writes the
// checkpoints and value streams of invarianceDigest into the directory the
// variable names and prints their digest.
const helperEnv = "TARFA_SYNTH_DIGEST_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		d, err := invarianceDigest(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(d)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// invarianceDigest writes every tiny checkpoint (both architectures, both
// layouts) and the default model into dir and returns the SHA-256 of all
// their files (names, sizes and bytes, in path order), followed by 2²⁰
// values of every initialisation in F32 (a few checkpoint values could
// hide a difference that only 1% of inputs show).
func invarianceDigest(dir string) (string, error) {
	var opts []Options
	for _, arch := range []hf.Arch{hf.Qwen3MoE, hf.Qwen35MoE} {
		for _, layout := range []string{hf.LayoutPerExpert, hf.LayoutFused} {
			opts = append(opts, Options{Arch: arch, Preset: "tiny", Seed: 7, Layout: layout})
		}
	}
	def, err := DefaultOptions()
	if err != nil {
		return "", err
	}
	opts = append(opts, def)
	for i, o := range opts {
		if err := Write(filepath.Join(dir, fmt.Sprint(i)), o); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, k := range []initKind{initConst, initNormal, initNormOff, initALog} {
		s := tensorSpec{name: fmt.Sprint("stream ", k), dtype: jnf.F32, shape: shape{1 << 20}, init: k, scale: 0.37}
		if err := fill(h, s, 11); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// qemuEnv asks TestBuildInvariance to also run the helper for the other
// architectures where Go fuses multiply-adds, under qemu user emulation
// (qemu-aarch64 & co must be installed). Without it those builds are
// covered by the assembly check of canon.TestNoFMA only.
const qemuEnv = "TARFA_TEST_QEMU"

// TestBuildInvariance: the checkpoints synth writes do not depend on the
// build. The test binary of this package is built again for GOAMD64=v1 and
// v3 (where Go fuses x*y+z into VFMADD231SS) and run as a helper: both must
// give the digest of this process. With TARFA_TEST_QEMU=1 the arm64,
// riscv64, ppc64le, loong64 and s390x builds run too, under qemu.
func TestBuildInvariance(t *testing.T) {
	want, err := invarianceDigest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		name string
		env  []string
		qemu string // emulator, for a foreign architecture
	}
	targets := []target{
		{"amd64-v1", []string{"GOARCH=amd64", "GOAMD64=v1"}, ""},
		{"amd64-v3", []string{"GOARCH=amd64", "GOAMD64=v3"}, ""},
	}
	if os.Getenv(qemuEnv) != "" {
		targets = append(targets,
			target{"arm64", []string{"GOARCH=arm64"}, "qemu-aarch64"},
			target{"riscv64", []string{"GOARCH=riscv64"}, "qemu-riscv64"},
			target{"ppc64le", []string{"GOARCH=ppc64le"}, "qemu-ppc64le"},
			target{"loong64", []string{"GOARCH=loong64"}, "qemu-loongarch64"},
			target{"s390x", []string{"GOARCH=s390x"}, "qemu-s390x"})
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		skipOrFail(t, fmt.Sprintf("the helpers are linux/amd64 programs; this is %s/%s", runtime.GOOS, runtime.GOARCH))
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := t.TempDir()
	for _, tg := range targets {
		exe := filepath.Join(bin, "synth-"+tg.name+".test")
		build := exec.Command(goTool, "test", "-c", "-o", exe, ".")
		build.Env = append(os.Environ(), append([]string{"GOOS=linux", "CGO_ENABLED=0"}, tg.env...)...)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%s: go test -c: %v\n%s", tg.name, err, out)
		}
		var cmd *exec.Cmd
		if tg.qemu != "" {
			emu, err := exec.LookPath(tg.qemu)
			if err != nil {
				t.Fatalf("%s: %s is set but %v", tg.name, qemuEnv, err)
			}
			cmd = exec.Command(emu, exe)
		} else {
			cmd = exec.Command(exe)
		}
		cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			if strings.Contains(stderr.String(), "microarchitecture support") {
				skipOrFail(t, fmt.Sprintf("%s: this CPU cannot run the build: %s", tg.name, strings.TrimSpace(stderr.String())))
			}
			t.Fatalf("%s: helper: %v\n%s", tg.name, err, stderr.Bytes())
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s build writes different checkpoints: digest %s, this build %s", tg.name, got, want)
		} else {
			t.Logf("%s build: digest %s, as this build", tg.name, got)
		}
	}
}

// skipOrFail skips the test, unless TARFA_TEST_DISALLOW_SKIP is set, which
// turns the skip into a failure.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("TARFA_TEST_DISALLOW_SKIP") != "" {
		t.Fatalf("%s, and TARFA_TEST_DISALLOW_SKIP is set", why)
	}
	t.Skip(why)
}
