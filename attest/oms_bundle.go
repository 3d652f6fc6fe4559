package attest

import (
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// BundleMediaTypeV03 is the mediaType of a Sigstore bundle v0.3, the
// container of an OMS v1.0 signature; model-transparency writes it and its
// key verifier accepts no other.
const BundleMediaTypeV03 = "application/vnd.dev.sigstore.bundle.v0.3+json"

// Bundle is the subset of a Sigstore bundle (protobuf-specs
// sigstore_bundle.proto, JSON form) that an OMS v1.0 key-mode signature
// uses, as a plain struct:
//
//	{"mediaType": BundleMediaTypeV03,
//	 "verificationMaterial": {"publicKey": {"hint": <OMSKeyHint>}, "tlogEntries": []},
//	 "dsseEnvelope": {"payload", "payloadType", "signatures": [{"sig", "keyid": ""}]}}
//
// The DSSE envelope is the one of Envelope, but its signature is ECDSA
// (ASN.1 DER, over the curve's hash of PAE) rather than Ed25519. Read one
// with ParseBundle; nothing in it is trusted until VerifyBundle.
type Bundle struct {
	MediaType            string               `json:"mediaType"`
	VerificationMaterial VerificationMaterial `json:"verificationMaterial"`
	DSSEEnvelope         *Envelope            `json:"dsseEnvelope"`
}

// VerificationMaterial is the bundle's verificationMaterial. Only the
// publicKey (key mode) is implemented; the certificate, x509CertificateChain
// (certificate mode) and Sigstore (Fulcio + Rekor) modes are recognised and
// refused.
type VerificationMaterial struct {
	PublicKey            *PublicKeyIdentifier `json:"publicKey,omitempty"`
	TlogEntries          []json.RawMessage    `json:"tlogEntries"`
	Certificate          json.RawMessage      `json:"certificate,omitempty"`
	X509CertificateChain json.RawMessage      `json:"x509CertificateChain,omitempty"`
}

// PublicKeyIdentifier names the verification key. hint (OMSKeyHint) is the
// current form; rawBytes (base64 of the key's PEM text) is what
// model-transparency wrote before v1.1.0, which OMS verifiers SHOULD still
// accept. Neither is trusted: they only select among the caller's keys.
type PublicKeyIdentifier struct {
	Hint     string `json:"hint,omitempty"`
	RawBytes string `json:"rawBytes,omitempty"`
}

// ParseBundle decodes an OMS bundle: strict JSON (as ParseEnvelope), the
// v0.3 mediaType, a dsseEnvelope, and key-mode verification material.
// Errors match ErrEncoding, or ErrVerification for a signing method Tarfa
// does not implement. The bundle is still unverified.
func ParseBundle(data []byte) (Bundle, error) {
	var b Bundle
	if err := jnf.DecodeJSONExtensible(data, &b); err != nil {
		return Bundle{}, fmt.Errorf("%w: Sigstore bundle: %v", ErrEncoding, err)
	}
	if b.MediaType != BundleMediaTypeV03 {
		return Bundle{}, fmt.Errorf("%w: Sigstore bundle mediaType %q, want %q", ErrEncoding, b.MediaType, BundleMediaTypeV03)
	}
	if b.DSSEEnvelope == nil {
		return Bundle{}, fmt.Errorf("%w: Sigstore bundle has no dsseEnvelope (a message-signature bundle is no OMS signature)", ErrEncoding)
	}
	vm := b.VerificationMaterial
	switch {
	case vm.Certificate != nil || vm.X509CertificateChain != nil:
		return Bundle{}, fmt.Errorf("%w: the bundle is signed with a certificate (OMS certificate or Sigstore method); Tarfa verifies only the key method (verificationMaterial.publicKey)", ErrUnknownKey)
	case vm.PublicKey == nil:
		return Bundle{}, fmt.Errorf("%w: Sigstore bundle has no verificationMaterial.publicKey", ErrEncoding)
	case vm.PublicKey.Hint == "" && vm.PublicKey.RawBytes == "":
		return Bundle{}, fmt.Errorf("%w: verificationMaterial.publicKey has neither hint nor rawBytes", ErrEncoding)
	}
	return b, nil
}

// SignBundle signs payload (an in-toto statement) with an ECDSA key as an
// OMS bundle: a DSSE envelope of PayloadTypeInToto whose one signature is
// ECDSA (ASN.1 DER) over the curve's hash of PAE, keyid "", and the key's
// hint.
func SignBundle(priv *ecdsa.PrivateKey, payload []byte) (Bundle, error) {
	if err := checkECDSACurve(&priv.PublicKey); err != nil {
		return Bundle{}, err
	}
	hint, err := OMSKeyHint(&priv.PublicKey)
	if err != nil {
		return Bundle{}, err
	}
	h := ecdsaHash(&priv.PublicKey).New()
	h.Write(PAE(PayloadTypeInToto, payload))
	sig, err := ecdsa.SignASN1(rand.Reader, priv, h.Sum(nil))
	if err != nil {
		return Bundle{}, err
	}
	return Bundle{
		MediaType: BundleMediaTypeV03,
		VerificationMaterial: VerificationMaterial{
			PublicKey:   &PublicKeyIdentifier{Hint: hint},
			TlogEntries: []json.RawMessage{},
		},
		DSSEEnvelope: &Envelope{
			PayloadType: PayloadTypeInToto,
			Payload:     base64.StdEncoding.EncodeToString(payload),
			Signatures:  []Signature{{Sig: base64.StdEncoding.EncodeToString(sig)}},
		},
	}, nil
}

// VerifyBundle checks b's signature and returns the payload and the
// PublicKeyID of the trusted key that verified it. It requires
// payloadType PayloadTypeInToto, exactly one signature, canonical base64,
// and an ECDSA signature over PAE by a trusted key: the one whose
// OMSKeyHint is the bundle's hint, or, in a pre-v1.1.0 bundle without a
// hint, whichever trusted key verifies it (rawBytes is never used as a
// key). The DSSE keyid is ignored, as OMS says. Failures match
// ErrVerification and a specific reason.
func VerifyBundle(b Bundle, trusted []*ecdsa.PublicKey) (payload []byte, keyID string, err error) {
	if len(trusted) == 0 {
		return nil, "", fmt.Errorf("no trusted ECDSA keys given (an OMS signature needs an ECDSA P-256, P-384 or P-521 public key)")
	}
	env := b.DSSEEnvelope
	if env == nil {
		return nil, "", fmt.Errorf("%w: no dsseEnvelope", ErrEncoding)
	}
	if env.PayloadType != PayloadTypeInToto {
		return nil, "", fmt.Errorf("%w: got %q, want %q", ErrPayloadType, env.PayloadType, PayloadTypeInToto)
	}
	if n := len(env.Signatures); n != 1 {
		return nil, "", fmt.Errorf("%w: got %d, want exactly 1 (multi-signature envelopes are not supported)", ErrSignatureCount, n)
	}
	payload, err = decodeBase64("payload", env.Payload)
	if err != nil {
		return nil, "", err
	}
	sig, err := decodeBase64("sig", env.Signatures[0].Sig)
	if err != nil {
		return nil, "", err
	}
	msg := PAE(env.PayloadType, payload)
	verifies := func(k *ecdsa.PublicKey) bool {
		h := ecdsaHash(k).New()
		h.Write(msg)
		return ecdsa.VerifyASN1(k, h.Sum(nil), sig)
	}
	hint := ""
	if b.VerificationMaterial.PublicKey != nil {
		hint = b.VerificationMaterial.PublicKey.Hint
	}
	var hints []string
	for _, k := range trusted {
		kh, err := OMSKeyHint(k)
		if err != nil {
			return nil, "", fmt.Errorf("trusted key: %w", err)
		}
		hints = append(hints, kh)
		if hint != "" && kh != hint {
			continue
		}
		if verifies(k) {
			id, err := PublicKeyID(k)
			return payload, id, err
		}
		if hint != "" {
			return nil, "", fmt.Errorf("%w: ECDSA signature does not verify under the key with hint %s", ErrSignature, hint)
		}
	}
	if hint != "" {
		return nil, "", fmt.Errorf("%w: the bundle's key hint %s is none of the %d trusted keys' (%s)", ErrUnknownKey, hint, len(trusted), strings.Join(hints, ", "))
	}
	return nil, "", fmt.Errorf("%w: ECDSA signature (pre-v1.1.0 bundle, no key hint) does not verify under any of the %d trusted keys", ErrSignature, len(trusted))
}

// VerifyOMSBundle checks an OMS v1.0 signature the way the specification
// (§8.1–8.3) and model-transparency's key verifier do, up to but not
// including the files: the bundle's signature by a trusted key
// (VerifyBundle), an in-toto Statement v1 with predicateType
// PredicateOMSSignatureV1, and a predicate consistent with its one subject
// (Statement.OMSModel: the subject digest is the SHA-256 over the resource
// digests). The subject name is informational in OMS and not matched here.
// The files are checked against Result.OMS by verify.CheckOMS.
func VerifyOMSBundle(b Bundle, trusted []*ecdsa.PublicKey) (*Result, error) {
	payload, keyID, err := VerifyBundle(b, trusted)
	if err != nil {
		return nil, err
	}
	stmt, err := ParseStatement(payload)
	if err != nil {
		return nil, err
	}
	oms, err := stmt.OMSModel()
	if err != nil {
		return nil, err
	}
	sub := stmt.Subject[0]
	return &Result{
		MediaType:      ResultMediaType,
		KeyID:          keyID,
		PayloadType:    b.DSSEEnvelope.PayloadType,
		PredicateType:  stmt.PredicateType,
		Statement:      stmt,
		MatchedSubject: &sub,
		OMS:            &oms,
	}, nil
}
