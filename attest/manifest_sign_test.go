package attest

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignAndVerifyManifest(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SignManifest(dir, "dev-a", priv); err != nil {
		t.Fatal(err)
	}
	res, err := VerifyManifest(dir, "dev-a", []ed25519.PublicKey{pub}, VerifyManifestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModelManifest == nil || res.ModelManifest.Root.Hex() == "" || len(res.Unsafe) != 0 {
		t.Errorf("result %+v", res)
	}
	otherPub, _, _ := GenerateKey()
	if _, err := VerifyManifest(dir, "dev-a", []ed25519.PublicKey{otherPub}, VerifyManifestOptions{}); !errors.Is(err, ErrVerification) {
		t.Errorf("wrong key: %v", err)
	}
	if _, err := VerifyManifest(dir, "dev-b", []ed25519.PublicKey{pub}, VerifyManifestOptions{}); !errors.Is(err, ErrVerification) {
		t.Errorf("wrong name: %v", err)
	}

	tamper := func(name string, f func(b []byte) []byte) {
		t.Helper()
		p := filepath.Join(dir, name)
		orig, _ := os.ReadFile(p)
		os.WriteFile(p, f(append([]byte(nil), orig...)), 0o644)
		if _, err := VerifyManifest(dir, "dev-a", []ed25519.PublicKey{pub}, VerifyManifestOptions{}); err == nil {
			t.Errorf("tampered %s verified", name)
		}
		os.WriteFile(p, orig, 0o644)
		if _, err := VerifyManifest(dir, "dev-a", []ed25519.PublicKey{pub}, VerifyManifestOptions{}); err != nil {
			t.Fatalf("restored %s: %v", name, err)
		}
	}
	// A byte of the manifest (inside a digest; the roots no longer match the entries).
	tamper("manifest.json", func(b []byte) []byte {
		i := strings.Index(string(b), `"sha256": "`) + 12
		b[i] ^= 0x01
		return b
	})
	// Whitespace only: same entries and root, but not the signed manifest bytes.
	tamper("manifest.json", func(b []byte) []byte { return append(b, ' ') })
	// A byte of the envelope's signature.
	tamper("manifest.sig.json", func(b []byte) []byte {
		i := strings.Index(string(b), `"sig": "`) + 9
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return b
	})
	// A byte of a record table (the files no longer hash to the signed root).
	tamper("layer-00001.jnf", func(b []byte) []byte { b[100] ^= 0x01; return b })
	// A byte of an expert record: caught by the data check, missed only when it is skipped on purpose.
	tamper("layer-00002.jnf", func(b []byte) []byte { b[len(b)-100] ^= 0x01; return b })
	p := filepath.Join(dir, "layer-00002.jnf")
	orig, _ := os.ReadFile(p)
	b := append([]byte(nil), orig...)
	b[len(b)-100] ^= 0x01
	os.WriteFile(p, b, 0o644)
	res, err = VerifyManifest(dir, "dev-a", []ed25519.PublicKey{pub}, VerifyManifestOptions{UnsafeSkipData: true})
	if err != nil || len(res.Unsafe) != 1 || res.Unsafe[0] != "skip-data" {
		t.Errorf("skip-data: %v %+v", err, res)
	}
	os.WriteFile(p, orig, 0o644)
}
