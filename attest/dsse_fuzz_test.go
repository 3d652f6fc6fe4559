package attest

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var updateDSSECorpus = flag.Bool("update-dsse-corpus", false, "rewrite testdata/fuzz/FuzzDSSEEnvelope seed files")

const dsseCorpusDir = "testdata/fuzz/FuzzDSSEEnvelope"

// fuzzSeeds are the committed seed inputs of FuzzDSSEEnvelope: one valid
// envelope per predicate and one per rejection reason. They are derived
// from the deterministic "fuzz" key, so TestDSSEFuzzCorpusIsCurrent can
// check the committed files.
func fuzzSeeds(t testing.TB) map[string][]byte {
	_, priv := testKey("fuzz")
	_, other := testKey("other")
	valid, err := SignStatement(priv, testModelStatement(t))
	if err != nil {
		t.Fatal(err)
	}
	oms, err := NewOMSStatement("tiny", []Resource{NewResource("model.safetensors", testDigest("w"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	validOMS, err := SignStatement(priv, oms)
	if err != nil {
		t.Fatal(err)
	}
	byOther, _ := SignStatement(other, testModelStatement(t))
	enc := func(e Envelope) []byte {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mod := func(f func(e *Envelope)) []byte {
		e := valid
		e.Signatures = slices.Clone(valid.Signatures)
		f(&e)
		return enc(e)
	}
	validJSON := enc(valid)
	return map[string][]byte{
		"valid-model-manifest": validJSON,
		"valid-oms":            enc(validOMS),
		"valid-no-keyid":       mod(func(e *Envelope) { e.Signatures[0].KeyID = "" }),
		"wrong-payload-type":   mod(func(e *Envelope) { e.PayloadType = "application/json" }),
		"two-signatures":       mod(func(e *Envelope) { e.Signatures = append(e.Signatures, e.Signatures[0]) }),
		"no-signatures":        mod(func(e *Envelope) { e.Signatures = []Signature{} }),
		"null-signatures":      mod(func(e *Envelope) { e.Signatures = nil }),
		"url-base64-payload": mod(func(e *Envelope) {
			e.Payload = strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff}))
		}),
		"unknown-keyid":     enc(byOther),
		"flipped-signature": mod(func(e *Envelope) { e.Signatures[0].Sig = "A" + e.Signatures[0].Sig[1:] }),
		"duplicate-key":     append([]byte(`{"payloadType":"x",`), validJSON[1:]...),
		"case-folded-key":   append([]byte(`{"PAYLOADTYPE":"x",`), validJSON[1:]...),
		"trailing-data":     append(slices.Clone(validJSON), "{}"...),
		"truncated":         validJSON[:len(validJSON)/2],
	}
}

func corpusFile(data []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
}

// TestDSSEFuzzCorpusIsCurrent checks that the committed seed corpus is
// exactly what fuzzSeeds generates (and so that the "valid" seeds do
// verify); -update-dsse-corpus rewrites it.
func TestDSSEFuzzCorpusIsCurrent(t *testing.T) {
	seeds := fuzzSeeds(t)
	if *updateDSSECorpus {
		if err := os.MkdirAll(dsseCorpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range seeds {
			if err := os.WriteFile(filepath.Join(dsseCorpusDir, "seed-"+name), corpusFile(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range seeds {
		got, err := os.ReadFile(filepath.Join(dsseCorpusDir, "seed-"+name))
		if err != nil {
			t.Fatalf("%v (run go test ./attest -run TestDSSEFuzzCorpusIsCurrent -update-dsse-corpus)", err)
		}
		if !bytes.Equal(got, corpusFile(data)) {
			t.Errorf("seed-%s is stale (run with -update-dsse-corpus)", name)
		}
	}
	// The valid seeds verify and every other seed is rejected, so the corpus
	// covers both sides of every check.
	fuzzPub, _ := testKey("fuzz")
	for name, data := range seeds {
		env, err := ParseEnvelope(data)
		if err == nil {
			_, _, err = VerifyEnvelope(env, PayloadTypeInToto, []ed25519.PublicKey{fuzzPub})
		}
		if valid := strings.HasPrefix(name, "valid-"); valid != (err == nil) {
			t.Errorf("seed %s: err %v", name, err)
		}
	}
}

// FuzzDSSEEnvelope feeds arbitrary bytes to ParseEnvelope, VerifyEnvelope
// and Verify. Beyond not panicking, it checks: every rejection is an
// ErrVerification (never a usage error), parsing round-trips through
// json.Marshal, and anything accepted really carries a valid signature by
// the trusted key over its canonical payload.
func FuzzDSSEEnvelope(f *testing.F) {
	for _, data := range fuzzSeeds(f) {
		f.Add(data)
	}
	pub, _ := testKey("fuzz")
	keyID := mustKeyID(f, pub)
	trusted := []ed25519.PublicKey{pub}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseEnvelope(data)
		if err != nil {
			if !errors.Is(err, ErrEncoding) {
				t.Fatalf("ParseEnvelope error %v does not match ErrEncoding", err)
			}
			return
		}
		again, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		env2, err := ParseEnvelope(again)
		if err != nil || !reflect.DeepEqual(env, env2) {
			t.Fatalf("round trip: %+v -> %s -> %+v (%v)", env, again, env2, err)
		}

		payload, id, err := VerifyEnvelope(env, PayloadTypeInToto, trusted)
		if err != nil {
			if !errors.Is(err, ErrVerification) {
				t.Fatalf("VerifyEnvelope error %v does not match ErrVerification", err)
			}
		} else {
			sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
			if id != keyID || env.PayloadType != PayloadTypeInToto || len(env.Signatures) != 1 ||
				base64.StdEncoding.EncodeToString(payload) != env.Payload ||
				!ed25519.Verify(pub, PAE(env.PayloadType, payload), sig) {
				t.Fatalf("accepted an envelope that does not hold: %+v", env)
			}
		}

		for _, pt := range []string{PredicateModelManifest, PredicateOMSSignatureV1} {
			res, err := Verify(env, Policy{TrustedKeys: trusted, PredicateType: pt, UnsafeAnySubject: true})
			if err != nil {
				if !errors.Is(err, ErrVerification) {
					t.Fatalf("Verify error %v does not match ErrVerification", err)
				}
				continue
			}
			if res.KeyID != keyID || res.PredicateType != pt || (res.ModelManifest == nil) == (res.OMS == nil) {
				t.Fatalf("inconsistent result %+v", res)
			}
		}
	})
}
