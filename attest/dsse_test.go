package attest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// testKey is a deterministic Ed25519 key derived from label.
func testKey(label string) (ed25519.PublicKey, ed25519.PrivateKey) {
	seed := sha256.Sum256([]byte("tarfa attest test key: " + label))
	priv := ed25519.NewKeyFromSeed(seed[:])
	return priv.Public().(ed25519.PublicKey), priv
}

func mustKeyID(t testing.TB, pub ed25519.PublicKey) string {
	t.Helper()
	id, err := KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The example of the DSSE protocol spec (protocol.md, "Signature definition").
func TestPAESpecVector(t *testing.T) {
	got := string(PAE("http://example.com/HelloWorld", []byte("hello world")))
	want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if got != want {
		t.Fatalf("PAE: got %q, want %q", got, want)
	}
	if got := string(PAE("", nil)); got != "DSSEv1 0  0 " {
		t.Fatalf("PAE of empty type and body: got %q, want %q", got, "DSSEv1 0  0 ")
	}
	// Lengths are in bytes, not runes.
	if got := string(PAE("é", []byte("ü"))); got != "DSSEv1 2 é 2 ü" {
		t.Fatalf("PAE multibyte: got %q", got)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	pub, priv := testKey("a")
	payload := []byte(`{"hello":"world"}`)
	env, err := SignEnvelope(priv, PayloadTypeInToto, payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Signatures) != 1 || env.Signatures[0].KeyID != mustKeyID(t, pub) {
		t.Fatalf("signatures %+v, want one with keyid %s", env.Signatures, mustKeyID(t, pub))
	}
	// Through JSON and back.
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	env2, err := ParseEnvelope(data)
	if err != nil {
		t.Fatal(err)
	}
	got, keyID, err := VerifyEnvelope(env2, PayloadTypeInToto, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(payload) || keyID != mustKeyID(t, pub) {
		t.Fatalf("got payload %q keyid %s, want %q %s", got, keyID, payload, mustKeyID(t, pub))
	}
	// Ed25519 is deterministic: same key and payload, same envelope bytes.
	again, _ := SignEnvelope(priv, PayloadTypeInToto, payload)
	if again.Signatures[0].Sig != env.Signatures[0].Sig {
		t.Error("signing is not deterministic")
	}
}

func TestVerifyEnvelopeRejects(t *testing.T) {
	pubA, privA := testKey("a")
	pubB, privB := testKey("b")
	payload := []byte("payload bytes")
	good, err := SignEnvelope(privA, PayloadTypeInToto, payload)
	if err != nil {
		t.Fatal(err)
	}
	byB, _ := SignEnvelope(privB, PayloadTypeInToto, payload)
	trusted := []ed25519.PublicKey{pubA}
	sig := good.Signatures[0]

	mod := func(f func(e *Envelope)) Envelope {
		e := good
		e.Signatures = append([]Signature(nil), good.Signatures...)
		f(&e)
		return e
	}
	rawSig, _ := base64.StdEncoding.DecodeString(sig.Sig)
	flipped := append([]byte(nil), rawSig...)
	flipped[10] ^= 1

	for _, tc := range []struct {
		name    string
		env     Envelope
		trusted []ed25519.PublicKey
		want    error
	}{
		{"wrong payload type", mod(func(e *Envelope) { e.PayloadType = "application/json" }), trusted, ErrPayloadType},
		{"empty payload type", mod(func(e *Envelope) { e.PayloadType = "" }), trusted, ErrPayloadType},
		{"no signature", mod(func(e *Envelope) { e.Signatures = nil }), trusted, ErrSignatureCount},
		{"two signatures, both valid", mod(func(e *Envelope) { e.Signatures = []Signature{sig, sig} }), trusted, ErrSignatureCount},
		{"valid plus untrusted signature", mod(func(e *Envelope) { e.Signatures = append(e.Signatures, byB.Signatures[0]) }), trusted, ErrSignatureCount},
		{"payload not base64", mod(func(e *Envelope) { e.Payload = "!!!" }), trusted, ErrEncoding},
		{"payload URL-safe base64", mod(func(e *Envelope) {
			e.Payload = base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe})
		}), trusted, ErrEncoding},
		{"payload unpadded", mod(func(e *Envelope) { e.Payload = strings.TrimRight(e.Payload, "=") }), trusted, ErrEncoding},
		{"payload with line break", mod(func(e *Envelope) { e.Payload = e.Payload[:4] + "\n" + e.Payload[4:] }), trusted, ErrEncoding},
		{"sig not base64", mod(func(e *Envelope) { e.Signatures[0].Sig = "*" }), trusted, ErrEncoding},
		{"sig truncated", mod(func(e *Envelope) {
			e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(rawSig[:63])
		}), trusted, ErrSignature},
		{"sig bit flipped", mod(func(e *Envelope) {
			e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(flipped)
		}), trusted, ErrSignature},
		{"payload changed", mod(func(e *Envelope) {
			e.Payload = base64.StdEncoding.EncodeToString([]byte("payload byteS"))
		}), trusted, ErrSignature},
		{"payload type changed with same sig", mod(func(e *Envelope) { e.PayloadType = "x" }), []ed25519.PublicKey{pubA}, ErrPayloadType},
		{"unknown keyid", byB, trusted, ErrUnknownKey},
		{"keyid of A on B's signature", mod(func(e *Envelope) { e.Signatures[0].Sig = byB.Signatures[0].Sig }), trusted, ErrSignature},
		{"no keyid, signed by untrusted B", mod(func(e *Envelope) { e.Signatures[0] = Signature{Sig: byB.Signatures[0].Sig} }), trusted, ErrSignature},
		{"keyid in upper case", mod(func(e *Envelope) { e.Signatures[0].KeyID = strings.ToUpper(sig.KeyID) }), trusted, ErrUnknownKey},
	} {
		_, _, err := VerifyEnvelope(tc.env, PayloadTypeInToto, tc.trusted)
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrVerification) {
			t.Errorf("%s: got %v, want %v (and ErrVerification)", tc.name, err, tc.want)
		}
	}

	// The same signature verifies when the envelope is intact.
	if _, _, err := VerifyEnvelope(good, PayloadTypeInToto, trusted); err != nil {
		t.Fatalf("intact envelope: %v", err)
	}
	// An empty keyid tries every trusted key.
	noID := mod(func(e *Envelope) { e.Signatures[0].KeyID = "" })
	_, id, err := VerifyEnvelope(noID, PayloadTypeInToto, []ed25519.PublicKey{pubB, pubA})
	if err != nil || id != mustKeyID(t, pubA) {
		t.Fatalf("no keyid: got keyid %q err %v, want %s", id, err, mustKeyID(t, pubA))
	}
	// A keyid selects among several trusted keys.
	_, id, err = VerifyEnvelope(byB, PayloadTypeInToto, []ed25519.PublicKey{pubA, pubB})
	if err != nil || id != mustKeyID(t, pubB) {
		t.Fatalf("keyid B among A, B: got %q %v", id, err)
	}
}

func TestVerifyEnvelopeBadArguments(t *testing.T) {
	_, priv := testKey("a")
	env, _ := SignEnvelope(priv, PayloadTypeInToto, []byte("x"))
	for name, keys := range map[string][]ed25519.PublicKey{
		"no keys":    nil,
		"short key":  {ed25519.PublicKey(make([]byte, 31))},
		"empty key":  {ed25519.PublicKey{}},
		"long key":   {ed25519.PublicKey(make([]byte, 64))},
		"one bad of": {priv.Public().(ed25519.PublicKey), make([]byte, 3)},
	} {
		_, _, err := VerifyEnvelope(env, PayloadTypeInToto, keys)
		if err == nil || errors.Is(err, ErrVerification) {
			t.Errorf("%s: got %v, want a usage error (not ErrVerification)", name, err)
		}
	}
	if _, _, err := VerifyEnvelope(env, "", []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}); err == nil {
		t.Error("empty expected payload type accepted")
	}
	if _, err := SignEnvelope(priv[:10], PayloadTypeInToto, nil); err == nil {
		t.Error("short private key accepted")
	}
	if _, err := SignEnvelope(priv, "", nil); err == nil {
		t.Error("empty payload type accepted for signing")
	}
}

func TestParseEnvelopeStrictJSON(t *testing.T) {
	ok := `{"payloadType":"t","payload":"","signatures":[{"keyid":"k","sig":""}]}`
	if _, err := ParseEnvelope([]byte(ok)); err != nil {
		t.Fatalf("valid envelope JSON: %v", err)
	}
	if _, err := ParseEnvelope([]byte(`{"payloadType":"t","payload":"","signatures":[],"future":1}`)); err != nil {
		t.Errorf("unknown field: %v, want it ignored", err)
	}
	for name, in := range map[string]string{
		"duplicate payloadType":   `{"payloadType":"a","payloadType":"b","payload":"","signatures":[]}`,
		"case-folded duplicate":   `{"payloadType":"a","PAYLOADTYPE":"b","payload":"","signatures":[]}`,
		"kelvin-sign duplicate":   `{"keyid":"a","\u212Aeyid":"b"}`,
		"duplicate in signature":  `{"payloadType":"t","payload":"","signatures":[{"sig":"a","sig":"b"}]}`,
		"escaped duplicate":       `{"payload":"a","p\u0061yload":"b"}`,
		"trailing data":           ok + `{}`,
		"trailing garbage":        ok + `x`,
		"invalid UTF-8":           "{\"payloadType\":\"\xff\",\"payload\":\"\",\"signatures\":[]}",
		"not an object":           `[]`,
		"wrong type for payload":  `{"payloadType":"t","payload":1,"signatures":[]}`,
		"signatures not an array": `{"payloadType":"t","payload":"","signatures":{}}`,
		"empty":                   ``,
		"truncated":               ok[:20],
		"too deep":                `{"payloadType":"t","payload":"","signatures":[],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		_, err := ParseEnvelope([]byte(in))
		if !errors.Is(err, ErrEncoding) {
			t.Errorf("%s: got %v, want ErrEncoding", name, err)
		}
	}
}
