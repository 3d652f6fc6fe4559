package synth

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// dirDigest is the SHA-256 of every file of dir (names and bytes, in name
// order).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && e.Name()[0] != '.' {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// The BF16 checkpoints are the bytes synth wrote before it could write
// FP8 (the digests were taken at that commit): the FP8 path changes no
// byte of a BF16 checkpoint, whatever the option that selects it says.
func TestBF16BytesUnchanged(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"q3-tiny", Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 7, Set: map[string]any{"mlp_only_layers": []int{1}}}, "fbddfc417b1356f563769d3cd5163829c9f52792ebcc2de1512f3372e9a39026"},
		{"q35-tiny", Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 1}, "26d78caeaacdc205e5d945cd1401aa06ed94ad9c5de3a20a4988e7c8de3360b0"},
		{"q35-tiny-fused-local", Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 3, Layout: hf.LayoutFused, Routing: RoutingLocal, AttnStd: 0.6}, "1115cf9daa21b05ed6f672c7a00e440693d200eb5bbd43d06a3d3fd3364ed5a4"},
	} {
		dir := filepath.Join(t.TempDir(), c.name)
		if err := Write(dir, c.o); err != nil {
			t.Fatal(err)
		}
		if got := dirDigest(t, dir); got != c.want {
			t.Errorf("%s: digest %s, want %s", c.name, got, c.want)
		}
	}
}
