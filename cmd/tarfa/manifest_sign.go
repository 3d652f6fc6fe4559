package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

func init() {
	manifestSubcommands = append(manifestSubcommands, newManifestSignCommand, newManifestVerifyCommand)
}

// defaultModelName is the subject name used when --name is not given: the
// directory's base name.
func defaultModelName(dir, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.Base(abs), nil
}

func newManifestSignCommand() *cobra.Command {
	var key, name string
	cmd := &cobra.Command{
		Use:   "sign DIR --key NAME",
		Short: "Sign the manifest root (DSSE envelope over an in-toto statement)",
		Long: `Sign writes DIR/manifest.sig.json: a DSSE envelope (payloadType
application/vnd.in-toto+json, one Ed25519 signature) over an in-toto Statement v1
whose subject is the model (--name, default the directory's name) with the manifest
root as its sha256 digest. The manifest is first checked against the files.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if key == "" {
				return fmt.Errorf("--key NAME is required (make one with `tarfa keys generate --out NAME`)")
			}
			priv, err := attest.LoadPrivateKey(key)
			if err != nil {
				return err
			}
			n, err := defaultModelName(args[0], name)
			if err != nil {
				return err
			}
			env, err := attest.SignManifest(args[0], n, priv)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s as %q with key %s → %s\n", args[0], n, env.Signatures[0].KeyID, filepath.Join(args[0], "manifest.sig.json"))
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "PKCS#8 PEM private key")
	cmd.Flags().StringVar(&name, "name", "", "model name in the statement subject (default: the directory name)")
	return cmd
}

func newManifestVerifyCommand() *cobra.Command {
	var pubs []string
	var name string
	var asJSON, skipData bool
	cmd := &cobra.Command{
		Use:   "verify DIR --pub NAME.pub",
		Short: "Check the manifest signature and that the root matches the files",
		Long: `Verify checks DIR/manifest.sig.json against the trusted public key(s): the DSSE
signature, the statement (predicate type, subject name and digest = manifest root),
that the signed predicate describes this manifest byte for byte, and that the files
still hash to the signed root: record tables, copied config/tokenizer files, and
every record's bytes and padding (as ` + "`tarfa verify`" + `). --unsafe-skip-data leaves
out the record bytes (a changed expert byte then goes unnoticed).

Exit statuses: 0 verified, 1 error, 3 verification failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(pubs) == 0 {
				return fmt.Errorf("--pub NAME.pub is required")
			}
			var keys []ed25519.PublicKey
			for _, p := range pubs {
				k, err := attest.LoadPublicKey(p)
				if err != nil {
					return err
				}
				keys = append(keys, k)
			}
			n, err := defaultModelName(args[0], name)
			if err != nil {
				return err
			}
			update, finish := byteProgress(cmd.ErrOrStderr(), "verifying")
			var done, total int64
			if m, _, err := verify.LoadManifest(args[0]); err == nil {
				for _, e := range m.Entries {
					total += e.Length
				}
			}
			res, err := attest.VerifyManifest(args[0], n, keys, attest.VerifyManifestOptions{Context: cmd.Context(), UnsafeSkipData: skipData,
				OnRecord: func(_ string, r *jnf.Record) { done += r.Length; update(done, total) }})
			finish()
			if err != nil {
				return failVerification(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s is %q, root %s, signed by key %s\n", args[0], n, res.ModelManifest.Root.Hex(), res.KeyID)
			if skipData {
				fmt.Fprintln(cmd.OutOrStdout(), "UNSAFE: record data was not re-hashed (--unsafe-skip-data)")
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&pubs, "pub", nil, "trusted SPKI PEM public key (repeatable)")
	cmd.Flags().StringVar(&name, "name", "", "expected model name (default: the directory name)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verification result as JSON")
	cmd.Flags().BoolVar(&skipData, "unsafe-skip-data", false, "do not re-hash record data (UNSAFE: misses changed weights)")
	return cmd
}
