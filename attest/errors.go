package attest

import "github.com/tarfa-ai/tarfa/jnf"

// ErrVerification is matched (with errors.Is) by every error that says a
// signed thing did not verify: the envelope, its signature, the statement or
// the policy's expectations. It is jnf.ErrVerification, so one test covers
// signatures, digests and manifests alike: callers map it to "verification
// failed" (the CLI exits with status 3); any other error is a usage or I/O
// error.
var ErrVerification = jnf.ErrVerification

// The reasons a verification fails. Each matches ErrVerification too, and
// each is wrapped with the details (got versus want), so test with errors.Is.
var (
	// ErrPayloadType: the envelope's payloadType is not the expected one.
	ErrPayloadType = verificationError("wrong payload type")
	// ErrEncoding: a base64 field is not canonical standard base64 or the
	// envelope or statement JSON is malformed (including duplicate keys).
	ErrEncoding = verificationError("malformed envelope or statement")
	// ErrSignatureCount: the envelope does not carry exactly one signature.
	ErrSignatureCount = verificationError("wrong number of signatures")
	// ErrUnknownKey: the signature names a keyid that is not trusted.
	ErrUnknownKey = verificationError("signature by an untrusted key")
	// ErrSignature: the signature does not verify under the trusted key(s).
	ErrSignature = verificationError("bad signature")
	// ErrStatement: the payload is not an in-toto Statement v1 or breaks
	// its rules (no subject, a subject without digests, an empty predicate).
	ErrStatement = verificationError("invalid in-toto statement")
	// ErrPredicateType: the statement's predicateType is not the expected one.
	ErrPredicateType = verificationError("wrong predicate type")
	// ErrPredicate: the predicate is malformed or inconsistent with the
	// subject (for example its root differs from the subject digest).
	ErrPredicate = verificationError("invalid predicate")
	// ErrSubject: no subject matches the policy's expected name and digest.
	ErrSubject = verificationError("subject mismatch")
)

type verificationError string

func (e verificationError) Error() string        { return string(e) }
func (e verificationError) Is(target error) bool { return target == ErrVerification }
