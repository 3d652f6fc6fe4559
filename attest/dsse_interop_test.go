package attest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	ssldsse "github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Interop with github.com/secure-systems-lab/go-securesystemslib@v0.11.1
// dsse, the reference Go DSSE implementation, used here only as a test
// oracle. Its Signer/Verifier interfaces leave the algorithm to the caller,
// so sslKey adapts an Ed25519 key with Tarfa's keyid.
type sslKey struct {
	priv ed25519.PrivateKey // nil for a verifier only
	pub  ed25519.PublicKey
	id   string
}

func (k sslKey) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(k.priv, data), nil
}

func (k sslKey) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(k.pub, data, sig) {
		return errors.New("ed25519: invalid signature")
	}
	return nil
}

func (k sslKey) KeyID() (string, error)   { return k.id, nil }
func (k sslKey) Public() crypto.PublicKey { return k.pub }

func newSSLKey(t *testing.T, label string) sslKey {
	pub, priv := testKey(label)
	return sslKey{priv: priv, pub: pub, id: mustKeyID(t, pub)}
}

func TestInteropPAE(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		body []byte
	}{
		{"", nil},
		{PayloadTypeInToto, []byte(`{"_type":"x"}`)},
		{"http://example.com/HelloWorld", []byte("hello world")},
		{"tÿpe with spaces", bytes.Repeat([]byte{0, 0xff, ' '}, 1000)},
	} {
		if got, want := PAE(tc.typ, tc.body), ssldsse.PAE(tc.typ, tc.body); !bytes.Equal(got, want) {
			t.Errorf("PAE(%q, %d bytes): got %q, want %q", tc.typ, len(tc.body), got, want)
		}
	}
}

// They verify ours: an envelope from SignStatement, through JSON.
func TestInteropTheyVerifyOurs(t *testing.T) {
	k := newSSLKey(t, "ours")
	stmt := testModelStatement(t)
	env, err := SignStatement(k.priv, stmt)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(env)
	var theirs ssldsse.Envelope
	if err := json.Unmarshal(data, &theirs); err != nil {
		t.Fatal(err)
	}
	ev, err := ssldsse.NewEnvelopeVerifier(sslKey{pub: k.pub, id: k.id})
	if err != nil {
		t.Fatal(err)
	}
	accepted, payload, err := ev.VerifyAndDecode(context.Background(), &theirs)
	if err != nil {
		t.Fatalf("go-securesystemslib rejects our envelope: %v", err)
	}
	if len(accepted) != 1 || accepted[0].KeyID != k.id {
		t.Fatalf("accepted %+v, want one key %s", accepted, k.id)
	}
	want, _ := json.Marshal(stmt)
	if !bytes.Equal(payload, want) {
		t.Fatalf("payload %s, want %s", payload, want)
	}
	// And a tampered one of ours is rejected by them too (the oracle works).
	theirs.PayloadType = "application/json"
	if _, err := ev.Verify(context.Background(), &theirs); err == nil {
		t.Fatal("go-securesystemslib accepts our envelope with a changed payloadType")
	}
}

// We verify theirs: an envelope made by their EnvelopeSigner, through JSON,
// with Tarfa's keyid and with no keyid.
func TestInteropWeVerifyTheirs(t *testing.T) {
	k := newSSLKey(t, "theirs")
	payload := []byte(`{"made":"by go-securesystemslib"}`)
	for _, signer := range []ssldsse.Signer{k, noKeyID{k}} {
		es, err := ssldsse.NewEnvelopeSigner(signer)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := es.SignPayload(context.Background(), PayloadTypeInToto, payload)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(theirs)
		env, err := ParseEnvelope(data)
		if err != nil {
			t.Fatal(err)
		}
		got, id, err := VerifyEnvelope(env, PayloadTypeInToto, []ed25519.PublicKey{k.pub})
		if err != nil {
			t.Fatalf("we reject their envelope (keyid %q): %v", theirs.Signatures[0].KeyID, err)
		}
		if !bytes.Equal(got, payload) || id != k.id {
			t.Fatalf("payload %q keyid %s, want %q %s", got, id, payload, k.id)
		}
	}
}

type noKeyID struct{ sslKey }

func (noKeyID) KeyID() (string, error) { return "", nil }

// TestInteropDivergences pins what the reference accepts and Tarfa rejects:
// URL-safe base64, and two signatures. It also pins the reason
// go-securesystemslib is test-only: its verifier prints to stdout when two
// signatures carry the same keyid.
func TestInteropDivergences(t *testing.T) {
	k1 := newSSLKey(t, "one")
	k2 := newSSLKey(t, "two")
	payload := []byte{0xfb, 0xff, 0xfe, '{', '}'} // std and URL base64 differ

	// URL-safe payload encoding: they accept, we reject.
	es, _ := ssldsse.NewEnvelopeSigner(k1)
	theirs, _ := es.SignPayload(context.Background(), PayloadTypeInToto, payload)
	urlEnv := *theirs
	urlEnv.Payload = strings.NewReplacer("+", "-", "/", "_").Replace(theirs.Payload)
	if urlEnv.Payload == theirs.Payload {
		t.Fatal("test payload has the same std and URL base64")
	}
	ev, _ := ssldsse.NewEnvelopeVerifier(sslKey{pub: k1.pub, id: k1.id})
	if _, err := ev.Verify(context.Background(), &urlEnv); err != nil {
		t.Fatalf("go-securesystemslib no longer accepts URL-safe base64 (%v): update the docs", err)
	}
	data, _ := json.Marshal(urlEnv)
	env, _ := ParseEnvelope(data)
	if _, _, err := VerifyEnvelope(env, PayloadTypeInToto, []ed25519.PublicKey{k1.pub}); !errors.Is(err, ErrEncoding) {
		t.Fatalf("URL-safe base64: got %v, want ErrEncoding", err)
	}

	// Two signers that share a keyid: they accept one and print to stdout;
	// we reject the envelope for having two signatures.
	same := "shared-keyid"
	a, b := k1, k2
	a.id, b.id = same, same
	es2, _ := ssldsse.NewEnvelopeSigner(a, b)
	two, err := es2.SignPayload(context.Background(), PayloadTypeInToto, payload)
	if err != nil {
		t.Fatal(err)
	}
	ev2, _ := ssldsse.NewEnvelopeVerifier(sslKey{pub: a.pub, id: same}, sslKey{pub: b.pub, id: same})
	var accepted []ssldsse.AcceptedKey
	printed := captureStdout(t, func() {
		accepted, err = ev2.Verify(context.Background(), two)
	})
	if err != nil || len(accepted) != 1 {
		t.Fatalf("go-securesystemslib on a duplicate keyid: accepted %d, err %v", len(accepted), err)
	}
	if !strings.Contains(printed, "Found envelope signed by different subkeys of the same main key") {
		t.Fatalf("go-securesystemslib stdout %q: expected its duplicate-keyid message (docs say it prints)", printed)
	}
	data, _ = json.Marshal(two)
	env, _ = ParseEnvelope(data)
	if _, _, err := VerifyEnvelope(env, PayloadTypeInToto, []ed25519.PublicKey{k1.pub, k2.pub}); !errors.Is(err, ErrSignatureCount) {
		t.Fatalf("two signatures: got %v, want ErrSignatureCount", err)
	}
}

// captureStdout runs f with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return <-done
}
