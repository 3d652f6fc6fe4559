package verify_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/convert"
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
	f.Add([]byte(`{"format":"tarfa-jnf-manifest","version":1,"entries":[]}`))
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
