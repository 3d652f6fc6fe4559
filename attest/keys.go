package attest

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tarfa-ai/tarfa/jnf"
)

// PublicKeyFileSuffix is appended to a key pair's name for the public key file.
const PublicKeyFileSuffix = ".pub"

// ErrKeyExists is returned by WriteKeyPair when a key file is already there
// and overwriting was not asked for.
var ErrKeyExists = errors.New("key file already exists")

// GenerateKey returns a new Ed25519 key pair from crypto/rand.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// KeyID returns the keyid of pub: the lower-case hex SHA-256 of its
// SubjectPublicKeyInfo DER (the bytes inside the "PUBLIC KEY" PEM block), 64
// hex digits. For Ed25519 that DER is always the 12 bytes
// 30 2a 30 05 06 03 2b 65 70 03 21 00 followed by the 32-byte key, so the
// keyid is what `openssl pkey -pubin -in NAME.pub -outform DER | sha256sum`
// prints. It is neither go-securesystemslib's SHA256KeyID (an SSH "SHA256:"
// fingerprint) nor OpenSSF model-signing's key hint (SHA-256 of the PEM text).
func KeyID(pub ed25519.PublicKey) (string, error) {
	der, err := marshalSPKI(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

func marshalSPKI(pub ed25519.PublicKey) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ed25519 public key: %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	return x509.MarshalPKIXPublicKey(pub)
}

// MarshalPrivateKeyPEM encodes priv as a PKCS #8 "PRIVATE KEY" PEM block.
func MarshalPrivateKeyPEM(priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ed25519 private key: %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublicKeyPEM encodes pub as a SubjectPublicKeyInfo "PUBLIC KEY" PEM
// block.
func MarshalPublicKeyPEM(pub ed25519.PublicKey) ([]byte, error) {
	der, err := marshalSPKI(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// decodeSinglePEM returns the one PEM block in data, which must be of type
// want, with nothing but white space around it and no PEM headers.
func decodeSinglePEM(data []byte, want string) (*pem.Block, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM block found, want %q", want)
	}
	if block.Type != want {
		return nil, fmt.Errorf("PEM block type %q, want %q", block.Type, want)
	}
	if len(block.Headers) != 0 {
		return nil, fmt.Errorf("PEM block %q has headers (encrypted or legacy key?), want none", block.Type)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%d bytes of trailing data after the %q PEM block", len(rest), want)
	}
	return block, nil
}

// ParsePrivateKeyPEM decodes a PKCS #8 "PRIVATE KEY" PEM block holding an
// Ed25519 key. Encrypted keys and other key types are rejected.
func ParsePrivateKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	block, err := decodeSinglePEM(data, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS #8 private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key type %T, want ed25519.PrivateKey", k)
	}
	return priv, nil
}

// ParsePublicKeyPEM decodes a SubjectPublicKeyInfo "PUBLIC KEY" PEM block
// holding an Ed25519 key. Other key types are rejected.
func ParsePublicKeyPEM(data []byte) (ed25519.PublicKey, error) {
	k, err := ParseAnyPublicKeyPEM(data)
	if err != nil {
		return nil, err
	}
	return ed25519Only(k)
}

// ed25519Only returns k if it is an Ed25519 key, else an error naming its
// type and what such a key checks.
func ed25519Only(k crypto.PublicKey) (ed25519.PublicKey, error) {
	if pub, ok := k.(ed25519.PublicKey); ok {
		return pub, nil
	}
	return nil, fmt.Errorf("an %s key, want Ed25519 (an ECDSA key checks an OMS signature, model.sig, not a DSSE envelope)", KeyTypeName(k))
}

// LoadPrivateKey reads an Ed25519 private key written by WriteKeyPair (or
// any unencrypted PKCS #8 PEM Ed25519 key, such as `openssl genpkey
// -algorithm ed25519` writes).
//
// Like ssh, it refuses a key file that others may read (any group or other
// permission bit): a signing key readable by others is not a secret.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := readPrivateKeyFile(path)
	if err != nil {
		return nil, err
	}
	priv, err := ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return priv, nil
}

// readPrivateKeyFile reads a private key file (bounded), refusing one that
// group or others may access.
func readPrivateKeyFile(path string) ([]byte, error) {
	f, st, err := jnf.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, &KeyPermissionError{Path: path, Mode: perm}
	}
	return jnf.ReadFileLimit(path, jnf.MaxKeyFileSize, "key file")
}

// LoadPublicKey reads an Ed25519 public key in SubjectPublicKeyInfo PEM form.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	k, err := LoadAnyPublicKey(path)
	if err != nil {
		return nil, err
	}
	pub, err := ed25519Only(k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}

// KeyPermissionError refuses a private key file that group or others may
// access.
type KeyPermissionError struct {
	Path string
	Mode fs.FileMode
}

func (e *KeyPermissionError) Error() string {
	return fmt.Sprintf("private key %s has mode %04o: it may be read by others, so it is not used for signing (chmod 600 %s)", e.Path, e.Mode, e.Path)
}

// WriteKeyOptions controls WriteKeyPair.
type WriteKeyOptions struct {
	// Overwrite replaces existing key files. Without it WriteKeyPair fails
	// with ErrKeyExists if either file exists, and writes nothing.
	Overwrite bool
}

// WriteKeyPair writes the key pair NAME: the files name and name+".pub", in
// forms that standard tools read (openssl pkey, Python cryptography, Go
// crypto/x509):
//
//   - name: the private key as unencrypted PKCS #8 (RFC 5958) DER, Ed25519
//     algorithm identifier of RFC 8410 (OID 1.3.101.112) with the 32-byte
//     seed, in a "PRIVATE KEY" PEM block; file mode 0600.
//   - name.pub: the public key as SubjectPublicKeyInfo (RFC 5280, RFC 8410)
//     DER in a "PUBLIC KEY" PEM block; file mode 0644.
//
// Each file is written to a
// temporary file in the same directory, synced, and then renamed into place
// (or, without Overwrite, hard-linked so that an existing file is never
// replaced), so a reader never sees a partial key.
func WriteKeyPair(name string, priv ed25519.PrivateKey, opt WriteKeyOptions) error {
	return WriteSigningKeyPair(name, priv, opt)
}

// WriteSigningKeyPair is WriteKeyPair for an Ed25519 or an ECDSA key (P-256,
// P-384, P-521): the private key as PKCS #8 "PRIVATE KEY" (RFC 5208/5915
// for ECDSA, with the named-curve parameters), the public key as
// SubjectPublicKeyInfo "PUBLIC KEY" (RFC 5480 for ECDSA), which
// model-transparency's `--private-key` and `--public-key` read.
func WriteSigningKeyPair(name string, priv crypto.Signer, opt WriteKeyOptions) error {
	privPEM, err := marshalAnyPrivateKeyPEM(priv)
	if err != nil {
		return err
	}
	pubPEM, err := MarshalAnyPublicKeyPEM(priv.Public())
	if err != nil {
		return err
	}
	pubName := name + PublicKeyFileSuffix
	if !opt.Overwrite {
		for _, p := range []string{name, pubName} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s: %w", p, ErrKeyExists)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := writeFileAtomic(name, privPEM, 0o600, opt.Overwrite); err != nil {
		return err
	}
	if err := writeFileAtomic(pubName, pubPEM, 0o644, opt.Overwrite); err != nil {
		// Do not leave a private key without its public half.
		os.Remove(name)
		return err
	}
	return nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode, overwrite bool) error {
	f, err := jnf.CreateAtomic(path, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	if overwrite {
		return f.Commit()
	}
	if err := f.CommitNoReplace(); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", path, ErrKeyExists)
		}
		return err
	}
	return nil
}
