package main

import (
	"crypto"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
)

func newKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage signing keys (Ed25519; ECDSA P-256 for OMS signatures)",
	}
	cmd.AddCommand(newKeysGenerateCommand())
	return cmd
}

// keysGenerateOptions are the flags of `tarfa keys generate`.
type keysGenerateOptions struct {
	out     string
	keyType string
	force   bool
	asJSON  bool
}

// keysGenerateResult is keys generate's --json output.
type keysGenerateResult struct {
	Private string `json:"private"`
	Public  string `json:"public"`
	KeyID   string `json:"keyid"`
	Type    string `json:"type"`
	// OMSHint is the key's OMS v1.0 bundle hint (ECDSA keys only).
	OMSHint string `json:"oms_hint,omitempty"`
}

func (o *keysGenerateOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.out, "out", "", "key pair name: writes NAME (private) and NAME.pub (public)")
	cmd.Flags().StringVar(&o.keyType, "type", attest.KeyTypeEd25519, "key type: ed25519 (DSSE signatures, run reports) or ecdsa-p256 (OMS v1.0 model signatures)")
	cmd.Flags().BoolVar(&o.force, "force", false, "replace existing key files")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the file names and keyid as JSON")
	cmd.MarkFlagRequired("out")
}

func newKeysGenerateCommand() *cobra.Command {
	var opts keysGenerateOptions
	cmd := &cobra.Command{
		Use:   "generate --out NAME [--type ed25519|ecdsa-p256] [--force]",
		Short: "Generate a signing key pair: NAME and NAME.pub",
		Long: `Generate writes a new signing key pair, Ed25519 by default:

  NAME      private key, PKCS #8 PEM ("PRIVATE KEY"), unencrypted, mode 0600
  NAME.pub  public key, SubjectPublicKeyInfo PEM ("PUBLIC KEY"), mode 0644

Both are standard forms: "openssl pkey -in NAME -noout" reads them. Each file is
written to a temporary file and renamed into place. An existing key file is
never replaced unless --force is given. The command prints the keyid: the
lower-case hex SHA-256 of the public key's SubjectPublicKeyInfo DER, as in
"openssl pkey -pubin -in NAME.pub -outform DER | sha256sum".

--type ecdsa-p256 writes an ECDSA key on NIST P-256 in the same two forms
(PKCS #8 with the named curve; SubjectPublicKeyInfo): the key type of OpenSSF
Model Signing v1.0, for tarfa manifest sign --format oms. model_signing reads
NAME as --private-key and NAME.pub as --public-key. For it the command also
prints the OMS key hint: the hex SHA-256 of NAME.pub's PEM text, which the
signature's verificationMaterial.publicKey.hint carries. Ed25519 keys sign
Tarfa's DSSE form and run reports, which OMS does not accept.

Exit statuses: 0 ok, 1 error (including: a key file already exists, the
directory of NAME does not exist or cannot be written).`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if opts.out == "" {
				return fmt.Errorf("--out NAME is required (the key pair is written to NAME and NAME.pub)")
			}
			if opts.keyType != attest.KeyTypeEd25519 && opts.keyType != attest.KeyTypeECDSAP256 {
				return fmt.Errorf("--type %q: want %s or %s", opts.keyType, attest.KeyTypeEd25519, attest.KeyTypeECDSAP256)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeysGenerate(cmd.OutOrStdout(), opts)
		},
	}
	opts.addFlags(cmd)
	return cmd
}

func runKeysGenerate(out io.Writer, opts keysGenerateOptions) error {
	// The directory is checked first, so that errors name it, not a
	// temporary file in it.
	dir := filepath.Dir(opts.out)
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--out %s: directory %s does not exist (create it first)", opts.out, dir)
	} else if err != nil {
		return fmt.Errorf("--out %s: directory %s: %w", opts.out, dir, pathErr(err))
	} else if !st.IsDir() {
		return fmt.Errorf("--out %s: %s is not a directory", opts.out, dir)
	}
	if err := checkWritable(dir); err != nil {
		return fmt.Errorf("--out %s: %w", opts.out, err)
	}
	var priv crypto.Signer
	var hint string
	if opts.keyType == attest.KeyTypeECDSAP256 {
		k, err := attest.GenerateECDSAKey()
		if err != nil {
			return err
		}
		if hint, err = attest.OMSKeyHint(&k.PublicKey); err != nil {
			return err
		}
		priv = k
	} else {
		_, k, err := attest.GenerateKey()
		if err != nil {
			return err
		}
		priv = k
	}
	id, err := attest.PublicKeyID(priv.Public())
	if err != nil {
		return err
	}
	if err := attest.WriteSigningKeyPair(opts.out, priv, attest.WriteKeyOptions{Overwrite: opts.force}); err != nil {
		if errors.Is(err, attest.ErrKeyExists) {
			return fmt.Errorf("%w (pass --force to replace it)", err)
		}
		return fmt.Errorf("--out %s: %w", opts.out, pathErr(err))
	}
	if opts.asJSON {
		return writeJSON(out, keysGenerateResult{Private: opts.out, Public: opts.out + attest.PublicKeyFileSuffix, KeyID: id, Type: opts.keyType, OMSHint: hint})
	}
	_, err = fmt.Fprintf(out, "private key  %s\npublic key   %s\nkeyid        %s\n", opts.out, opts.out+attest.PublicKeyFileSuffix, id)
	if err == nil && hint != "" {
		_, err = fmt.Fprintf(out, "type         %s\noms hint     %s\n", opts.keyType, hint)
	}
	return err
}
