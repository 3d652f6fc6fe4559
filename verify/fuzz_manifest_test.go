package verify_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	. "github.com/tarfa-ai/tarfa/verify"
)

func FuzzJNFManifest(f *testing.F) {
	dir := filepath.Join(f.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/qwen3moe-dev-a/checkpoint", dir, convert.Options{LastLayer: -1}); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":2,"layers":1,"layers_present":[],"entries":[]}`))
	// Hostile shapes: absurd layer counts, a shape whose size wraps, keys
	// that collide, deep nesting, trailing data.
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":2,"layers":1000000000000,"layers_present":[],"entries":[]}`))
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":2,"layers":4,"layers_present":[0],"entries":[{"kind":"tensor","name":"model.norm.weight","layer":0,"expert":-1,"dtype":"BF16","shape":[288230376151712256,64],"offset":4096,"length":65536,"sha256":"` + strings.Repeat("a", 64) + `","blake3":"` + strings.Repeat("b", 64) + `","source":[{"file":"s","offset":0,"length":65536}],"file":"layer-00000.jnf"}]}`))
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":2,"Version":1,"layers":1}`))
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":2,"ignored":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`))
	f.Add(append(append([]byte(nil), b...), ']'))
	f.Add(bytes.Replace(b, []byte(`"complete": true`), []byte(`"complete": false`), 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		// An accepted manifest's roots are those of its entries, and it re-encodes to an equal manifest.
		enc, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(enc)
		if err != nil || m2.Root != m.Root {
			t.Fatalf("re-encoded manifest: %v", err)
		}
	})
}
