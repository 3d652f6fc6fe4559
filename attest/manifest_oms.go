package attest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

// The two forms of a model signature in a JNF directory.
const (
	// FormDSSE is Tarfa's own: manifest.sig.json, a bare DSSE envelope
	// (Ed25519) over a PredicateModelManifest statement whose subject is
	// the manifest's Merkle root.
	FormDSSE = "dsse"
	// FormOMS is OpenSSF Model Signing v1.0: model.sig, a Sigstore bundle
	// v0.3 (ECDSA key method) over a PredicateOMSSignatureV1 statement
	// listing every file of the directory with its SHA-256.
	FormOMS = "oms"
)

// SignatureFileFor is the file a signature form lives in.
func SignatureFileFor(form string) string {
	if form == FormOMS {
		return verify.OMSSignatureFile
	}
	return verify.SignatureFile
}

// OMSIgnorePaths are the ignore_paths Tarfa's OMS signatures record, and so
// the paths of a JNF directory outside their scope: the OMS defaults, the
// signature files of both forms (each is detached metadata, so either can
// be replaced without breaking the other), and the lock file tarfa holds
// while it writes the directory.
var OMSIgnorePaths = func() []string {
	p := append(slices.Clone(verify.OMSDefaultIgnore), flock.Name, verify.SignatureFile, verify.OMSSignatureFile)
	slices.Sort(p)
	return p
}()

// DetectSignatureForm tells a DSSE envelope (FormDSSE) from an OMS bundle
// (FormOMS) by its top-level keys; anything else is an ErrEncoding error.
func DetectSignatureForm(data []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := jnf.DecodeJSONExtensible(data, &top); err != nil {
		return "", fmt.Errorf("%w: signature JSON: %v", ErrEncoding, err)
	}
	_, bundle := top["dsseEnvelope"]
	_, media := top["mediaType"]
	_, pt := top["payloadType"]
	switch {
	case bundle || media:
		return FormOMS, nil
	case pt:
		return FormDSSE, nil
	}
	return "", fmt.Errorf("%w: neither a DSSE envelope (payloadType, payload, signatures) nor a Sigstore bundle (mediaType, verificationMaterial, dsseEnvelope)", ErrEncoding)
}

// ManifestSignature is a signature file of a JNF directory.
type ManifestSignature struct {
	Form string // FormDSSE or FormOMS
	Path string
	Data []byte
}

// FindManifestSignatures reads the signature files of dir that exist
// (manifest.sig.json, model.sig), each bounded, and checks that each holds
// the form its name says. None is not an error: the list is empty.
func FindManifestSignatures(dir string) ([]ManifestSignature, error) {
	var out []ManifestSignature
	for _, form := range []string{FormDSSE, FormOMS} {
		name := SignatureFileFor(form)
		p := filepath.Join(dir, name)
		b, err := jnf.ReadFileLimit(p, jnf.MaxEnvelopeSize, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		got, err := DetectSignatureForm(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if got != form {
			return nil, fmt.Errorf("%s: %w: holds a %s signature, but %s is where the %s form lives (%s holds %s signatures)",
				p, ErrEncoding, formName(got), name, formName(form), SignatureFileFor(got), formName(got))
		}
		out = append(out, ManifestSignature{Form: form, Path: p, Data: b})
	}
	return out, nil
}

func formName(form string) string {
	if form == FormOMS {
		return "OMS v1.0 (Sigstore bundle)"
	}
	return "DSSE (Tarfa)"
}

// omsStatement builds the OMS v1.0 statement of DIR: its manifest must
// check against the record tables (as for the DSSE form), and every file in
// the OMS scope is hashed whole with SHA-256.
func omsStatement(ctx context.Context, dir, name string, onFile func(string, int64)) (Statement, error) {
	m, raw, err := verify.LoadManifest(dir)
	if err != nil {
		return Statement{}, err
	}
	built, err := verify.Build(dir)
	if err != nil {
		return Statement{}, err
	}
	if built.Root != m.Root {
		return Statement{}, fmt.Errorf("%s: the files hash to root %s, the manifest says %s: run `tarfa verify` before signing", dir, built.Root, m.Root)
	}
	names, err := verify.OMSFiles(dir, OMSIgnorePaths)
	if err != nil {
		return Statement{}, err
	}
	ds, err := verify.HashOMSFiles(ctx, dir, names, 0, onFile)
	if err != nil {
		return Statement{}, err
	}
	rs := make([]Resource, len(ds))
	for i, d := range ds {
		rs[i] = NewResource(d.Name, d.SHA256)
	}
	// The manifest hashed must be the one checked above (tarfa holds the
	// directory's lock, but another writer may ignore it).
	if err := coversManifest(rs, m, raw); err != nil {
		return Statement{}, fmt.Errorf("%s changed while it was signed: %w", dir, err)
	}
	return NewOMSStatement(name, rs, OMSIgnorePaths)
}

// coversManifest checks that the OMS resources bind the JNF model: they
// list manifest.json with the SHA-256 of these manifest bytes (so the
// Merkle root and every record's SHA-256 and BLAKE3, which Tarfa checks as
// it reads, are signed), and every file the manifest names (so the bytes
// those digests describe are signed too).
func coversManifest(rs []Resource, m *verify.Manifest, raw []byte) error {
	have := make(map[string]string, len(rs))
	for _, r := range rs {
		have[r.Name] = r.Digest
	}
	if want := jnf.SHA256Bytes(raw).Hex(); have[verify.ManifestFile] != want {
		if have[verify.ManifestFile] == "" {
			return fmt.Errorf("%w: the OMS signature does not list %s", ErrVerification, verify.ManifestFile)
		}
		return fmt.Errorf("%w: the OMS signature lists %s with sha256 %s, the manifest's bytes have %s", ErrVerification, verify.ManifestFile, have[verify.ManifestFile], want)
	}
	for _, e := range m.Entries {
		if _, ok := have[e.File]; !ok {
			return fmt.Errorf("%w: the OMS signature does not list %s, which holds %s %s of the manifest", ErrVerification, e.File, e.Kind, e.Name)
		}
	}
	return nil
}

// SignManifestOMS signs DIR in the OMS v1.0 form with an ECDSA key and
// writes the bundle to DIR/model.sig atomically: the statement lists every
// file of the directory but OMSIgnorePaths with its SHA-256 (serialization
// "files", sha256, allow_symlinks false), subject {name, SHA-256 over the
// resource digests}. As SignManifest, it first requires the manifest to
// match the record tables. onFile reports hashing progress.
func SignManifestOMS(ctx context.Context, dir, name string, priv *ecdsa.PrivateKey, onFile func(string, int64)) (Bundle, error) {
	st, err := omsStatement(ctx, dir, name, onFile)
	if err != nil {
		return Bundle{}, err
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return Bundle{}, err
	}
	if ps, err := ParseStatement(payload); err != nil {
		return Bundle{}, fmt.Errorf("statement would not verify: %w", err)
	} else if _, err := ps.OMSModel(); err != nil {
		return Bundle{}, fmt.Errorf("statement would not verify: %w", err)
	}
	b, err := SignBundle(priv, payload)
	if err != nil {
		return Bundle{}, err
	}
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return Bundle{}, err
	}
	return b, jnf.WriteFileAtomic(filepath.Join(dir, verify.OMSSignatureFile), append(out, '\n'), 0o644)
}

func omsSigned(p *OMSPredicate) []verify.FileDigest {
	out := make([]verify.FileDigest, len(p.Resources))
	for i, r := range p.Resources {
		d, _ := r.ParseDigest() // OMSModel validated them
		out[i] = verify.FileDigest{Name: r.Name, SHA256: d}
	}
	return out
}

// verifyOMSSignature parses and verifies model.sig's bytes (VerifyOMSBundle)
// and applies checkOMSPolicy.
func verifyOMSSignature(data []byte, name string, trusted []*ecdsa.PublicKey) (*Result, error) {
	bundle, err := ParseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verify.OMSSignatureFile, err)
	}
	res, err := VerifyOMSBundle(bundle, trusted)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verify.OMSSignatureFile, err)
	}
	if err := checkOMSPolicy(res, name); err != nil {
		return nil, err
	}
	return res, nil
}

// checkOMSPolicy applies what Tarfa requires of a verified OMS statement
// beyond the spec: the subject name when one is asked for (OMS itself treats
// it as informational), and no symbolic links.
func checkOMSPolicy(res *Result, name string) error {
	if name != "" && res.MatchedSubject.Name != name {
		return fmt.Errorf("%w: want name %q; the OMS statement names %q", ErrSubject, name, res.MatchedSubject.Name)
	}
	if res.OMS.Serialization.AllowSymlinks {
		return fmt.Errorf("%w: serialization.allow_symlinks is true; Tarfa follows no symbolic links in a model directory", ErrPredicate)
	}
	return nil
}

// VerifyManifestOMS checks DIR/model.sig, an OMS v1.0 signature, and the
// directory against it, following the specification's verification
// procedure (§8) with the model-transparency key verifier's rules: the
// bundle (v0.3 mediaType, ECDSA signature by one of trusted, selected by
// the key hint), the statement and predicate (the subject digest is the
// SHA-256 over the resource digests), then the files: every regular file
// under DIR that is not in ignore_paths (plus the signature file) must be
// listed, every listed file must exist, and each must hash to its SHA-256
// (verify.CheckOMS). Then it ties the signature to what Tarfa checks: the
// signed manifest.json must be the manifest, every file the manifest
// names must be signed, and the manifest must match the files (record
// tables always, record bytes and padding unless opt.UnsafeSkipData, as
// VerifyManifest). name, if not empty, must be the subject name.
func VerifyManifestOMS(dir, name string, trusted []*ecdsa.PublicKey, opt VerifyManifestOptions) (*Result, error) {
	p := filepath.Join(dir, verify.OMSSignatureFile)
	b, err := jnf.ReadFileLimit(p, jnf.MaxEnvelopeSize, verify.OMSSignatureFile)
	if err != nil {
		return nil, err
	}
	res, err := verifyOMSSignature(b, name, trusted)
	if err != nil {
		return nil, err
	}
	if opt.Context == nil {
		opt.Context = context.Background()
	}
	ignore := append(slices.Clone(res.OMS.Serialization.IgnorePaths), verify.OMSSignatureFile)
	ps, err := verify.CheckOMS(opt.Context, dir, omsSigned(res.OMS), ignore, opt.OnFile)
	if err != nil {
		return nil, err
	}
	if len(ps) > 0 {
		return nil, fmt.Errorf("%w: the files do not match the OMS signature: %d problem(s), first: %v", ErrVerification, len(ps), ps[0])
	}
	m, raw, err := verify.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := coversManifest(res.OMS.Resources, m, raw); err != nil {
		return nil, err
	}
	if err := filesMatchManifest(dir, m, res, opt); err != nil {
		return nil, err
	}
	return res, nil
}

// VerifyManifestBytesOMS is VerifyManifestBytes for an OMS v1.0 signature
// (the bytes of model.sig): signed by one of trusted, naming name (any name
// if empty), and listing manifest.json with the SHA-256 of these manifest
// bytes and every file the manifest names. The files themselves are not
// read.
func VerifyManifestBytesOMS(manifest, signature []byte, name string, trusted []*ecdsa.PublicKey) (*Result, error) {
	m, err := verify.ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	res, err := verifyOMSSignature(signature, name, trusted)
	if err != nil {
		return nil, err
	}
	if err := coversManifest(res.OMS.Resources, m, manifest); err != nil {
		return nil, err
	}
	return res, nil
}

// VerifyManifestBytesAny checks a model signature of either form against
// the manifest bytes (VerifyManifestBytes or VerifyManifestBytesOMS, by
// DetectSignatureForm), with the trusted keys of the form's type: Ed25519
// for DSSE, ECDSA for OMS. Having none of the right type is a plain error
// that says which type is needed.
func VerifyManifestBytesAny(manifest, signature []byte, name string, trusted []crypto.PublicKey) (*Result, error) {
	form, err := DetectSignatureForm(signature)
	if err != nil {
		return nil, err
	}
	ed, ec, err := SplitPublicKeys(trusted)
	if err != nil {
		return nil, err
	}
	if err := keysFor(form, ed, ec); err != nil {
		return nil, err
	}
	if form == FormOMS {
		return VerifyManifestBytesOMS(manifest, signature, name, ec)
	}
	return VerifyManifestBytes(manifest, signature, name, ed)
}

// keysFor says what is wrong when no key of the type form needs was given.
func keysFor(form string, ed []ed25519.PublicKey, ec []*ecdsa.PublicKey) error {
	switch {
	case form == FormOMS && len(ec) == 0:
		return fmt.Errorf("the signature is %s, which only an ECDSA P-256/P-384/P-521 public key verifies; the %d key(s) given are Ed25519", formName(form), len(ed))
	case form == FormDSSE && len(ed) == 0:
		return fmt.Errorf("the signature is %s, which only an Ed25519 public key verifies; the %d key(s) given are ECDSA", formName(form), len(ec))
	}
	return nil
}

// KeysFor is keysFor for callers that hold split key lists.
func KeysFor(form string, keys []crypto.PublicKey) error {
	ed, ec, err := SplitPublicKeys(keys)
	if err != nil {
		return err
	}
	return keysFor(form, ed, ec)
}
