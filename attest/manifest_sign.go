package attest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

// manifestStatement builds the statement signing DIR's manifest under name.
func manifestStatement(dir, name string) (Statement, *verify.Manifest, []byte, error) {
	m, raw, err := verify.LoadManifest(dir)
	if err != nil {
		return Statement{}, nil, nil, err
	}
	root, err := jnf.ParseHex(jnf.SHA256, m.Root)
	if err != nil {
		return Statement{}, nil, nil, err
	}
	weights, err := jnf.ParseHex(jnf.SHA256, m.WeightsRoot)
	if err != nil {
		return Statement{}, nil, nil, err
	}
	p := ModelManifestPredicate{Root: root, WeightsRoot: weights, ManifestSHA256: jnf.SHA256Bytes(raw)}
	for _, e := range m.Entries {
		d, err := jnf.ParseHex(jnf.SHA256, e.SHA256)
		if err != nil {
			return Statement{}, nil, nil, err
		}
		p.Resources = append(p.Resources, NewResource(e.Name, d))
	}
	st, err := NewModelManifestStatement(name, p)
	return st, m, raw, err
}

// SignManifest signs the manifest of DIR under the model name and writes the
// DSSE envelope to DIR/manifest.sig.json atomically. The manifest must match
// the files (verify.Build re-derives it) — a signer never signs a root it has
// not checked against the record tables.
func SignManifest(dir, name string, priv ed25519.PrivateKey) (Envelope, error) {
	st, m, _, err := manifestStatement(dir, name)
	if err != nil {
		return Envelope{}, err
	}
	built, err := verify.Build(dir)
	if err != nil {
		return Envelope{}, err
	}
	if built.Root != m.Root {
		return Envelope{}, fmt.Errorf("%s: the files hash to root %s, the manifest says %s: run `tarfa verify` before signing", dir, built.Root, m.Root)
	}
	env, err := SignStatement(priv, st)
	if err != nil {
		return Envelope{}, err
	}
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return Envelope{}, err
	}
	return env, jnf.WriteFileAtomic(filepath.Join(dir, verify.SignatureFile), append(b, '\n'), 0o644)
}

// VerifyManifest checks DIR/manifest.sig.json: a DSSE envelope signed by one
// of the trusted keys over a model-manifest statement named name whose
// subject digest is the manifest root, whose predicate matches the manifest
// bytes exactly, and whose root the files still hash to: the record tables
// and auxiliary files always, and every record's data and padding unless
// opt.UnsafeSkipData (then a changed expert byte goes unnoticed).
func VerifyManifest(dir, name string, trusted []ed25519.PublicKey, opt VerifyManifestOptions) (*Result, error) {
	b, err := jnf.ReadFileLimit(filepath.Join(dir, verify.SignatureFile), jnf.MaxEnvelopeSize, verify.SignatureFile)
	if err != nil {
		return nil, err
	}
	env, err := ParseEnvelope(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verify.SignatureFile, err)
	}
	if opt.Context == nil {
		opt.Context = context.Background()
	}
	want, m, raw, err := manifestStatement(dir, name)
	if err != nil {
		return nil, err
	}
	root, _ := m.RootDigest()
	res, err := Verify(env, Policy{TrustedKeys: trusted, PredicateType: PredicateModelManifest,
		Subject: &SubjectMatcher{Name: name, Digest: root}})
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(res.Statement.Predicate, want.Predicate) {
		got, _ := res.Statement.ModelManifest()
		return nil, fmt.Errorf("%w: the signed predicate does not describe this manifest (signed manifest_sha256 %s, manifest.json has %s)",
			ErrVerification, got.ManifestSHA256, jnf.SHA256Bytes(raw))
	}
	if err := filesMatchManifest(dir, m, res, opt); err != nil {
		return nil, err
	}
	return res, nil
}

// SignedManifestNames returns the model names DIR/manifest.sig.json signs,
// once its envelope verifies with one of keys (the statement's subjects; the
// rest is VerifyManifest's to check). A model without the file is an error
// saying how to sign it.
func SignedManifestNames(dir string, keys []ed25519.PublicKey) ([]string, error) {
	path := filepath.Join(dir, verify.SignatureFile)
	b, err := jnf.ReadFileLimit(path, jnf.MaxEnvelopeSize, verify.SignatureFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is not signed (no %s): sign it with tarfa manifest sign %s --key KEY", dir, verify.SignatureFile, dir)
	}
	if err != nil {
		return nil, err
	}
	env, err := ParseEnvelope(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	payload, _, err := VerifyEnvelope(env, PayloadTypeInToto, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st, err := ParseStatement(payload)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, s := range st.Subject {
		names = append(names, s.Name)
	}
	return names, nil
}

// filesMatchManifest checks DIR's files against its (signed) manifest m:
// the record tables and auxiliary files always, and every record's data and
// padding unless opt.UnsafeSkipData, which it records in res.Unsafe.
func filesMatchManifest(dir string, m *verify.Manifest, res *Result, opt VerifyManifestOptions) error {
	if opt.UnsafeSkipData {
		built, err := verify.Build(dir)
		if err != nil {
			return err
		}
		if built.Root != m.Root {
			return fmt.Errorf("%w: the files hash to root %s, the signed manifest says %s", ErrVerification, built.Root, m.Root)
		}
		res.Unsafe = append(res.Unsafe, "skip-data")
		return nil
	}
	rep, err := verify.Check(opt.Context, dir, verify.CheckOptions{OnRecord: opt.OnRecord})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("%w: the files do not match the signed manifest: %d problem(s), first: %v", ErrVerification, len(rep.Problems), rep.Problems[0])
	}
	return nil
}

// VerifyManifestOptions controls VerifyManifest.
type VerifyManifestOptions struct {
	Context context.Context // for cancelling the data check (nil = Background)
	// UnsafeSkipData checks the signature, the manifest and the record
	// tables but does not re-hash record data.
	UnsafeSkipData bool
	// OnRecord reports progress of the data check.
	OnRecord func(file string, r *jnf.Record)
	// OnFile reports progress of the OMS form's whole-file hashing.
	OnFile func(name string, size int64)
}

// VerifyManifestBytes checks a model's signature (the bytes of
// manifest.sig.json) against its manifest alone (the bytes of
// manifest.json, which ParseManifest checks against itself), without the
// model's files: signed by one of trusted, naming the model name (any name
// if name is empty: the signed name is returned in the result), with the
// manifest's root as subject and a predicate that describes exactly these
// manifest bytes. An auditor holding a report, the manifest and its
// signature checks the model's provenance with it.
func VerifyManifestBytes(manifest, signature []byte, name string, trusted []ed25519.PublicKey) (*Result, error) {
	m, err := verify.ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	env, err := ParseEnvelope(signature)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verify.SignatureFile, err)
	}
	root, err := m.RootDigest()
	if err != nil {
		return nil, err
	}
	sm := &SubjectMatcher{Name: name, Digest: root}
	if name == "" {
		sm = &SubjectMatcher{UnsafeAnyName: true, Digest: root}
	}
	res, err := Verify(env, Policy{TrustedKeys: trusted, PredicateType: PredicateModelManifest, Subject: sm})
	if err != nil {
		return nil, err
	}
	if !res.ModelManifest.ManifestSHA256.Equal(jnf.SHA256Bytes(manifest)) {
		return nil, fmt.Errorf("%w: the signed predicate describes manifest bytes with sha256 %s, manifest.json has %s", ErrVerification, res.ModelManifest.ManifestSHA256, jnf.SHA256Bytes(manifest))
	}
	return res, nil
}
