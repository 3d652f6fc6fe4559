package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

// spkiPrefix is the fixed DER prefix of an Ed25519 SubjectPublicKeyInfo
// (RFC 8410 §4): SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING (33) }.
var spkiPrefix, _ = hex.DecodeString("302a300506032b6570032100")

func TestKeyIDIsSHA256OfSPKI(t *testing.T) {
	pub, _ := testKey("a")
	want := sha256.Sum256(append(append([]byte(nil), spkiPrefix...), pub...))
	got := mustKeyID(t, pub)
	if got != hex.EncodeToString(want[:]) {
		t.Fatalf("KeyID: got %s, want %x", got, want)
	}
	if strings.ToLower(got) != got || len(got) != 64 {
		t.Fatalf("KeyID %q: want 64 lower-case hex digits", got)
	}
	if _, err := KeyID(pub[:31]); err == nil {
		t.Error("KeyID of a 31-byte key: no error")
	}
}

func TestPEMRoundTrip(t *testing.T) {
	pub, priv := testKey("a")
	privPEM, err := MarshalPrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := MarshalPublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(privPEM, []byte("-----BEGIN PRIVATE KEY-----\n")) || !bytes.HasPrefix(pubPEM, []byte("-----BEGIN PUBLIC KEY-----\n")) {
		t.Fatalf("PEM headers:\n%s\n%s", privPEM, pubPEM)
	}
	block, _ := pem.Decode(pubPEM)
	if !bytes.Equal(block.Bytes, append(append([]byte(nil), spkiPrefix...), pub...)) {
		t.Fatalf("SPKI DER %x, want prefix %x + key", block.Bytes, spkiPrefix)
	}
	priv2, err := ParsePrivateKeyPEM(privPEM)
	if err != nil || !priv2.Equal(priv) {
		t.Fatalf("private key round trip: %v", err)
	}
	pub2, err := ParsePublicKeyPEM(pubPEM)
	if err != nil || !pub2.Equal(pub) {
		t.Fatalf("public key round trip: %v", err)
	}
	// Surrounding white space is fine.
	if _, err := ParsePublicKeyPEM(append(append([]byte("\n\n"), pubPEM...), "\n  \n"...)); err != nil {
		t.Errorf("white space around PEM: %v", err)
	}
}

func TestParsePEMRejects(t *testing.T) {
	pub, priv := testKey("a")
	privPEM, _ := MarshalPrivateKeyPEM(priv)
	pubPEM, _ := MarshalPublicKeyPEM(pub)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPriv := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})
	ecPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})
	withHeader := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: ecDER})

	for name, in := range map[string][]byte{
		"empty":             nil,
		"not PEM":           []byte("hello"),
		"public as private": pubPEM,
		"ECDSA key":         ecPriv,
		"PEM headers":       withHeader,
		"trailing block":    append(append([]byte(nil), privPEM...), privPEM...),
		"trailing garbage":  append(append([]byte(nil), privPEM...), "x"...),
		"encrypted PKCS#8":  pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: ecDER}),
		"bad DER":           pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
	} {
		if k, err := ParsePrivateKeyPEM(in); err == nil {
			t.Errorf("ParsePrivateKeyPEM(%s): accepted %x", name, k)
		}
	}
	for name, in := range map[string][]byte{
		"private as public": privPEM,
		"ECDSA key":         ecPub,
		"trailing block":    append(append([]byte(nil), pubPEM...), pubPEM...),
		"bad DER":           pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}}),
	} {
		if k, err := ParsePublicKeyPEM(in); err == nil {
			t.Errorf("ParsePublicKeyPEM(%s): accepted %x", name, k)
		}
	}
}

func TestWriteKeyPair(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "signer")
	pubA, privA := testKey("a")
	_, privB := testKey("b")
	if err := WriteKeyPair(name, privA, WriteKeyOptions{}); err != nil {
		t.Fatal(err)
	}
	checkMode(t, name, 0o600)
	checkMode(t, name+".pub", 0o644)
	if k, err := LoadPrivateKey(name); err != nil || !k.Equal(privA) {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	if k, err := LoadPublicKey(name + ".pub"); err != nil || !k.Equal(pubA) {
		t.Fatalf("LoadPublicKey: %v", err)
	}
	before, _ := os.ReadFile(name)

	// No overwrite without the option, and nothing is changed.
	err := WriteKeyPair(name, privB, WriteKeyOptions{})
	if !errors.Is(err, ErrKeyExists) {
		t.Fatalf("second write: got %v, want ErrKeyExists", err)
	}
	if after, _ := os.ReadFile(name); !bytes.Equal(before, after) {
		t.Fatal("private key changed by a refused write")
	}
	// Only the public half existing is also refused, before writing anything.
	other := filepath.Join(dir, "other")
	os.WriteFile(other+".pub", []byte("x"), 0o644)
	if err := WriteKeyPair(other, privB, WriteKeyOptions{}); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("public half exists: got %v, want ErrKeyExists", err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private key written although the public file existed: %v", err)
	}

	// With Overwrite the pair is replaced.
	if err := WriteKeyPair(name, privB, WriteKeyOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadPrivateKey(name); err != nil || !k.Equal(privB) {
		t.Fatalf("after overwrite: %v", err)
	}
	checkMode(t, name, 0o600)

	// No temporary files are left behind.
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "other.pub signer signer.pub" {
		t.Fatalf("directory holds %q, want exactly other.pub signer signer.pub", got)
	}

	if err := WriteKeyPair(filepath.Join(dir, "missing-dir", "k"), privA, WriteKeyOptions{}); err == nil {
		t.Error("write into a missing directory: no error")
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %o, want %o", path, got, want)
	}
}

// requireTool returns the path of an external tool. A missing tool skips the
// test, unless TARFA_TEST_DISALLOW_SKIP is set, which turns the skip into a
// failure (house style: no silent green).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("TARFA_TEST_DISALLOW_SKIP") != "" {
			t.Fatalf("%s not found and TARFA_TEST_DISALLOW_SKIP is set: %v", name, err)
		}
		t.Skipf("%s not installed (apt-get install -y %s): interop not checked", name, name)
	}
	return p
}

func run(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestOpenSSLInterop checks that openssl reads the keys we write, that we
// read the keys openssl writes, and that signatures verify both ways,
// including a DSSE envelope whose signature openssl made.
func TestOpenSSLInterop(t *testing.T) {
	openssl := requireTool(t, "openssl")
	dir := t.TempDir()
	name := filepath.Join(dir, "k")
	pub, priv := testKey("openssl")
	if err := WriteKeyPair(name, priv, WriteKeyOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, nil, openssl, "pkey", "-in", name, "-noout")
	run(t, nil, openssl, "pkey", "-pubin", "-in", name+".pub", "-noout")
	// openssl derives the same public key file from our private key.
	ourPub, _ := os.ReadFile(name + ".pub")
	if got := run(t, nil, openssl, "pkey", "-in", name, "-pubout"); !bytes.Equal(got, ourPub) {
		t.Fatalf("openssl pkey -pubout:\n%s\nwant\n%s", got, ourPub)
	}
	// The documented keyid recipe.
	der := run(t, nil, openssl, "pkey", "-pubin", "-in", name+".pub", "-outform", "DER")
	if sum := sha256.Sum256(der); hex.EncodeToString(sum[:]) != mustKeyID(t, pub) {
		t.Fatalf("sha256 of openssl's DER %x, KeyID %s", sum, mustKeyID(t, pub))
	}
	// openssl verifies our signature over a DSSE PAE.
	env, err := SignEnvelope(priv, PayloadTypeInToto, []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	msg := filepath.Join(dir, "pae")
	sigFile := filepath.Join(dir, "sig")
	os.WriteFile(msg, PAE(env.PayloadType, []byte(`{"a":1}`)), 0o644)
	os.WriteFile(sigFile, sig, 0o644)
	run(t, nil, openssl, "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", name+".pub", "-in", msg, "-sigfile", sigFile)

	// A key openssl generated loads, and a DSSE envelope signed by openssl
	// verifies.
	osKey := filepath.Join(dir, "os.pem")
	run(t, nil, openssl, "genpkey", "-algorithm", "ed25519", "-out", osKey)
	osPubPEM := run(t, nil, openssl, "pkey", "-in", osKey, "-pubout")
	osPub, err := ParsePublicKeyPEM(osPubPEM)
	if err != nil {
		t.Fatal(err)
	}
	osPriv, err := LoadPrivateKey(osKey)
	if err != nil {
		t.Fatal(err)
	}
	if !osPriv.Public().(ed25519.PublicKey).Equal(osPub) {
		t.Fatal("openssl private and public key do not match after loading")
	}
	payload := []byte(`{"signed":"by openssl"}`)
	os.WriteFile(msg, PAE(PayloadTypeInToto, payload), 0o644)
	osSig := run(t, nil, openssl, "pkeyutl", "-sign", "-rawin", "-inkey", osKey, "-in", msg)
	osEnv := Envelope{
		PayloadType: PayloadTypeInToto,
		Payload:     base64.StdEncoding.EncodeToString(payload),
		Signatures:  []Signature{{KeyID: mustKeyID(t, osPub), Sig: base64.StdEncoding.EncodeToString(osSig)}},
	}
	got, id, err := VerifyEnvelope(osEnv, PayloadTypeInToto, []ed25519.PublicKey{pub, osPub})
	if err != nil || !bytes.Equal(got, payload) || id != mustKeyID(t, osPub) {
		t.Fatalf("openssl-signed envelope: payload %q keyid %s err %v", got, id, err)
	}
}

// TestKeyFilesAreReadSafely: a private key others may read is refused (as
// ssh does), and key paths that are not regular files are refused at once.
func TestKeyFilesAreReadSafely(t *testing.T) {
	name := filepath.Join(t.TempDir(), "k")
	if err := WriteKeyPair(name, mustPriv(t), WriteKeyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(name); err != nil {
		t.Fatalf("mode 0600 key: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		os.Chmod(name, mode)
		var pe *KeyPermissionError
		if _, err := LoadPrivateKey(name); !errors.As(err, &pe) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	syscall.Mkfifo(fifo, 0o600)
	for _, p := range []string{"/dev/zero", fifo} {
		var nr *jnf.NotRegularError
		if _, err := LoadPublicKey(p); !errors.As(err, &nr) {
			t.Errorf("public key %s: %v", p, err)
		}
		if _, err := LoadPrivateKey(p); !errors.As(err, &nr) {
			t.Errorf("private key %s: %v", p, err)
		}
	}
	big := filepath.Join(t.TempDir(), "big.pub")
	os.WriteFile(big, make([]byte, jnf.MaxKeyFileSize+1), 0o644)
	var le *jnf.LimitError
	if _, err := LoadPublicKey(big); !errors.As(err, &le) {
		t.Errorf("oversized public key: %v", err)
	}
}

func mustPriv(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}
