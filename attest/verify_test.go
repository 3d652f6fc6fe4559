package attest

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

func modelPolicy(pub ed25519.PublicKey) Policy {
	return Policy{
		TrustedKeys:   []ed25519.PublicKey{pub},
		PredicateType: PredicateModelManifest,
		Subject:       &SubjectMatcher{Name: "qwen3-moe-tiny", Digest: testPredicate().Root},
	}
}

func TestVerifyModelManifest(t *testing.T) {
	pub, priv := testKey("signer")
	env, err := SignStatement(priv, testModelStatement(t))
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, as it travels.
	data, _ := json.Marshal(env)
	env, err = ParseEnvelope(data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Verify(env, modelPolicy(pub))
	if err != nil {
		t.Fatal(err)
	}
	if res.MediaType != "application/vnd.tarfa.verificationresult+json;version=0.1" {
		t.Errorf("MediaType %q", res.MediaType)
	}
	if res.KeyID != mustKeyID(t, pub) || res.PayloadType != PayloadTypeInToto || res.PredicateType != PredicateModelManifest {
		t.Errorf("result %+v", res)
	}
	if res.MatchedSubject == nil || res.MatchedSubject.Name != "qwen3-moe-tiny" {
		t.Errorf("MatchedSubject %+v", res.MatchedSubject)
	}
	if res.ModelManifest == nil || !res.ModelManifest.Root.Equal(testPredicate().Root) || res.OMS != nil {
		t.Errorf("ModelManifest %+v OMS %+v", res.ModelManifest, res.OMS)
	}
	if len(res.Unsafe) != 0 {
		t.Errorf("Unsafe %v, want none", res.Unsafe)
	}
	// The result is a JSON document.
	out, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(out), `"mediaType":"application/vnd.tarfa.verificationresult+json;version=0.1"`) {
		t.Errorf("result JSON %s (%v)", out, err)
	}
}

func TestVerifyRejects(t *testing.T) {
	pub, priv := testKey("signer")
	otherPub, otherPriv := testKey("other")
	env, _ := SignStatement(priv, testModelStatement(t))
	root := testPredicate().Root

	signRaw := func(payload string) Envelope {
		e, err := SignEnvelope(priv, PayloadTypeInToto, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	sub := func(name string, d jnf.Digest) *SubjectMatcher { return &SubjectMatcher{Name: name, Digest: d} }
	withPolicy := func(f func(p *Policy)) Policy {
		p := modelPolicy(pub)
		f(&p)
		return p
	}
	inconsistent := testModelStatement(t)
	inconsistent.Subject[0].Digest = NewDigestSet(testDigest("other root"))
	envInconsistent, _ := SignStatement(priv, inconsistent)
	otherEnv, _ := SignStatement(otherPriv, testModelStatement(t))
	jsonEnv, _ := SignEnvelope(priv, "application/json", []byte(`{}`))

	for _, tc := range []struct {
		name string
		env  Envelope
		p    Policy
		want error
	}{
		{"untrusted signer", otherEnv, modelPolicy(pub), ErrUnknownKey},
		{"wrong payload type", jsonEnv, modelPolicy(pub), ErrPayloadType},
		{"payload not JSON", signRaw("hello"), modelPolicy(pub), ErrEncoding},
		{"payload with duplicate keys", signRaw(`{"_type":"https://in-toto.io/Statement/v1","_type":"x"}`), modelPolicy(pub), ErrEncoding},
		{"not a v1 statement", signRaw(`{"_type":"https://in-toto.io/Statement/v0.1","subject":[{"name":"a","digest":{"sha256":"00"}}],"predicateType":"p","predicate":{}}`), modelPolicy(pub), ErrStatement},
		{"other predicate type", env, withPolicy(func(p *Policy) { p.PredicateType = "https://slsa.dev/provenance/v1" }), ErrPredicateType},
		{"wrong subject name", env, withPolicy(func(p *Policy) { p.Subject = sub("another-model", root) }), ErrSubject},
		{"wrong subject digest", env, withPolicy(func(p *Policy) { p.Subject = sub("qwen3-moe-tiny", testDigest("x")) }), ErrSubject},
		{"subject has no blake3", env, withPolicy(func(p *Policy) {
			p.Subject = sub("qwen3-moe-tiny", jnf.Digest{Alg: jnf.BLAKE3, Sum: root.Sum})
		}), ErrSubject},
		{"any name, wrong digest", env, withPolicy(func(p *Policy) {
			p.Subject = &SubjectMatcher{Digest: testDigest("x"), UnsafeAnyName: true}
		}), ErrSubject},
		{"subject digest ≠ predicate root", envInconsistent, withPolicy(func(p *Policy) {
			p.Subject = sub("qwen3-moe-tiny", testDigest("other root"))
		}), ErrPredicate},
	} {
		res, err := Verify(tc.env, tc.p)
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrVerification) || res != nil {
			t.Errorf("%s: got %v (result %v), want %v", tc.name, err, res, tc.want)
		}
	}
	// The other signer verifies once trusted.
	if _, err := Verify(otherEnv, withPolicy(func(p *Policy) { p.TrustedKeys = append(p.TrustedKeys, otherPub) })); err != nil {
		t.Errorf("other signer trusted: %v", err)
	}
}

func TestPolicyFieldsAreRequired(t *testing.T) {
	pub, priv := testKey("signer")
	env, _ := SignStatement(priv, testModelStatement(t))
	root := testPredicate().Root
	for _, tc := range []struct {
		name string
		p    Policy
		msg  string
	}{
		{"zero policy", Policy{}, "no TrustedKeys"},
		{"no keys", Policy{PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m", Digest: root}}, "no TrustedKeys"},
		{"bad key", Policy{TrustedKeys: []ed25519.PublicKey{pub[:5]}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m", Digest: root}}, "TrustedKeys[0]"},
		{"no predicate type", Policy{TrustedKeys: []ed25519.PublicKey{pub}, Subject: &SubjectMatcher{Name: "m", Digest: root}}, "PredicateType"},
		{"no subject", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest}, "UnsafeAnySubject"},
		{"subject and unsafe", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m", Digest: root}, UnsafeAnySubject: true}, "both"},
		{"no name", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Digest: root}}, "UnsafeAnyName"},
		{"name and unsafe", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m", Digest: root, UnsafeAnyName: true}}, "both"},
		{"no digest", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m"}}, "Subject.Digest"},
		{"md5 digest", Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, Subject: &SubjectMatcher{Name: "m", Digest: jnf.Digest{Alg: "md5"}}}, "md5"},
	} {
		res, err := Verify(env, tc.p)
		if err == nil || res != nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if errors.Is(err, ErrVerification) {
			t.Errorf("%s: %v is a policy (usage) error, not ErrVerification", tc.name, err)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.msg)
		}
	}
}

func TestVerifyUnsafeOptionsAreRecorded(t *testing.T) {
	pub, priv := testKey("signer")
	env, _ := SignStatement(priv, testModelStatement(t))
	res, err := Verify(env, Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest, UnsafeAnySubject: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Unsafe, []string{"any-subject"}) || res.MatchedSubject != nil {
		t.Errorf("Unsafe %v MatchedSubject %v", res.Unsafe, res.MatchedSubject)
	}
	res, err = Verify(env, Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateModelManifest,
		Subject: &SubjectMatcher{Digest: testPredicate().Root, UnsafeAnyName: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Unsafe, []string{"any-subject-name"}) || res.MatchedSubject == nil {
		t.Errorf("Unsafe %v MatchedSubject %v", res.Unsafe, res.MatchedSubject)
	}
}

func TestVerifyOMS(t *testing.T) {
	pub, priv := testKey("signer")
	rs := []Resource{NewResource("model.safetensors", testDigest("w")), NewResource("config.json", testDigest("c"))}
	stmt, err := NewOMSStatement("tiny", rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := SignStatement(priv, stmt)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := stmt.Subject[0].Digest.Get(jnf.SHA256)
	res, err := Verify(env, Policy{TrustedKeys: []ed25519.PublicKey{pub}, PredicateType: PredicateOMSSignatureV1,
		Subject: &SubjectMatcher{Name: "tiny", Digest: subj}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OMS == nil || len(res.OMS.Resources) != 2 || res.OMS.Resources[0].Name != "config.json" || res.ModelManifest != nil {
		t.Errorf("OMS result %+v", res.OMS)
	}
}

func TestSignStatementRefusesWhatVerifyRejects(t *testing.T) {
	_, priv := testKey("signer")
	s := testModelStatement(t)
	s.Predicate = json.RawMessage(`{"a":1,"A":2}`)
	if _, err := SignStatement(priv, s); err == nil {
		t.Error("signed a predicate with case-folded duplicate keys")
	}
	s = testModelStatement(t)
	s.Subject = nil
	if _, err := SignStatement(priv, s); !errors.Is(err, ErrStatement) {
		t.Errorf("no subject: got %v, want ErrStatement", err)
	}
}
