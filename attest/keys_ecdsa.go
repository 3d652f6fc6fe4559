package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Key types `tarfa keys generate --type` writes. Ed25519 keys sign the DSSE
// form (manifest.sig.json, run reports); ECDSA keys sign the OpenSSF Model
// Signing (OMS) v1.0 form (model.sig), whose key mode accepts only ECDSA.
const (
	KeyTypeEd25519   = "ed25519"
	KeyTypeECDSAP256 = "ecdsa-p256"
)

// GenerateECDSAKey returns a new ECDSA key on NIST P-256 from crypto/rand.
func GenerateECDSAKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// checkECDSACurve accepts the curves OMS v1.0 key mode supports (its
// algorithm registry, and model-transparency's _check_supported_ec_key):
// P-256, P-384 and P-521.
func checkECDSACurve(pub *ecdsa.PublicKey) error {
	switch pub.Curve {
	case elliptic.P256(), elliptic.P384(), elliptic.P521():
		return nil
	}
	return fmt.Errorf("ECDSA key on curve %s, want P-256, P-384 or P-521", pub.Curve.Params().Name)
}

// ecdsaHash is the digest an ECDSA key signs with: SHA-256 for P-256,
// SHA-384 for P-384, SHA-512 for P-521 (model-transparency's
// get_ec_key_hash; the Sigstore algorithm registry's PKIX_ECDSA_P*_SHA_*).
func ecdsaHash(pub *ecdsa.PublicKey) crypto.Hash {
	switch pub.Curve {
	case elliptic.P384():
		return crypto.SHA384
	case elliptic.P521():
		return crypto.SHA512
	}
	return crypto.SHA256
}

// PublicKeyID is KeyID for any key Tarfa reads: the lower-case hex SHA-256
// of the SubjectPublicKeyInfo DER (`openssl pkey -pubin -outform DER |
// sha256sum`).
func PublicKeyID(pub crypto.PublicKey) (string, error) {
	if k, ok := pub.(ed25519.PublicKey); ok {
		return KeyID(k)
	}
	der, err := marshalAnySPKI(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// OMSKeyHint is the key identifier an OMS v1.0 bundle carries in
// verificationMaterial.publicKey.hint: the lower-case hex SHA-256 of the
// public key's PEM text ("-----BEGIN PUBLIC KEY-----\n", the SPKI DER in
// base64 lines of 64, "\n-----END PUBLIC KEY-----\n"), as
// model-transparency's sign_ec_key computes it. It differs from
// PublicKeyID, which hashes the DER.
func OMSKeyHint(pub *ecdsa.PublicKey) (string, error) {
	p, err := MarshalAnyPublicKeyPEM(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:]), nil
}

func marshalAnySPKI(pub crypto.PublicKey) ([]byte, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return marshalSPKI(k)
	case *ecdsa.PublicKey:
		if err := checkECDSACurve(k); err != nil {
			return nil, err
		}
		return x509.MarshalPKIXPublicKey(k)
	}
	return nil, fmt.Errorf("public key type %T, want Ed25519 or ECDSA", pub)
}

// MarshalAnyPublicKeyPEM is MarshalPublicKeyPEM for an Ed25519 or ECDSA key.
func MarshalAnyPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := marshalAnySPKI(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// marshalAnyPrivateKeyPEM encodes an Ed25519 or ECDSA key as unencrypted
// PKCS #8 in a "PRIVATE KEY" PEM block.
func marshalAnyPrivateKeyPEM(priv crypto.Signer) ([]byte, error) {
	switch k := priv.(type) {
	case ed25519.PrivateKey:
		return MarshalPrivateKeyPEM(k)
	case *ecdsa.PrivateKey:
		if err := checkECDSACurve(&k.PublicKey); err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	}
	return nil, fmt.Errorf("private key type %T, want Ed25519 or ECDSA", priv)
}

// ParseAnyPublicKeyPEM decodes a SubjectPublicKeyInfo "PUBLIC KEY" PEM block
// holding an Ed25519 key or an ECDSA key on P-256, P-384 or P-521. Text
// before the block is skipped (certtool --pubkey-info writes some, and
// Python's load_pem_public_key skips it too); anything after it is refused.
func ParseAnyPublicKeyPEM(data []byte) (crypto.PublicKey, error) {
	block, err := decodeSinglePEM(data, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("SubjectPublicKeyInfo: %w", err)
	}
	switch k := k.(type) {
	case ed25519.PublicKey:
		return k, nil
	case *ecdsa.PublicKey:
		if err := checkECDSACurve(k); err != nil {
			return nil, err
		}
		return k, nil
	}
	return nil, fmt.Errorf("public key type %T, want Ed25519 or ECDSA", k)
}

// ParseAnyPrivateKeyPEM decodes an unencrypted private key: PKCS #8
// ("PRIVATE KEY") holding Ed25519 or ECDSA, or SEC 1 ("EC PRIVATE KEY", as
// `openssl ecparam -genkey` writes). ECDSA keys must be on P-256, P-384 or
// P-521.
func ParseAnyPrivateKeyPEM(data []byte) (crypto.Signer, error) {
	if b, _ := pem.Decode(data); b != nil && b.Type == "EC PRIVATE KEY" {
		block, err := decodeSinglePEM(data, "EC PRIVATE KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("SEC 1 EC private key: %w", err)
		}
		if err := checkECDSACurve(&k.PublicKey); err != nil {
			return nil, err
		}
		return k, nil
	}
	block, err := decodeSinglePEM(data, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS #8 private key: %w", err)
	}
	switch k := k.(type) {
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		if err := checkECDSACurve(&k.PublicKey); err != nil {
			return nil, err
		}
		return k, nil
	}
	return nil, fmt.Errorf("private key type %T, want Ed25519 or ECDSA", k)
}

// LoadSigningKey is LoadPrivateKey for an Ed25519 or ECDSA key (see
// ParseAnyPrivateKeyPEM), with the same refusal of a file others may read.
func LoadSigningKey(path string) (crypto.Signer, error) {
	data, err := readPrivateKeyFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseAnyPrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadAnyPublicKey is LoadPublicKey for an Ed25519 or ECDSA key (see
// ParseAnyPublicKeyPEM).
func LoadAnyPublicKey(path string) (crypto.PublicKey, error) {
	data, err := jnf.ReadFileLimit(path, jnf.MaxKeyFileSize, "key file")
	if err != nil {
		return nil, err
	}
	k, err := ParseAnyPublicKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// KeyTypeName names a key's type as the CLI spells it: "ed25519",
// "ecdsa-p256", "ecdsa-p384", "ecdsa-p521".
func KeyTypeName(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return KeyTypeEd25519
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return KeyTypeECDSAP256
		case elliptic.P384():
			return "ecdsa-p384"
		case elliptic.P521():
			return "ecdsa-p521"
		}
	}
	return fmt.Sprintf("%T", pub)
}

// SplitPublicKeys sorts keys by type: Ed25519 keys check the DSSE form,
// ECDSA keys the OMS form.
func SplitPublicKeys(keys []crypto.PublicKey) (ed []ed25519.PublicKey, ec []*ecdsa.PublicKey, err error) {
	for i, k := range keys {
		switch k := k.(type) {
		case ed25519.PublicKey:
			ed = append(ed, k)
		case *ecdsa.PublicKey:
			if err := checkECDSACurve(k); err != nil {
				return nil, nil, fmt.Errorf("key %d: %w", i, err)
			}
			ec = append(ec, k)
		default:
			return nil, nil, fmt.Errorf("key %d: type %T, want Ed25519 or ECDSA", i, k)
		}
	}
	return ed, ec, nil
}
