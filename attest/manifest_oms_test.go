package attest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/verify"
)

// copyDir copies a model directory (regular files, one level of
// subdirectories is enough for a JNF directory) into a new temporary one.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// referenceScope is an independent reading of what model-transparency's
// `verify key` hashes in dir (Path.glob("**/*"), files only, hidden ones
// included, minus the ignored paths and the signature file): the map of
// slash paths to hex SHA-256.
func referenceScope(t *testing.T, dir string, ignore []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		for _, ig := range append(slices.Clone(ignore), "model.sig") {
			if rel == ig || strings.HasPrefix(rel, ig+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(s[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSignAndVerifyManifestOMS(t *testing.T) {
	signed := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	priv, err := GenerateECDSAKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := &priv.PublicKey
	// A .git directory and a lock file are outside the scope; a DSSE
	// signature may sit beside the OMS one.
	os.MkdirAll(filepath.Join(signed, ".git"), 0o755)
	os.WriteFile(filepath.Join(signed, ".git", "HEAD"), []byte("ref: x\n"), 0o644)
	edPub, edPriv, _ := GenerateKey()
	if _, err := SignManifest(signed, "dev-a", edPriv); err != nil {
		t.Fatal(err)
	}
	if _, err := SignManifestOMS(context.Background(), signed, "dev-a", priv, nil); err != nil {
		t.Fatal(err)
	}
	res, err := VerifyManifestOMS(signed, "", []*ecdsa.PublicKey{pub}, VerifyManifestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OMS == nil || res.MatchedSubject.Name != "dev-a" || len(res.Unsafe) != 0 {
		t.Fatalf("result %+v", res)
	}

	// What a reference verifier hashes is exactly what was signed: every
	// file of the directory but the recorded ignore paths and model.sig.
	ref := referenceScope(t, signed, res.OMS.Serialization.IgnorePaths)
	got := map[string]string{}
	for _, r := range res.OMS.Resources {
		got[r.Name] = r.Digest
	}
	if len(ref) != len(got) {
		t.Errorf("signed %d files, the reference rules see %d", len(got), len(ref))
	}
	for n, d := range ref {
		if got[n] != d {
			t.Errorf("%s: signed %q, file sha256 %s", n, got[n], d)
		}
	}
	for _, n := range []string{"manifest.json", "config.json", "global.jnf", "layer-00000.jnf"} {
		if _, ok := got[n]; !ok {
			t.Errorf("%s is not signed", n)
		}
	}
	for _, n := range []string{".git/HEAD", "manifest.sig.json", "model.sig"} {
		if _, ok := got[n]; ok {
			t.Errorf("%s is signed, but should be outside the scope", n)
		}
	}
	// Both forms are found, and the DSSE one still verifies.
	sigs, err := FindManifestSignatures(signed)
	if err != nil || len(sigs) != 2 || sigs[0].Form != FormDSSE || sigs[1].Form != FormOMS {
		t.Fatalf("FindManifestSignatures: %+v %v", sigs, err)
	}
	if _, err := VerifyManifest(signed, "dev-a", []ed25519.PublicKey{edPub}, VerifyManifestOptions{}); err != nil {
		t.Errorf("DSSE beside OMS: %v", err)
	}
	// Offline: the manifest bytes against the signature.
	man, _ := os.ReadFile(filepath.Join(signed, "manifest.json"))
	if _, err := VerifyManifestBytesAny(man, sigs[1].Data, "", []crypto.PublicKey{pub}); err != nil {
		t.Errorf("offline OMS: %v", err)
	}
	if _, err := VerifyManifestBytesAny(man, sigs[1].Data, "", []crypto.PublicKey{edPub}); err == nil || errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "ECDSA") {
		t.Errorf("offline OMS with an Ed25519 key: %v, want a usage error asking for an ECDSA key", err)
	}
	if _, err := VerifyManifestBytesAny(man, sigs[0].Data, "", []crypto.PublicKey{edPub}); err != nil {
		t.Errorf("offline DSSE: %v", err)
	}

	fails := func(what string, mutate func(dir string), wantIn string) {
		t.Helper()
		dir := copyDir(t, signed)
		mutate(dir)
		_, err := VerifyManifestOMS(dir, "", []*ecdsa.PublicKey{pub}, VerifyManifestOptions{})
		if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), wantIn) {
			t.Errorf("%s: %v, want a verification error naming %q", what, err, wantIn)
		}
	}
	flip := func(name string, off int64) func(string) {
		return func(dir string) {
			p := filepath.Join(dir, name)
			b, _ := os.ReadFile(p)
			if off < 0 {
				off = int64(len(b)) + off
			}
			b[off] ^= 0x01
			os.WriteFile(p, b, 0o644)
		}
	}
	fails("flipped record byte", flip("layer-00000.jnf", -1), "layer-00000.jnf: sha256")
	fails("flipped config byte", flip("config.json", 3), "config.json: sha256")
	fails("flipped manifest byte", flip("manifest.json", 20), "manifest.json: sha256")
	fails("extra file", func(dir string) { os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644) }, "notes.txt: in the directory but not in the signature")
	fails("extra hidden file in a subdirectory", func(dir string) {
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
		os.WriteFile(filepath.Join(dir, "sub", ".x"), nil, 0o644)
	}, "sub/.x: in the directory")
	fails("missing file", func(dir string) { os.Remove(filepath.Join(dir, "layer-00001.jnf")) }, "layer-00001.jnf: signed but missing")
	fails("symbolic link", func(dir string) { os.Symlink("config.json", filepath.Join(dir, "link.json")) }, "symbolic link")
	fails("signature byte flipped", func(dir string) {
		p := filepath.Join(dir, "model.sig")
		b, _ := os.ReadFile(p)
		i := strings.Index(string(b), `"sig": "`) + len(`"sig": "`) + 10
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		os.WriteFile(p, b, 0o644)
	}, "bad signature")

	other, _ := GenerateECDSAKey()
	if _, err := VerifyManifestOMS(signed, "", []*ecdsa.PublicKey{&other.PublicKey}, VerifyManifestOptions{}); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("wrong key: %v", err)
	}
	if _, err := VerifyManifestOMS(signed, "dev-b", []*ecdsa.PublicKey{pub}, VerifyManifestOptions{}); !errors.Is(err, ErrSubject) {
		t.Errorf("wrong name: %v", err)
	}
	// A lock file left behind (tarfa crashed while writing) is ignored.
	ok := copyDir(t, signed)
	os.WriteFile(filepath.Join(ok, ".tarfa.lock"), []byte("123\n"), 0o644)
	if _, err := VerifyManifestOMS(ok, "", []*ecdsa.PublicKey{pub}, VerifyManifestOptions{UnsafeSkipData: true}); err != nil {
		t.Errorf("stale lock file: %v", err)
	}
}

// TestOMSSignatureFileForm checks that each signature file must hold its
// own form, with an error that says which file holds what.
func TestOMSSignatureFileForm(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	priv, _ := GenerateECDSAKey()
	if _, err := SignManifestOMS(context.Background(), dir, "m", priv, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, verify.OMSSignatureFile), filepath.Join(dir, verify.SignatureFile)); err != nil {
		t.Fatal(err)
	}
	_, err := FindManifestSignatures(dir)
	if !errors.Is(err, ErrEncoding) || !strings.Contains(err.Error(), "model.sig holds OMS") {
		t.Errorf("OMS bundle in manifest.sig.json: %v", err)
	}
}

// signOMSResources signs dir's model.sig over a hand-made statement: the
// given resources and serialization (a signer other than Tarfa's).
func signOMSResources(t *testing.T, dir string, priv *ecdsa.PrivateKey, rs []Resource, ser OMSSerialization) {
	t.Helper()
	root, err := OMSSubjectDigest(rs)
	if err != nil {
		t.Fatal(err)
	}
	pred, _ := json.Marshal(OMSPredicate{Serialization: ser, Resources: rs})
	st := Statement{Type: StatementTypeV1, Subject: []Subject{{Name: "m", Digest: NewDigestSet(root)}}, PredicateType: PredicateOMSSignatureV1, Predicate: pred}
	payload, _ := json.Marshal(st)
	b, err := SignBundle(priv, payload)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(b)
	if err := os.WriteFile(filepath.Join(dir, verify.OMSSignatureFile), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A valid OMS signature that leaves a file of the model out (through its
// ignore_paths) verifies under the OMS rules alone, but does not sign the
// model: Tarfa refuses it. So does one that allows symbolic links, and an
// offline check against other manifest bytes.
func TestVerifyManifestOMSCoversModel(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	priv, _ := GenerateECDSAKey()
	keys := []*ecdsa.PublicKey{&priv.PublicKey}
	ignore := append(slices.Clone(OMSIgnorePaths), "layer-00003.jnf")
	names, err := verify.OMSFiles(dir, ignore)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := verify.HashOMSFiles(context.Background(), dir, names, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rs []Resource
	for _, d := range ds {
		rs = append(rs, NewResource(d.Name, d.SHA256))
	}
	signOMSResources(t, dir, priv, rs, OMSSerialization{Method: "files", HashType: "sha256", IgnorePaths: ignore})
	_, err = VerifyManifestOMS(dir, "", keys, VerifyManifestOptions{})
	if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "does not list layer-00003.jnf") {
		t.Errorf("layer file outside the signature: %v", err)
	}
	man, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	sig, _ := os.ReadFile(filepath.Join(dir, verify.OMSSignatureFile))
	if _, err := VerifyManifestBytesOMS(man, sig, "", keys); !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "does not list layer-00003.jnf") {
		t.Errorf("offline, layer file outside the signature: %v", err)
	}

	if _, err := SignManifestOMS(context.Background(), dir, "m", priv, nil); err != nil {
		t.Fatal(err)
	}
	sig, _ = os.ReadFile(filepath.Join(dir, verify.OMSSignatureFile))
	if _, err := VerifyManifestBytesOMS(man, sig, "", keys); err != nil {
		t.Fatal(err)
	}
	other := convertFixture(t, "qwen35moe-dev-c/checkpoint")
	otherMan, _ := os.ReadFile(filepath.Join(other, "manifest.json"))
	if _, err := VerifyManifestBytesOMS(otherMan, sig, "", keys); !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "manifest.json with sha256") {
		t.Errorf("offline, another manifest: %v", err)
	}

	res, err := VerifyManifestOMS(dir, "", keys, VerifyManifestOptions{UnsafeSkipData: true})
	if err != nil {
		t.Fatal(err)
	}
	ser := res.OMS.Serialization
	ser.AllowSymlinks = true
	signOMSResources(t, dir, priv, res.OMS.Resources, ser)
	if _, err := VerifyManifestOMS(dir, "", keys, VerifyManifestOptions{}); !errors.Is(err, ErrPredicate) || !strings.Contains(err.Error(), "allow_symlinks") {
		t.Errorf("allow_symlinks true: %v", err)
	}
}
