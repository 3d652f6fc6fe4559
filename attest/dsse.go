package attest

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/tarfa-ai/tarfa/jnf"
)

// PayloadTypeInToto is the DSSE payloadType of an in-toto Statement.
const PayloadTypeInToto = "application/vnd.in-toto+json"

// Envelope is a DSSE v1 envelope (https://github.com/secure-systems-lab/dsse,
// envelope.md and protocol.md) with Ed25519 signatures. Marshal it with
// encoding/json; read one with ParseEnvelope. Nothing in it is trusted until
// VerifyEnvelope (or Verify) has checked it.
//
// What Tarfa produces and accepts:
//
//   - The JSON object {"payloadType", "payload", "signatures": [{"keyid",
//     "sig"}]}. payload and sig are standard base64 with padding (RFC 4648
//     §4). The spec also allows URL-safe base64 on input; Tarfa does not: it
//     accepts only the canonical standard encoding it writes (no URL-safe
//     alphabet, no line breaks, no non-zero pad bits).
//   - The signature is Ed25519 (RFC 8032, pure) over PAE(payloadType,
//     payload), the payload being the decoded bytes.
//   - keyid is the hex SHA-256 of the signer's SubjectPublicKeyInfo DER (see
//     KeyID). It is an unauthenticated hint: when present it selects the
//     trusted key and must name one; when empty every trusted key is tried.
//   - Exactly one signature. Multi-signature envelopes (thresholds, several
//     signers) are not designed in: an envelope with zero, two or more
//     signatures is rejected, even if one of them is valid, so that what
//     "verified" means never depends on which extra signatures were ignored.
//   - The JSON must be valid UTF-8 without duplicate keys (keys are compared
//     ignoring case, as encoding/json matches them); unknown fields are
//     ignored.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"` // standard base64 of the payload bytes
	Signatures  []Signature `json:"signatures"`
}

// Signature is one DSSE signature.
type Signature struct {
	KeyID string `json:"keyid"` // hex SHA-256 of the signer's SPKI DER; may be empty
	Sig   string `json:"sig"`   // standard base64 of the 64-byte Ed25519 signature
}

// PAE is the DSSE v1 pre-authentication encoding that is signed:
//
//	"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
//
// where SP is one space (0x20), LEN is the length in bytes as ASCII decimal
// without leading zeros, type is payloadType as UTF-8 and body is the raw
// (decoded) payload.
func PAE(payloadType string, payload []byte) []byte {
	b := make([]byte, 0, len("DSSEv1 ")+2*20+2+len(payloadType)+len(payload))
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, ' ')
	return append(b, payload...)
}

// SignEnvelope signs payload as payloadType with priv and returns the
// envelope, whose one signature carries priv's keyid.
func SignEnvelope(priv ed25519.PrivateKey, payloadType string, payload []byte) (Envelope, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return Envelope{}, fmt.Errorf("ed25519 private key: %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	if payloadType == "" {
		return Envelope{}, fmt.Errorf("empty payloadType")
	}
	keyID, err := KeyID(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return Envelope{}, err
	}
	sig := ed25519.Sign(priv, PAE(payloadType, payload))
	return Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(payload),
		Signatures:  []Signature{{KeyID: keyID, Sig: base64.StdEncoding.EncodeToString(sig)}},
	}, nil
}

// ParseEnvelope decodes an envelope from JSON. It checks the JSON only
// (valid UTF-8, no duplicate keys, one value, the field types); errors
// match ErrEncoding. The envelope is still unverified.
func ParseEnvelope(data []byte) (Envelope, error) {
	var env Envelope
	if err := jnf.DecodeJSONExtensible(data, &env); err != nil {
		return Envelope{}, fmt.Errorf("%w: DSSE envelope: %v", ErrEncoding, err)
	}
	return env, nil
}

// decodeBase64 decodes canonical standard base64: the input must be exactly
// what base64.StdEncoding produces for the decoded bytes.
func decodeBase64(field, s string) ([]byte, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not standard base64: %v", ErrEncoding, field, err)
	}
	if base64.StdEncoding.EncodeToString(b) != s {
		return nil, fmt.Errorf("%w: %s is not canonical standard base64 (line breaks?)", ErrEncoding, field)
	}
	return b, nil
}

// trustedKey is a public key with its keyid.
type trustedKey struct {
	id  string
	pub ed25519.PublicKey
}

func newTrustedKeys(keys []ed25519.PublicKey) ([]trustedKey, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("no trusted keys given (want at least one)")
	}
	out := make([]trustedKey, len(keys))
	for i, k := range keys {
		id, err := KeyID(k)
		if err != nil {
			return nil, fmt.Errorf("trusted key %d: %w", i, err)
		}
		out[i] = trustedKey{id: id, pub: k}
	}
	return out, nil
}

// VerifyEnvelope checks env and returns its payload and the keyid of the
// trusted key whose signature verified. It requires payloadType to equal
// wantPayloadType, exactly one signature, canonical base64, a keyid that is
// empty or names one of trusted, and a valid Ed25519 signature over PAE by
// that key (or, for an empty keyid, by any of trusted). Verification
// failures match ErrVerification and a specific reason (ErrPayloadType,
// ErrSignatureCount, ErrEncoding, ErrUnknownKey, ErrSignature); an empty or
// malformed trusted key list is a plain error.
func VerifyEnvelope(env Envelope, wantPayloadType string, trusted []ed25519.PublicKey) (payload []byte, keyID string, err error) {
	if wantPayloadType == "" {
		return nil, "", fmt.Errorf("empty expected payloadType")
	}
	keys, err := newTrustedKeys(trusted)
	if err != nil {
		return nil, "", err
	}
	if env.PayloadType != wantPayloadType {
		return nil, "", fmt.Errorf("%w: got %q, want %q", ErrPayloadType, env.PayloadType, wantPayloadType)
	}
	if n := len(env.Signatures); n != 1 {
		return nil, "", fmt.Errorf("%w: got %d, want exactly 1 (multi-signature envelopes are not supported)", ErrSignatureCount, n)
	}
	payload, err = decodeBase64("payload", env.Payload)
	if err != nil {
		return nil, "", err
	}
	s := env.Signatures[0]
	sig, err := decodeBase64("sig", s.Sig)
	if err != nil {
		return nil, "", err
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, "", fmt.Errorf("%w: signature is %d bytes, want %d (Ed25519)", ErrSignature, len(sig), ed25519.SignatureSize)
	}
	msg := PAE(env.PayloadType, payload)
	if s.KeyID != "" {
		for _, k := range keys {
			if k.id == s.KeyID {
				if !ed25519.Verify(k.pub, msg, sig) {
					return nil, "", fmt.Errorf("%w: signature does not verify under key %s", ErrSignature, k.id)
				}
				return payload, k.id, nil
			}
		}
		return nil, "", fmt.Errorf("%w: keyid %q is not among the %d trusted keys", ErrUnknownKey, s.KeyID, len(keys))
	}
	for _, k := range keys {
		if ed25519.Verify(k.pub, msg, sig) {
			return payload, k.id, nil
		}
	}
	return nil, "", fmt.Errorf("%w: signature (no keyid) does not verify under any of the %d trusted keys", ErrSignature, len(keys))
}
