package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

const (
	// StatementTypeV1 is the _type of an in-toto Statement v1.
	StatementTypeV1 = "https://in-toto.io/Statement/v1"

	// PredicateModelManifest is the predicateType of Tarfa's model-signing
	// predicate, ModelManifestPredicate.
	PredicateModelManifest = "https://tarfa.dev/attestation/model-manifest/v1"

	// PredicateOMSSignatureV1 is the predicateType of the OpenSSF Model
	// Signing (sigstore/model-transparency) v1.0 payload, OMSPredicate.
	PredicateOMSSignatureV1 = "https://model_signing/signature/v1.0"

	// FormatJNFv1 is ModelManifestPredicate.Format for JNF version 1 models.
	FormatJNFv1 = "jnf/v1"

	// SerializationJNFMerkle is the serialization method of
	// ModelManifestPredicate: the model is identified by the RFC 6962 SHA-256
	// Merkle root of its JNF manifest (see package verify).
	SerializationJNFMerkle = "tarfa-jnf-merkle"

	// SerializationOMSFiles is the OMS v1.0 "files" serialization method:
	// one resource per file, digest = SHA-256 of the whole file.
	SerializationOMSFiles = "files"

	// HashSHA256 is the only hash_type / resource algorithm Tarfa writes.
	HashSHA256 = "sha256"
)

// Statement is an in-toto Statement v1
// (https://github.com/in-toto/attestation, spec/v1) as a plain struct. The
// signed bytes are exactly what json.Marshal produces for it (see
// SignStatement); a verifier parses the verified bytes and never
// re-serialises them.
type Statement struct {
	Type          string          `json:"_type"` // StatementTypeV1
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"` // a JSON object
}

// Subject is an in-toto ResourceDescriptor as used for statement subjects:
// a name and a set of digests of the same artifact.
type Subject struct {
	Name   string    `json:"name"`
	Digest DigestSet `json:"digest"`
}

// DigestSet is the in-toto DigestSet: algorithm name → lower-case hex digest.
// It stays a map on the wire because in-toto allows algorithms Tarfa does
// not know (which verifiers ignore); Get parses the ones Tarfa uses into a
// jnf.Digest.
type DigestSet map[string]string

// NewDigestSet builds a DigestSet from parsed digests.
func NewDigestSet(ds ...jnf.Digest) DigestSet {
	s := make(DigestSet, len(ds))
	for _, d := range ds {
		s[string(d.Alg)] = d.Hex()
	}
	return s
}

// Get returns the digest recorded for alg, parsed and validated.
func (s DigestSet) Get(alg jnf.Alg) (jnf.Digest, error) {
	hx, ok := s[string(alg)]
	if !ok {
		return jnf.Digest{}, fmt.Errorf("no %s digest (have %s)", alg, s.algs())
	}
	return jnf.ParseHex(alg, hx)
}

func (s DigestSet) algs() string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	slices.Sort(names)
	return "[" + strings.Join(names, " ") + "]"
}

// Validate checks the parts of in-toto Statement v1 that Tarfa relies on:
// _type, at least one subject, every subject with at least one non-empty
// digest, a predicateType, and a predicate that is a JSON object. Errors
// match ErrStatement.
func (s Statement) Validate() error {
	if s.Type != StatementTypeV1 {
		return fmt.Errorf("%w: _type %q, want %q", ErrStatement, s.Type, StatementTypeV1)
	}
	if len(s.Subject) == 0 {
		return fmt.Errorf("%w: no subject", ErrStatement)
	}
	for i, sub := range s.Subject {
		if len(sub.Digest) == 0 {
			return fmt.Errorf("%w: subject %d (%q) has no digest", ErrStatement, i, sub.Name)
		}
		for alg, hx := range sub.Digest {
			if alg == "" || hx == "" {
				return fmt.Errorf("%w: subject %d (%q) has an empty digest entry %q: %q", ErrStatement, i, sub.Name, alg, hx)
			}
		}
	}
	if s.PredicateType == "" {
		return fmt.Errorf("%w: empty predicateType", ErrStatement)
	}
	p := bytes.TrimLeft(s.Predicate, " \t\r\n")
	if len(p) == 0 || p[0] != '{' || !json.Valid(s.Predicate) {
		return fmt.Errorf("%w: predicate is not a JSON object", ErrStatement)
	}
	return nil
}

// ParseStatement decodes an in-toto Statement from the (verified) payload
// bytes: strict JSON (see jnf.DecodeJSONExtensible), then Validate.
func ParseStatement(payload []byte) (Statement, error) {
	var s Statement
	if err := jnf.DecodeJSONExtensible(payload, &s); err != nil {
		return Statement{}, fmt.Errorf("%w: statement JSON: %v", ErrEncoding, err)
	}
	if err := s.Validate(); err != nil {
		return Statement{}, err
	}
	return s, nil
}

// Resource is one entry of an OMS-style resources list: a file of the model
// directory by its slash-separated path relative to the model root, the hash
// algorithm, and the lower-case hex digest (not "alg:hex": this is the OMS
// v1.0 shape).
type Resource struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Digest    string `json:"digest"`
}

// NewResource builds a Resource from a parsed digest.
func NewResource(name string, d jnf.Digest) Resource {
	return Resource{Name: name, Algorithm: string(d.Alg), Digest: d.Hex()}
}

// ParseDigest returns the resource digest, parsed and validated.
func (r Resource) ParseDigest() (jnf.Digest, error) {
	return jnf.ParseHex(jnf.Alg(r.Algorithm), r.Digest)
}

// omsLess orders resource names the way OMS does: model-transparency sorts
// its items by pathlib.PurePosixPath, which compares the lists of path
// components, so "a/b" sorts before "a-b" (byte order would say otherwise).
func omsLess(a, b string) bool {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/")) < 0
}

// SortResources sorts rs in place into the canonical (OMS) order.
func SortResources(rs []Resource) {
	slices.SortFunc(rs, func(a, b Resource) int {
		return slices.Compare(strings.Split(a.Name, "/"), strings.Split(b.Name, "/"))
	})
}

// validateResources checks that rs is non-empty, in canonical order without
// duplicates, that every name is a clean relative slash path, and that every
// digest is a SHA-256.
func validateResources(rs []Resource) error {
	if len(rs) == 0 {
		return fmt.Errorf("no resources")
	}
	for i, r := range rs {
		if r.Name == "" || r.Name == "." || path.Clean(r.Name) != r.Name || strings.HasPrefix(r.Name, "/") ||
			r.Name == ".." || strings.HasPrefix(r.Name, "../") || strings.Contains(r.Name, "\\") {
			return fmt.Errorf("resource %d: name %q is not a clean relative slash-separated path", i, r.Name)
		}
		if r.Algorithm != HashSHA256 {
			return fmt.Errorf("resource %q: algorithm %q, want %q", r.Name, r.Algorithm, HashSHA256)
		}
		if _, err := r.ParseDigest(); err != nil {
			return fmt.Errorf("resource %q: %v", r.Name, err)
		}
		if i > 0 && !omsLess(rs[i-1].Name, r.Name) {
			return fmt.Errorf("resources %q and %q are duplicated or out of order (want sorted by path components)", rs[i-1].Name, r.Name)
		}
	}
	return nil
}

// Serialization records how the model was reduced to the signed digests.
type Serialization struct {
	Method   string `json:"method"`    // SerializationJNFMerkle
	HashType string `json:"hash_type"` // HashSHA256
}

// ModelManifestPredicate is the predicate of PredicateModelManifest: the
// signer states that the model named by the subject is the converted model
// whose JNF manifest has Merkle root Root. The statement's only subject is
// {name: <model name>, digest: {"sha256": <Root hex>}}.
//
// Digests are jnf.Digest and appear in JSON as "sha256:<64 hex>".
type ModelManifestPredicate struct {
	// Root is the RFC 6962 SHA-256 Merkle root over the manifest entries, as
	// the JNF manifest defines it; it identifies the model.
	Root jnf.Digest `json:"root"`
	// WeightsRoot is the Merkle root over the weight entries only, as the
	// JNF manifest defines it.
	WeightsRoot jnf.Digest `json:"weights_root"`
	// ManifestSHA256 is the SHA-256 of the manifest file's bytes.
	ManifestSHA256 jnf.Digest `json:"manifest_sha256"`
	// Format is FormatJNFv1.
	Format string `json:"format"`
	// Serialization is {SerializationJNFMerkle, HashSHA256}.
	Serialization Serialization `json:"serialization"`
	// Resources lists the files of the converted model directory with their
	// SHA-256, in the OMS v1.0 resource shape and order, so tools that know
	// OMS can check files one by one.
	Resources []Resource `json:"resources"`
}

// Validate checks that the predicate is complete and well formed. Errors
// match ErrPredicate.
func (p ModelManifestPredicate) Validate() error {
	for _, d := range []struct {
		field string
		d     jnf.Digest
	}{{"root", p.Root}, {"weights_root", p.WeightsRoot}, {"manifest_sha256", p.ManifestSHA256}} {
		if d.d.Alg != jnf.SHA256 {
			return fmt.Errorf("%w: %s: algorithm %q, want sha256", ErrPredicate, d.field, d.d.Alg)
		}
	}
	if p.Format != FormatJNFv1 {
		return fmt.Errorf("%w: format %q, want %q", ErrPredicate, p.Format, FormatJNFv1)
	}
	if want := (Serialization{SerializationJNFMerkle, HashSHA256}); p.Serialization != want {
		return fmt.Errorf("%w: serialization %+v, want %+v", ErrPredicate, p.Serialization, want)
	}
	if err := validateResources(p.Resources); err != nil {
		return fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	return nil
}

// NewModelManifestStatement builds the statement that signs a model: subject
// {name, sha256: p.Root}, PredicateModelManifest, predicate p. An empty
// Format or Serialization is filled in with FormatJNFv1 and
// {SerializationJNFMerkle, HashSHA256}; p.Resources is copied and sorted.
func NewModelManifestStatement(name string, p ModelManifestPredicate) (Statement, error) {
	if name == "" {
		return Statement{}, fmt.Errorf("empty model name")
	}
	if p.Format == "" {
		p.Format = FormatJNFv1
	}
	if p.Serialization == (Serialization{}) {
		p.Serialization = Serialization{SerializationJNFMerkle, HashSHA256}
	}
	p.Resources = slices.Clone(p.Resources)
	SortResources(p.Resources)
	if err := p.Validate(); err != nil {
		return Statement{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return Statement{}, err
	}
	return Statement{
		Type:          StatementTypeV1,
		Subject:       []Subject{{Name: name, Digest: NewDigestSet(p.Root)}},
		PredicateType: PredicateModelManifest,
		Predicate:     raw,
	}, nil
}

// ModelManifest decodes and checks the predicate of a PredicateModelManifest
// statement: strict JSON, Validate, exactly one subject, and the subject's
// sha256 equal to the predicate's root. Errors match ErrPredicateType or
// ErrPredicate.
func (s Statement) ModelManifest() (ModelManifestPredicate, error) {
	if s.PredicateType != PredicateModelManifest {
		return ModelManifestPredicate{}, fmt.Errorf("%w: got %q, want %q", ErrPredicateType, s.PredicateType, PredicateModelManifest)
	}
	var p ModelManifestPredicate
	if err := jnf.DecodeJSONExtensible(s.Predicate, &p); err != nil {
		return ModelManifestPredicate{}, fmt.Errorf("%w: %s predicate: %v", ErrPredicate, PredicateModelManifest, err)
	}
	if err := p.Validate(); err != nil {
		return ModelManifestPredicate{}, err
	}
	if len(s.Subject) != 1 {
		return ModelManifestPredicate{}, fmt.Errorf("%w: %d subjects, want 1 (the model)", ErrPredicate, len(s.Subject))
	}
	d, err := s.Subject[0].Digest.Get(jnf.SHA256)
	if err != nil {
		return ModelManifestPredicate{}, fmt.Errorf("%w: subject %q: %v", ErrPredicate, s.Subject[0].Name, err)
	}
	if !d.Equal(p.Root) {
		return ModelManifestPredicate{}, fmt.Errorf("%w: subject digest %s differs from predicate root %s", ErrPredicate, d, p.Root)
	}
	return p, nil
}

// OMSSerialization is the serialization object of the OMS v1.0 "files"
// method, as model-transparency writes it.
type OMSSerialization struct {
	Method        string   `json:"method"`    // SerializationOMSFiles
	HashType      string   `json:"hash_type"` // HashSHA256
	AllowSymlinks bool     `json:"allow_symlinks"`
	IgnorePaths   []string `json:"ignore_paths,omitempty"`
}

// OMSPredicate is the predicate of PredicateOMSSignatureV1 (OpenSSF Model
// Signing v1.0) for the "files" serialization. Its statement's only subject
// is {name: <model name>, digest: {"sha256": OMSSubjectDigest(Resources)}}.
type OMSPredicate struct {
	Serialization OMSSerialization `json:"serialization"`
	Resources     []Resource       `json:"resources"`
}

// OMSSubjectDigest is the OMS v1.0 subject digest: SHA-256 over the
// concatenation of the raw (32-byte) resource digests in list order. The
// resources must be valid and in canonical order.
func OMSSubjectDigest(rs []Resource) (jnf.Digest, error) {
	if err := validateResources(rs); err != nil {
		return jnf.Digest{}, err
	}
	h := sha256.New()
	for _, r := range rs {
		d, _ := r.ParseDigest() // validated above
		h.Write(d.Sum[:])
	}
	out := jnf.Digest{Alg: jnf.SHA256}
	h.Sum(out.Sum[:0])
	return out, nil
}

// NewOMSStatement builds an OMS v1.0 statement for a model whose files are
// resources (copied and sorted into the OMS order): subject {modelName,
// sha256: OMSSubjectDigest}, serialization {"files", "sha256",
// allow_symlinks false, ignorePaths}. See attest/OMS.md for what an OMS
// verifier will and will not accept.
func NewOMSStatement(modelName string, resources []Resource, ignorePaths []string) (Statement, error) {
	if modelName == "" {
		return Statement{}, fmt.Errorf("empty model name")
	}
	rs := slices.Clone(resources)
	SortResources(rs)
	root, err := OMSSubjectDigest(rs)
	if err != nil {
		return Statement{}, fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	p := OMSPredicate{
		Serialization: OMSSerialization{Method: SerializationOMSFiles, HashType: HashSHA256, IgnorePaths: slices.Clone(ignorePaths)},
		Resources:     rs,
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return Statement{}, err
	}
	return Statement{
		Type:          StatementTypeV1,
		Subject:       []Subject{{Name: modelName, Digest: NewDigestSet(root)}},
		PredicateType: PredicateOMSSignatureV1,
		Predicate:     raw,
	}, nil
}

// OMSModel decodes and checks the predicate of a PredicateOMSSignatureV1
// statement the way model-transparency's verifier does: exactly one subject,
// whose sha256 must equal OMSSubjectDigest of the resources. Only the
// "files" method with sha256 is accepted. Errors match ErrPredicateType or
// ErrPredicate.
func (s Statement) OMSModel() (OMSPredicate, error) {
	if s.PredicateType != PredicateOMSSignatureV1 {
		return OMSPredicate{}, fmt.Errorf("%w: got %q, want %q", ErrPredicateType, s.PredicateType, PredicateOMSSignatureV1)
	}
	var p OMSPredicate
	if err := jnf.DecodeJSONExtensible(s.Predicate, &p); err != nil {
		return OMSPredicate{}, fmt.Errorf("%w: %s predicate: %v", ErrPredicate, PredicateOMSSignatureV1, err)
	}
	if p.Serialization.Method != SerializationOMSFiles || p.Serialization.HashType != HashSHA256 {
		return OMSPredicate{}, fmt.Errorf("%w: serialization method %q hash_type %q, want %q %q",
			ErrPredicate, p.Serialization.Method, p.Serialization.HashType, SerializationOMSFiles, HashSHA256)
	}
	root, err := OMSSubjectDigest(p.Resources)
	if err != nil {
		return OMSPredicate{}, fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	if len(s.Subject) != 1 {
		return OMSPredicate{}, fmt.Errorf("%w: %d subjects, want 1 (the model)", ErrPredicate, len(s.Subject))
	}
	d, err := s.Subject[0].Digest.Get(jnf.SHA256)
	if err != nil {
		return OMSPredicate{}, fmt.Errorf("%w: subject %q: %v", ErrPredicate, s.Subject[0].Name, err)
	}
	if !d.Equal(root) {
		return OMSPredicate{}, fmt.Errorf("%w: subject digest %s, but the resources hash to %s", ErrPredicate, d, root)
	}
	return p, nil
}
