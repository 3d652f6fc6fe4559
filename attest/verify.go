package attest

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// ResultMediaType identifies the JSON document Verify returns, and its version.
const ResultMediaType = "application/vnd.tarfa.verificationresult+json;version=0.1"

// Policy says what a signed statement must be to verify. It is a value that
// must be filled in: an empty field is an error, never a wildcard. The only
// way to check less is a field spelled Unsafe, and the Result lists every
// unsafe choice that was in effect.
type Policy struct {
	// TrustedKeys are the Ed25519 keys whose signature is accepted. Required.
	TrustedKeys []ed25519.PublicKey
	// PredicateType the statement must have, e.g. PredicateModelManifest.
	// Required.
	PredicateType string
	// Subject the statement must name. Required unless UnsafeAnySubject.
	Subject *SubjectMatcher
	// UnsafeAnySubject accepts a statement about any artifact at all: a valid
	// signature over someone else's model passes. Contradicts Subject.
	UnsafeAnySubject bool
	// Subjects, for a statement that names one subject per item of its
	// predicate (a run report: one per prompt), checks every subject
	// against the decoded predicate in r. Contradicts Subject and
	// UnsafeAnySubject.
	Subjects func(subjects []Subject, r *Result) error
}

// SubjectMatcher selects the statement subject that must be present.
type SubjectMatcher struct {
	// Name is the expected subject name. Required unless UnsafeAnyName.
	Name string
	// Digest is the expected digest (sha256 or blake3); the subject's digest
	// set must contain this algorithm with this value. Required.
	Digest jnf.Digest
	// UnsafeAnyName matches a subject with the right digest whatever its
	// name. Contradicts Name.
	UnsafeAnyName bool
}

// Validate reports an incomplete or contradictory policy. Verify calls it.
func (p Policy) Validate() error {
	var errs []error
	if len(p.TrustedKeys) == 0 {
		errs = append(errs, errors.New("no TrustedKeys (want at least one)"))
	}
	for i, k := range p.TrustedKeys {
		if len(k) != ed25519.PublicKeySize {
			errs = append(errs, fmt.Errorf("TrustedKeys[%d]: %d bytes, want %d", i, len(k), ed25519.PublicKeySize))
		}
	}
	if p.PredicateType == "" {
		errs = append(errs, errors.New("empty PredicateType"))
	}
	switch {
	case p.Subjects != nil && (p.Subject != nil || p.UnsafeAnySubject):
		errs = append(errs, errors.New("Subjects with Subject or UnsafeAnySubject (give one way to check the subjects)"))
	case p.Subjects != nil:
	case p.Subject == nil && !p.UnsafeAnySubject:
		errs = append(errs, errors.New("no Subject (set UnsafeAnySubject to accept any subject)"))
	case p.Subject != nil && p.UnsafeAnySubject:
		errs = append(errs, errors.New("both Subject and UnsafeAnySubject are set"))
	case p.Subject != nil:
		m := p.Subject
		if m.Name == "" && !m.UnsafeAnyName {
			errs = append(errs, errors.New("empty Subject.Name (set Subject.UnsafeAnyName to accept any name)"))
		}
		if m.Name != "" && m.UnsafeAnyName {
			errs = append(errs, fmt.Errorf("both Subject.Name (%q) and Subject.UnsafeAnyName are set", m.Name))
		}
		if m.Digest.IsZero() {
			errs = append(errs, errors.New("empty Subject.Digest"))
		} else if m.Digest.Alg != jnf.SHA256 && m.Digest.Alg != jnf.BLAKE3 {
			errs = append(errs, fmt.Errorf("Subject.Digest algorithm %q, want sha256 or blake3", m.Digest.Alg))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid policy: %w", err)
	}
	return nil
}

// Result is the typed, versioned outcome of a successful Verify.
type Result struct {
	MediaType     string `json:"mediaType"`     // ResultMediaType
	KeyID         string `json:"keyid"`         // keyid of the trusted key that signed
	PayloadType   string `json:"payloadType"`   // PayloadTypeInToto
	PredicateType string `json:"predicateType"` // as required by the policy
	// Statement is the verified statement, decoded from the signed bytes.
	Statement Statement `json:"statement"`
	// MatchedSubject is the subject that matched Policy.Subject; nil under
	// UnsafeAnySubject.
	MatchedSubject *Subject `json:"matchedSubject,omitempty"`
	// ModelManifest is the decoded, checked predicate when PredicateType is
	// PredicateModelManifest.
	ModelManifest *ModelManifestPredicate `json:"modelManifest,omitempty"`
	// Run is the decoded, self-consistent predicate when PredicateType is
	// PredicateRun (Statement.Run; VerifyRunWith checks it against a
	// manifest).
	Run *RunPredicate `json:"run,omitempty"`
	// OMS is the decoded, checked predicate when PredicateType is
	// PredicateOMSSignatureV1.
	OMS *OMSPredicate `json:"oms,omitempty"`
	// Unsafe lists the Unsafe policy options in effect ("any-subject",
	// "any-subject-name"); empty when everything was checked.
	Unsafe []string `json:"unsafe,omitempty"`
}

// Verify checks env against policy p and returns what it verified:
//
//  1. the policy is complete (Policy.Validate; a plain error otherwise);
//  2. the envelope is DSSE with payloadType PayloadTypeInToto, one
//     signature by one of p.TrustedKeys (VerifyEnvelope);
//  3. the payload is a valid in-toto Statement v1 (ParseStatement);
//  4. its predicateType is p.PredicateType;
//  5. a subject matches p.Subject (name, and the digest for its algorithm);
//  6. for PredicateModelManifest, PredicateOMSSignatureV1 and PredicateRun,
//     the predicate decodes and is consistent with the subject or with
//     itself (Statement.ModelManifest, Statement.OMSModel, Statement.Run);
//  7. with Policy.Subjects, every subject against that predicate.
//
// Every failure in steps 2 to 6 matches ErrVerification and one specific
// reason error (ErrSignature, ErrSubject, …).
func Verify(env Envelope, p Policy) (*Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	payload, keyID, err := VerifyEnvelope(env, PayloadTypeInToto, p.TrustedKeys)
	if err != nil {
		return nil, err
	}
	stmt, err := ParseStatement(payload)
	if err != nil {
		return nil, err
	}
	if stmt.PredicateType != p.PredicateType {
		return nil, fmt.Errorf("%w: got %q, want %q", ErrPredicateType, stmt.PredicateType, p.PredicateType)
	}
	res := &Result{
		MediaType:     ResultMediaType,
		KeyID:         keyID,
		PayloadType:   env.PayloadType,
		PredicateType: stmt.PredicateType,
		Statement:     stmt,
	}
	switch {
	case p.Subjects != nil:
	case p.UnsafeAnySubject:
		res.Unsafe = append(res.Unsafe, "any-subject")
	default:
		sub, err := matchSubject(stmt.Subject, *p.Subject)
		if err != nil {
			return nil, err
		}
		res.MatchedSubject = &sub
		if p.Subject.UnsafeAnyName {
			res.Unsafe = append(res.Unsafe, "any-subject-name")
		}
	}
	switch stmt.PredicateType {
	case PredicateModelManifest:
		mm, err := stmt.ModelManifest()
		if err != nil {
			return nil, err
		}
		res.ModelManifest = &mm
	case PredicateOMSSignatureV1:
		oms, err := stmt.OMSModel()
		if err != nil {
			return nil, err
		}
		res.OMS = &oms
	case PredicateRun:
		run, err := stmt.Run()
		if err != nil {
			return nil, err
		}
		res.Run = &run
	}
	if p.Subjects != nil {
		if err := p.Subjects(stmt.Subject, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func matchSubject(subjects []Subject, m SubjectMatcher) (Subject, error) {
	var seen []string
	for _, s := range subjects {
		if !m.UnsafeAnyName && s.Name != m.Name {
			seen = append(seen, fmt.Sprintf("%q", s.Name))
			continue
		}
		hx, ok := s.Digest[string(m.Digest.Alg)]
		if !ok {
			seen = append(seen, fmt.Sprintf("%q (no %s)", s.Name, m.Digest.Alg))
			continue
		}
		d, err := jnf.ParseHex(m.Digest.Alg, hx)
		if err != nil {
			return Subject{}, fmt.Errorf("%w: subject %q: %v", ErrStatement, s.Name, err)
		}
		if d.Equal(m.Digest) {
			return s, nil
		}
		seen = append(seen, fmt.Sprintf("%q %s", s.Name, d))
	}
	want := fmt.Sprintf("name %q", m.Name)
	if m.UnsafeAnyName {
		want = "any name"
	}
	return Subject{}, fmt.Errorf("%w: want %s with %s; statement has %s", ErrSubject, want, m.Digest, strings.Join(seen, ", "))
}

// SignStatement validates stmt, marshals it with encoding/json, checks that
// ParseStatement accepts those bytes, and signs them as a DSSE envelope of
// PayloadTypeInToto with priv.
func SignStatement(priv ed25519.PrivateKey, stmt Statement) (Envelope, error) {
	if err := stmt.Validate(); err != nil {
		return Envelope{}, err
	}
	payload, err := json.Marshal(stmt)
	if err != nil {
		return Envelope{}, err
	}
	// Sign only what Verify would accept (no duplicate keys in the predicate…).
	if _, err := ParseStatement(payload); err != nil {
		return Envelope{}, fmt.Errorf("statement would not verify: %w", err)
	}
	return SignEnvelope(priv, PayloadTypeInToto, payload)
}
